package replay

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// fakeTarget stands in for a target server, whose write semantics it
// models on documents {_id, v} (the shapes the entries below produce):
// an insert command applies its inserts one by one and goes on after a
// duplicate key, reported as mongo.BulkWriteException at the write's
// index (as mongod and FerretDB do); update and delete commands apply in
// order; a bulkWrite applies its writes in order and stops at the first
// error, reported as mongo.ClientBulkWriteException (as mongod 8.0 does).
// It records the commands it was sent.
type fakeTarget struct {
	mu       sync.Mutex
	docs     map[string]map[int32]int32 // namespace -> _id -> v
	commands []string                   // kind and writes per command
	replaces int                        // replacements written
}

func (f *fakeTarget) coll(ns string) map[int32]int32 {
	if f.docs[ns] == nil {
		f.docs[ns] = map[int32]int32{}
	}
	return f.docs[ns]
}

// write applies one model; dup reports a duplicate key.
func (f *fakeTarget) write(ns string, m any) (dup bool, err error) {
	docs := f.coll(ns)
	id := func(d any) int32 { return d.(bson.Raw).Lookup("_id").Int32() }
	switch m := m.(type) {
	case *mongo.InsertOneModel:
		if _, ok := docs[id(m.Document)]; ok {
			return true, nil
		}
		docs[id(m.Document)] = m.Document.(bson.Raw).Lookup("v").Int32()
	case *mongo.ReplaceOneModel:
		f.replaces++
		k := id(m.Filter)
		if _, ok := docs[k]; ok || m.Upsert != nil && *m.Upsert {
			docs[k] = m.Replacement.(bson.Raw).Lookup("v").Int32()
		}
	case *mongo.UpdateOneModel:
		k := id(m.Filter)
		if _, ok := docs[k]; ok {
			v, err := m.Update.(bson.Raw).LookupErr("$set", "v")
			if err != nil {
				return false, fmt.Errorf("update %s: only $set of v is modelled", m.Update)
			}
			docs[k] = v.Int32()
		}
	case *mongo.DeleteOneModel:
		delete(docs, id(m.Filter))
	case *mongo.DeleteManyModel:
		in, err := m.Filter.(bson.Raw).LookupErr("_id", "$in")
		if err != nil {
			return false, fmt.Errorf("delete %s: only {_id: {$in}} is modelled", m.Filter)
		}
		vals, err := in.Array().Values()
		if err != nil {
			return false, err
		}
		for _, v := range vals {
			delete(docs, v.Int32())
		}
	default:
		return false, fmt.Errorf("unexpected model %T", m)
	}
	return false, nil
}

// apply is Options.Apply.
func (f *fakeTarget) apply(_ context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	kind := "update"
	switch models[0].(type) {
	case *mongo.InsertOneModel:
		kind = "insert"
	case *mongo.DeleteOneModel, *mongo.DeleteManyModel:
		kind = "delete"
	}
	f.commands = append(f.commands, fmt.Sprintf("%s %d", kind, len(models)))
	var bwe mongo.BulkWriteException
	for i, m := range models {
		dup, err := f.write(ns.String(), m)
		if err != nil {
			return err
		}
		if dup {
			bwe.WriteErrors = append(bwe.WriteErrors, mongo.BulkWriteError{WriteError: mongo.WriteError{Index: i, Code: 11000, Message: "E11000 duplicate key"}})
		}
	}
	if len(bwe.WriteErrors) > 0 {
		return bwe
	}
	return nil
}

// bulkWrite is Replayer.bulkWrite.
func (f *fakeTarget) bulkWrite(_ context.Context, writes []mongo.ClientBulkWrite) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commands = append(f.commands, fmt.Sprintf("bulkWrite %d", len(writes)))
	for i, w := range writes {
		var m any
		switch c := w.Model.(type) {
		case *mongo.ClientInsertOneModel:
			m = &mongo.InsertOneModel{Document: c.Document}
		case *mongo.ClientReplaceOneModel:
			m = &mongo.ReplaceOneModel{Filter: c.Filter, Replacement: c.Replacement, Upsert: c.Upsert}
		case *mongo.ClientUpdateOneModel:
			m = &mongo.UpdateOneModel{Filter: c.Filter, Update: c.Update, Upsert: c.Upsert}
		case *mongo.ClientDeleteOneModel:
			m = &mongo.DeleteOneModel{Filter: c.Filter}
		}
		dup, err := f.write(w.Database+"."+w.Collection, m)
		if err != nil {
			return err
		}
		if dup {
			return mongo.ClientBulkWriteException{WriteErrors: map[int]mongo.WriteError{i: {Index: i, Code: 11000, Message: "E11000 duplicate key"}}}
		}
	}
	return nil
}

// workload returns a seeded oplog of inserts, $v:2 updates and deletes
// over collections c0..c2, and the documents the source holds after each
// entry.
func workload(t *testing.T, seed uint64, n int) ([]bson.Raw, []map[string]map[int32]int32) {
	rng := rand.New(rand.NewPCG(seed, 1))
	src := map[string]map[int32]int32{}
	var entries []bson.Raw
	var states []map[string]map[int32]int32
	next := int32(1)
	for i := range n {
		ns := fmt.Sprintf("db.c%d", rng.IntN(3))
		if src[ns] == nil {
			src[ns] = map[int32]int32{}
		}
		ids := slices.Sorted(maps.Keys(src[ns]))
		ts := bson.Timestamp{T: 100, I: uint32(i + 1)}
		v := int32(i + 1)
		base := bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}, {Key: "ns", Value: ns}}
		switch p := rng.IntN(10); {
		case p < 5 || len(ids) == 0:
			id := next
			next++
			if p == 0 && next > 3 {
				id = next - 3 // re-inserted after a delete, or a duplicate key on the source (skipped)
				if _, ok := src[ns][id]; ok {
					id = next - 1
				}
			}
			if _, ok := src[ns][id]; ok {
				continue
			}
			src[ns][id] = v
			entries = append(entries, mustRaw(t, append(base, bson.E{Key: "op", Value: "i"}, bson.E{Key: "o", Value: bson.D{{Key: "_id", Value: id}, {Key: "v", Value: v}}})))
		case p < 8:
			id := ids[rng.IntN(len(ids))]
			src[ns][id] = v
			entries = append(entries, mustRaw(t, append(base, bson.E{Key: "op", Value: "u"},
				bson.E{Key: "o", Value: bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "v", Value: v}}}}}}},
				bson.E{Key: "o2", Value: bson.D{{Key: "_id", Value: id}}})))
		default:
			id := ids[rng.IntN(len(ids))]
			delete(src[ns], id)
			entries = append(entries, mustRaw(t, append(base, bson.E{Key: "op", Value: "d"}, bson.E{Key: "o", Value: bson.D{{Key: "_id", Value: id}}})))
		}
		snap := map[string]map[int32]int32{}
		for k, m := range src {
			snap[k] = maps.Clone(m)
		}
		states = append(states, snap)
	}
	return entries, states
}

// wholeDocuments rewrites workload's updates as a FerretDB source logs
// them: {$v: 1, $set: <the whole new document>}, o2 {_id}.
func wholeDocuments(t *testing.T, entries []bson.Raw) []bson.Raw {
	out := make([]bson.Raw, len(entries))
	for i, e := range entries {
		out[i] = e
		if e.Lookup("op").StringValue() != "u" {
			continue
		}
		id := e.Lookup("o2", "_id").Int32()
		v := e.Lookup("o", "diff", "u", "v").Int32()
		out[i] = mustRaw(t, bson.D{{Key: "ts", Value: e.Lookup("ts")}, {Key: "t", Value: int64(1)}, {Key: "ns", Value: e.Lookup("ns").StringValue()},
			{Key: "op", Value: "u"}, {Key: "o", Value: bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{{Key: "_id", Value: id}, {Key: "v", Value: v}}}}},
			{Key: "o2", Value: bson.D{{Key: "_id", Value: id}}}})
	}
	return out
}

// TestWritersOverCopy replays a mixed oplog over a target that already
// holds the source's documents as of an entry within it (the copy/replay
// overlap; a resume from an older checkpoint looks the same): inserts of
// documents the target has fall back to replacements, and the target
// ends equal to the source. The writers send long commands: many writes
// per command, with and without bulkWrite.
func TestWritersOverCopy(t *testing.T) {
	cases := []struct {
		name      string
		seed      uint64
		copiedAt  int // entries the copy reflects; -1: an empty target
		bulkWrite bool
		writers   int
		serial    bool // Options.SerialUpdates, checked to hold
		// whole: updates logged as whole documents (FerretDB), applied
		// with Options.ReinsertReplacements: runs of them go as deletes
		// and inserts.
		whole bool
	}{
		{"empty target", 1, -1, false, 2, false, false},
		{"overlap", 2, 300, false, 4, false, false},
		{"overlap, one writer", 3, 150, false, 1, false, false},
		{"empty target, bulkWrite", 4, -1, true, 2, false, false},
		{"overlap, bulkWrite", 5, 300, true, 4, false, false},
		{"overlap, serial updates", 6, 300, false, 4, true, false},
		{"empty target, whole-document updates reinserted", 7, -1, false, 2, true, true},
		{"overlap, whole-document updates reinserted", 8, 300, false, 4, true, true},
		{"overlap, whole-document updates reinserted, one writer", 9, 150, false, 1, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			entries, states := workload(t, c.seed, 1200)
			updateEntries := 0
			if c.whole {
				entries = wholeDocuments(t, entries)
				for _, e := range entries {
					if e.Lookup("op").StringValue() == "u" {
						updateEntries++
					}
				}
			}
			f := &fakeTarget{docs: map[string]map[int32]int32{}}
			if c.copiedAt >= 0 {
				for ns, m := range states[c.copiedAt] {
					f.docs[ns] = maps.Clone(m)
				}
			}
			spec := config.Spec{Threads: config.Threads{Writers: c.writers}, Cache: config.Cache{BatchSize: 200}}
			spec.SetDefaults()
			mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
			if err != nil {
				t.Fatal(err)
			}
			from := bson.Timestamp{T: 100}
			last := entries[len(entries)-1].Lookup("ts")
			reader := source.NewScripted(from)
			apply := f.apply
			var updating sync.Map // database -> *atomic.Int32: update commands under way
			var overlapped, updates atomic.Int32
			if c.serial {
				apply = func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
					if _, ins := models[0].(*mongo.InsertOneModel); ins {
						return f.apply(ctx, ns, models)
					}
					switch models[0].(type) {
					case *mongo.DeleteOneModel, *mongo.DeleteManyModel:
						return f.apply(ctx, ns, models)
					}
					v, _ := updating.LoadOrStore(ns.DB, new(atomic.Int32))
					n := v.(*atomic.Int32)
					if n.Add(1) > 1 {
						overlapped.Add(1)
					}
					updates.Add(1)
					time.Sleep(200 * time.Microsecond) // room for another writer to overlap
					defer n.Add(-1)
					return f.apply(ctx, ns, models)
				}
			}
			r := New(Options{Task: "t", Spec: &spec, Reader: reader, Mapper: mapper, From: from, SerialUpdates: c.serial,
				Translator: oplog.Translator{WholeDocumentUpdates: c.whole}, ReinsertReplacements: c.whole,
				OverlapUntil: bson.Timestamp{T: 100, I: uint32(max(c.copiedAt, 0) + 1)}, CheckpointInterval: time.Hour, Apply: apply})
			if c.bulkWrite {
				r.bulkWrite = f.bulkWrite
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			// Arriving all at once, the entries fill the writers' batches.
			reader.Append(entries...)
			lt, li := last.Timestamp()
			for deadline := time.Now().Add(10 * time.Second); r.Checkpoint() != (bson.Timestamp{T: lt, I: li}) && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			}
			cancel()
			if err := <-done; err != nil && ctx.Err() == nil {
				t.Fatal(err)
			}
			want := states[len(states)-1]
			for ns, m := range want {
				if got := f.docs[ns]; !maps.Equal(got, m) && (len(got) > 0 || len(m) > 0) {
					t.Errorf("%s: target %v, source %v", ns, got, m)
				}
			}
			st := r.Status()
			if st.WritesPerCommand < 2 {
				t.Errorf("%.1f writes per command (%v commands, %v writes); want long commands", st.WritesPerCommand, st.WriteCommands, st.WritesSent)
			}
			if c.bulkWrite && st.WriteCommands["bulkWrite"] == 0 {
				t.Errorf("no bulkWrite command sent: %v", st.WriteCommands)
			}
			// Over a copy, inserts that meet its documents are replaced
			// too: counted on an empty target only.
			if c.whole && c.copiedAt < 0 && f.replaces*5 > updateEntries {
				t.Errorf("%d of %d replacements by _id written as update statements; want most as deletes and inserts (%v)", f.replaces, updateEntries, st.WritesSent)
			}
			// With whole-document updates reinserted, a round may send no
			// update command at all.
			if c.serial && (overlapped.Load() > 0 || updates.Load() == 0 && !c.whole) {
				t.Errorf("%d of %d update commands ran beside another to the same database; want one at a time", overlapped.Load(), updates.Load())
			}
			t.Logf("%d commands, %.1f writes per command: %v", len(f.commands), st.WritesPerCommand, st.WriteCommands)
		})
	}
}
