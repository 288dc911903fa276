package sourceshardcopy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestPassesShards drives Passes over scripted table reads: the copy
// ends on the first pass after which the table is unchanged, and each
// settling pass reads the owners of the changed chunks and the
// recipients of the commits since the last read, and no other shard.
func TestPassesShards(t *testing.T) {
	key := raw(t, bson.D{{Key: "sk", Value: 1}})
	bounds := []any{bson.MinKey{}, int64(10), int64(20), bson.MaxKey{}}
	table := func(owners ...string) *Table {
		cs := chunks(t, "sk", bounds, owners...)
		for i := range cs {
			if cs[i].Shard != []string{"s0", "s1", "s2"}[i] {
				cs[i].Version = bson.Timestamp{T: 2}
			}
		}
		tab, err := NewTable(key, cs)
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	start := table("s0", "s1", "s2")
	for _, tc := range []struct {
		name       string
		reads      []*Table
		recipients []string
		marked     string // shards whose oplog markers name a migration
		want       string // shards of each pass
		wantErr    error
	}{
		{"no migration: one pass", []*Table{start, start}, nil, "", "s0 s1 s2", nil},
		{"a chunk moved to s2: s2 again", []*Table{start, table("s0", "s2", "s2"), table("s0", "s2", "s2")}, nil, "", "s0 s1 s2|s2", nil},
		{"a commit into s1 whose chunk moved on to s2: both again", []*Table{start, table("s0", "s2", "s2"), table("s0", "s2", "s2")}, []string{"s1", "s2"}, "", "s0 s1 s2|s1 s2", nil},
		{"the same, named by the oplog markers", []*Table{start, table("s0", "s2", "s2"), table("s0", "s2", "s2")}, nil, "s1", "s0 s1 s2|s1 s2", nil},
		{"a recipient the copy does not read", []*Table{start, table("s0", "s2", "s2")}, []string{"s9"}, "", "s0 s1 s2", ErrUnknownShard},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			p := &Passes{NS: "app.c", Shards: []string{"s0", "s1", "s2"},
				Read: func(context.Context) (*Table, error) {
					if n >= len(tc.reads) {
						return nil, fmt.Errorf("read %d: none scripted", n)
					}
					n++
					return tc.reads[n-1], nil
				},
				Recipients: func(context.Context, time.Time) ([]string, error) { return tc.recipients, nil },
				Plan:       func(context.Context, string, int) ([]Range, error) { return nil, nil },
				Copy:       func(context.Context, string, int, *Table, []Range) error { return nil },
				Positions:  func(context.Context) (map[string]bson.Timestamp, error) { return map[string]bson.Timestamp{}, nil },
				Migrated: func(_ context.Context, shard string, _ bson.Timestamp) (bool, error) {
					return strings.Contains(tc.marked, shard), nil
				},
			}
			res, err := p.Run(context.Background())
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			var passes []string
			for _, s := range res.Shards {
				passes = append(passes, strings.Join(s, " "))
			}
			if got := strings.Join(passes, "|"); got != tc.want {
				t.Fatalf("passes read %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPassesRestartKeepsSavedPass: a leader that stops during pass 0,
// after saving it, and starts again after a chunk moved from s1 to s2
// compares the next table with the saved pass 0's table, which its
// copiers filtered by: s2 reads again. Comparing with the table read at
// the restart would see no change and miss the documents s1 had not
// copied before the move.
func TestPassesRestartKeepsSavedPass(t *testing.T) {
	key := raw(t, bson.D{{Key: "sk", Value: 1}})
	bounds := []any{bson.MinKey{}, int64(10), int64(20), bson.MaxKey{}}
	before, err := NewTable(key, chunks(t, "sk", bounds, "s0", "s1", "s2"))
	if err != nil {
		t.Fatal(err)
	}
	moved := chunks(t, "sk", bounds, "s0", "s2", "s2")
	moved[1].Version = bson.Timestamp{T: 2}
	after, err := NewTable(key, moved)
	if err != nil {
		t.Fatal(err)
	}
	saved := map[int]Pass{}
	crash := errors.New("the leader stops")
	run := func(table *Table, copyErr error) (Result, error) {
		p := &Passes{NS: "app.c", Shards: []string{"s0", "s1", "s2"},
			Read: func(context.Context) (*Table, error) { return table, nil },
			Plan: func(context.Context, string, int) ([]Range, error) { return nil, nil },
			Save: func(_ context.Context, pass Pass) (Pass, error) {
				if s, ok := saved[pass.N]; ok {
					return s, nil
				}
				saved[pass.N] = pass
				return pass, nil
			},
			Copy: func(context.Context, string, int, *Table, []Range) error { return copyErr },
		}
		return p.Run(context.Background())
	}
	if _, err := run(before, crash); !errors.Is(err, crash) {
		t.Fatalf("first run: %v, want the stop", err)
	}
	res, err := run(after, nil)
	if err != nil {
		t.Fatal(err)
	}
	var passes []string
	for _, s := range res.Shards {
		passes = append(passes, strings.Join(s, " "))
	}
	if got := strings.Join(passes, "|"); got != "s0 s1 s2|s2" {
		t.Fatalf("after the restart the passes read %q, want %q", got, "s0 s1 s2|s2")
	}
}
