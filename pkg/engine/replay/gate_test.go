package replay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestGate has writers submit batches of random sizes to a gate whose
// commands take a while, as a target's round trips do, and checks what
// the writers rely on: every batch is applied exactly once, in one
// command, and before its writer goes on; commands that are not full
// never exceed the limit in flight; and batches are combined, so there
// are fewer commands than batches.
func TestGate(t *testing.T) {
	cases := []struct {
		name             string
		writers, batches int
		limit, full      int
		maxBatch         int
		wantCombined     bool
	}{
		{"one in flight, small batches", 16, 40, 1, 1000, 20, true},
		{"one in flight, batches near full", 8, 40, 1, 100, 90, true},
		{"two in flight", 16, 40, 2, 1000, 50, true},
		{"a limit per writer: never waits", 4, 40, 4, 1000, 50, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newGate(c.limit, c.full)
			var mu sync.Mutex
			inflight, partialInflight, maxPartial, commands := 0, 0, 0, 0
			applied := map[string]int{} // writer/batch -> times applied
			send := func(take []*lot) error {
				writes := 0
				for _, l := range take {
					writes += len(l.items)
				}
				partial := writes < c.full
				mu.Lock()
				inflight++
				commands++
				if partial {
					partialInflight++
					maxPartial = max(maxPartial, partialInflight)
				}
				for _, l := range take {
					applied[l.items[0].kind]++
				}
				mu.Unlock()
				time.Sleep(200 * time.Microsecond)
				mu.Lock()
				inflight--
				if partial {
					partialInflight--
				}
				mu.Unlock()
				return nil
			}
			var wg sync.WaitGroup
			for w := range c.writers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 7))
					l := &lot{signal: make(chan lotSignal, 1)}
					for b := range c.batches {
						id := fmt.Sprintf("%d/%d", w, b)
						l.items = make([]item, 1+rng.IntN(c.maxBatch))
						l.items[0].kind = id
						if err := g.submit(context.Background(), l, send); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						n := applied[id]
						mu.Unlock()
						if n != 1 {
							t.Errorf("batch %s applied %d times when its writer went on", id, n)
						}
					}
				})
			}
			wg.Wait()
			if len(applied) != c.writers*c.batches {
				t.Errorf("%d batches applied, want %d", len(applied), c.writers*c.batches)
			}
			if maxPartial > c.limit {
				t.Errorf("%d commands that were not full in flight at once, limit %d", maxPartial, c.limit)
			}
			if combined := commands < c.writers*c.batches; combined != c.wantCombined {
				t.Errorf("%d commands for %d batches; want combined %v", commands, c.writers*c.batches, c.wantCombined)
			}
			t.Logf("%d commands for %d batches", commands, c.writers*c.batches)
		})
	}
}

// TestGateFailure checks that a failed command fails every batch it
// carried and that no writer waits forever.
func TestGateFailure(t *testing.T) {
	g := newGate(1, 1000)
	boom := fmt.Errorf("boom")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			l := &lot{signal: make(chan lotSignal, 1), items: make([]item, 3)}
			errs <- g.submit(ctx, l, func([]*lot) error {
				time.Sleep(time.Millisecond)
				return boom
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != boom {
			t.Errorf("submit returned %v, want the command's error", err)
		}
	}
	if ctx.Err() != nil {
		t.Error("a writer waited until the deadline")
	}
}

// TestWritersCombineOverBulkWrite replays a mixed oplog through many
// writers onto a target that has the bulkWrite command and takes a while
// per command: writers' batches are combined into few commands, every
// document's writes arrive in oplog order, no write is in a command while
// the checkpoint is at or past its entry, and the target ends equal to
// the source.
func TestWritersCombineOverBulkWrite(t *testing.T) {
	cases := []struct {
		name    string
		seed    uint64
		writers int
		delay   time.Duration
		// raw: commands built from the raw documents (bulkcmd.go), read
		// back into the models the fake target applies; otherwise the
		// driver's models.
		raw bool
	}{
		{"16 writers, 1ms per command", 11, 16, time.Millisecond, false},
		{"4 writers, 200us per command", 12, 4, 200 * time.Microsecond, false},
		{"1 writer", 13, 1, 200 * time.Microsecond, false},
		{"raw commands, 16 writers, 1ms per command", 11, 16, time.Millisecond, true},
		{"raw commands, 4 writers, 200us per command", 12, 4, 200 * time.Microsecond, true},
		{"raw commands, 1 writer", 13, 1, 200 * time.Microsecond, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			entries, states := workload(t, c.seed, 3000)
			f := &fakeTarget{docs: map[string]map[int32]int32{}}
			r, reader, last := newTestReplayer(t, c.writers, f)
			var mu sync.Mutex
			last1 := map[string]int32{} // namespace/_id -> v of its last write
			apply := func(ctx context.Context, writes []mongo.ClientBulkWrite) error {
				cp := r.Checkpoint()
				mu.Lock()
				for _, w := range writes {
					id, v, ok := idAndV(w.Model)
					if !ok {
						continue
					}
					if ts := (bson.Timestamp{T: 100, I: uint32(v)}); !ts.After(cp) {
						t.Errorf("write of entry %d in a command while the checkpoint is at %d", v, cp.I)
					}
					k := fmt.Sprintf("%s.%s/%d", w.Database, w.Collection, id)
					if v < last1[k] {
						t.Errorf("%s: entry %d written after entry %d", k, v, last1[k])
					}
					last1[k] = v
				}
				mu.Unlock()
				time.Sleep(c.delay)
				return f.bulkWrite(ctx, writes)
			}
			r.bulkWrite = apply
			if c.raw {
				r.bulkWrite = func(context.Context, []mongo.ClientBulkWrite) error {
					t.Error("a batch the raw command builder should have covered went through the driver's models")
					return errors.New("not covered")
				}
				r.rawBulk = func(ctx context.Context, cmd bson.Raw) (bson.Raw, error) {
					writes, err := readBulkWrite(cmd)
					if err != nil {
						t.Error(err)
						return nil, err
					}
					return bulkWriteResult(apply(ctx, writes))
				}
			}
			runToEnd(t, r, reader, entries, last)
			want := states[len(states)-1]
			for ns, m := range want {
				if got := f.docs[ns]; !mapsEqual(got, m) {
					t.Errorf("%s: target %v, source %v", ns, got, m)
				}
			}
			st := r.Status()
			if c.writers > 1 && st.WritesPerCommand < 20 {
				t.Errorf("%.1f writes per command (%v); want combined commands", st.WritesPerCommand, st.WriteCommands)
			}
			t.Logf("%.1f writes per command: %v", st.WritesPerCommand, st.WriteCommands)
		})
	}
}

// newTestReplayer returns a Replayer of writers writers onto f (batches
// of up to 200 writes), its reader, and the position it starts after.
func newTestReplayer(t *testing.T, writers int, f *fakeTarget) (*Replayer, *source.Scripted, bson.Timestamp) {
	t.Helper()
	spec := config.Spec{Threads: config.Threads{Writers: writers}, Cache: config.Cache{BatchSize: 200}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	from := bson.Timestamp{T: 100}
	reader := source.NewScripted(from)
	r := New(Options{Task: "t", Spec: &spec, Reader: reader, Mapper: mapper, From: from, CheckpointInterval: time.Hour, Apply: f.apply})
	return r, reader, from
}

// runToEnd runs r until its checkpoint reaches the last of entries, which
// arrive all at once, and stops it.
func runToEnd(t *testing.T, r *Replayer, reader *source.Scripted, entries []bson.Raw, _ bson.Timestamp) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	reader.Append(entries...)
	lt, li := entries[len(entries)-1].Lookup("ts").Timestamp()
	for deadline := time.Now().Add(20 * time.Second); r.Checkpoint() != (bson.Timestamp{T: lt, I: li}) && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	if cp := r.Checkpoint(); cp != (bson.Timestamp{T: lt, I: li}) {
		t.Fatalf("checkpoint %v, want the last entry's %v", cp, bson.Timestamp{T: lt, I: li})
	}
}

// idAndV returns the _id and v of the document a bulkWrite model writes
// (the shapes workload's entries produce); false for a delete.
func idAndV(m mongo.ClientWriteModel) (id, v int32, ok bool) {
	switch m := m.(type) {
	case *mongo.ClientInsertOneModel:
		d := m.Document.(bson.Raw)
		return d.Lookup("_id").Int32(), d.Lookup("v").Int32(), true
	case *mongo.ClientReplaceOneModel:
		return m.Filter.(bson.Raw).Lookup("_id").Int32(), m.Replacement.(bson.Raw).Lookup("v").Int32(), true
	case *mongo.ClientUpdateOneModel:
		return m.Filter.(bson.Raw).Lookup("_id").Int32(), m.Update.(bson.Raw).Lookup("$set", "v").Int32(), true
	}
	return 0, 0, false
}

// mapsEqual is maps.Equal with nil and empty maps equal.
func mapsEqual(a, b map[int32]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
