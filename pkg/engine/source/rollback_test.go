package source_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/wiresim"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestCheckRollback checks the resume guard against a primary (the wire
// stand-in) before and after a failover that rolled back entries 5 and 6
// of term 1, the new primary writing its own entry 5 in term 2: a
// checkpoint saved at entry 4 resumes; one saved at entry 5 or 6 stops
// with ErrRolledBack (which also reads as ErrOplogWindowLost, exit code
// 3), naming the position and the fix.
func TestCheckRollback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	old := wiresim.NewMemOplog()
	for i := uint32(1); i <= 6; i++ {
		old.Append(capEntry(t, i, 1, int(i), 1))
	}
	s, err := wiresim.Start(wiresim.Options{Oplog: old})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c := connect(ctx, t, s)
	at := func(i uint32, term int64) checkpoint.OpTime {
		return checkpoint.OpTime{TS: bson.Timestamp{T: 1000, I: i}, T: term}
	}
	for _, i := range []uint32{4, 5, 6} {
		if err := source.CheckRollback(ctx, c, at(i, 1)); err != nil {
			t.Fatalf("before the failover, entry %d: %v", i, err)
		}
	}
	newer := wiresim.NewMemOplog(old.Entries()[:4]...)
	newer.Append(capEntry(t, 5, 2, 50, 2), capEntry(t, 7, 2, 70, 2))
	s.Failover(newer)
	deadline := time.Now().Add(20 * time.Second)
	for {
		err = source.CheckRollback(ctx, c, at(4, 1))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the driver reconnecting
	}
	if err != nil {
		t.Fatalf("entry 4, the common point: %v", err)
	}
	for _, tc := range []struct {
		i    uint32
		want string
	}{{5, "holds an entry of term 2 there"}, {6, "holds no entry at that ts"}} {
		err := source.CheckRollback(ctx, c, at(tc.i, 1))
		if !errors.Is(err, source.ErrRolledBack) || !errors.Is(err, source.ErrOplogWindowLost) {
			t.Fatalf("entry %d rolled back: got %v; want ErrRolledBack and ErrOplogWindowLost", tc.i, err)
		}
		for _, part := range []string{tc.want, "(ts 1000,", "of term 1", "ferry reset -f", "nothing was written"} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("entry %d: message %q lacks %q", tc.i, err, part)
			}
		}
	}
}

// TestEntryAt checks the entries a tailer names for checkpoints: the
// newest handed out at or below each position, in term.
func TestEntryAt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := wiresim.NewMemOplog(capEntry(t, 2, 1, 2, 1), capEntry(t, 4, 1, 4, 1), capEntry(t, 6, 2, 6, 1))
	s, err := wiresim.Start(wiresim.Options{Oplog: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	tl := source.NewTailer(connect(ctx, t, s), bson.Timestamp{})
	if got := readUntil(ctx, t, tl, 3, 5*time.Second); len(got) != 3 {
		t.Fatalf("read %v", got)
	}
	for _, tc := range []struct {
		at   uint32
		want checkpoint.OpTime
		ok   bool
	}{
		{1, checkpoint.OpTime{}, false},
		{3, checkpoint.OpTime{TS: bson.Timestamp{T: 1000, I: 2}, T: 1}, true},
		{5, checkpoint.OpTime{TS: bson.Timestamp{T: 1000, I: 4}, T: 1}, true},
		{9, checkpoint.OpTime{TS: bson.Timestamp{T: 1000, I: 6}, T: 2}, true},
	} {
		got, ok := tl.EntryAt(bson.Timestamp{T: 1000, I: tc.at})
		if ok != tc.ok || got != tc.want {
			t.Errorf("EntryAt(%d) = %+v, %v; want %+v, %v", tc.at, got, ok, tc.want, tc.ok)
		}
	}
}
