package replay

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestReinsertFailureKeepsCheckpoint: a run of replacements by _id goes
// as one delete and one insert (Options.ReinsertReplacements). When the
// insert fails after the delete, the run stops with no update entry
// counted as applied: the checkpoint stays below the first of them, and a
// run started from it brings the target where the source is, every
// document in its last version (one document is updated twice in the
// run).
func TestReinsertFailureKeepsCheckpoint(t *testing.T) {
	const n = 10
	var entries []bson.Raw
	want := map[int32]int32{}
	entry := func(i int, op string, o, o2 bson.D) {
		d := bson.D{{Key: "ts", Value: bson.Timestamp{T: 100, I: uint32(i)}}, {Key: "t", Value: int64(1)}, {Key: "ns", Value: "db.c"},
			{Key: "op", Value: op}, {Key: "o", Value: o}}
		if o2 != nil {
			d = append(d, bson.E{Key: "o2", Value: o2})
		}
		entries = append(entries, mustRaw(t, d))
	}
	for id := int32(1); id <= n; id++ {
		entry(len(entries)+1, "i", bson.D{{Key: "_id", Value: id}, {Key: "v", Value: id}}, nil)
		want[id] = id
	}
	firstUpdate := bson.Timestamp{T: 100, I: uint32(len(entries) + 1)}
	update := func(id, v int32) {
		entry(len(entries)+1, "u", bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{{Key: "_id", Value: id}, {Key: "v", Value: v}}}},
			bson.D{{Key: "_id", Value: id}})
		want[id] = v
	}
	for id := int32(1); id <= n; id++ {
		update(id, 100+id)
	}
	update(3, 300)
	last := bson.Timestamp{T: 100, I: uint32(len(entries))}

	f := &fakeTarget{docs: map[string]map[int32]int32{}}
	var mu sync.Mutex
	deleted, failed := false, false
	failing := func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
		mu.Lock()
		switch models[0].(type) {
		case *mongo.DeleteOneModel:
			deleted = true
		case *mongo.InsertOneModel:
			if deleted && !failed {
				failed = true
				mu.Unlock()
				return errors.New("the target refused the insert")
			}
		}
		mu.Unlock()
		return f.apply(ctx, ns, models)
	}
	spec := config.Spec{Threads: config.Threads{Writers: 1}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	run := func(from bson.Timestamp, apply func(context.Context, catalog.Namespace, []mongo.WriteModel) error) (bson.Timestamp, error) {
		t.Helper()
		var saved bson.Timestamp
		var smu sync.Mutex
		r := New(Options{Task: "t", Spec: &spec, Reader: source.NewScripted(from, entries...), Mapper: mapper, From: from,
			CheckpointInterval: time.Hour, Apply: apply, ReinsertReplacements: true,
			Translator: oplog.Translator{WholeDocumentUpdates: true},
			SaveApplied: func(_ context.Context, ts bson.Timestamp) error {
				smu.Lock()
				saved = ts
				smu.Unlock()
				return nil
			}})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			select {
			case err := <-done:
				return saved, err
			default:
			}
			if r.Checkpoint() == last {
				break
			}
		}
		cancel()
		err := <-done
		if errors.Is(err, context.Canceled) {
			err = nil
		}
		smu.Lock()
		defer smu.Unlock()
		return saved, err
	}

	saved, err := run(bson.Timestamp{T: 100}, failing)
	if err == nil || !failed {
		t.Fatalf("the first run ended with %v (insert failed: %v); want the insert's error", err, failed)
	}
	if saved.Compare(firstUpdate) >= 0 {
		t.Fatalf("saved %v after the insert failed; want below the first update at %v", saved, firstUpdate)
	}
	if _, err := run(saved, f.apply); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if got := f.docs["db.c"]; !maps.Equal(got, want) {
		t.Errorf("target %v, source %v", got, want)
	}
	t.Logf("commands: %v", f.commands)
}

// TestReinsertable: only a replacement upsert by {_id} alone, whose
// document carries that _id, outside a serial namespace and system
// collections, may go as a delete and an insert.
func TestReinsertable(t *testing.T) {
	raw := func(d bson.D) bson.Raw { return mustRaw(t, d) }
	yes, no := true, false
	id := bson.D{{Key: "_id", Value: int32(1)}}
	doc := raw(bson.D{{Key: "_id", Value: int32(1)}, {Key: "v", Value: int32(2)}})
	ns := catalog.Namespace{DB: "db", Coll: "c"}
	tests := []struct {
		name string
		it   item
		want bool
	}{
		{"replacement upsert by _id", item{ns: ns, model: &mongo.ReplaceOneModel{Filter: raw(id), Replacement: doc, Upsert: &yes}}, true},
		{"not an upsert", item{ns: ns, model: &mongo.ReplaceOneModel{Filter: raw(id), Replacement: doc, Upsert: &no}}, false},
		{"upsert unset", item{ns: ns, model: &mongo.ReplaceOneModel{Filter: raw(id), Replacement: doc}}, false},
		{"a fuller key", item{ns: ns, model: &mongo.ReplaceOneModel{Filter: raw(bson.D{{Key: "sk", Value: 1}, {Key: "_id", Value: int32(1)}}), Replacement: doc, Upsert: &yes}}, false},
		{"document without the _id", item{ns: ns, model: &mongo.ReplaceOneModel{Filter: raw(id), Replacement: raw(bson.D{{Key: "v", Value: 1}}), Upsert: &yes}}, false},
		{"document with another _id type", item{ns: ns, model: &mongo.ReplaceOneModel{Filter: raw(id), Replacement: raw(bson.D{{Key: "_id", Value: int64(1)}}), Upsert: &yes}}, false},
		{"regex _id", item{ns: ns, model: &mongo.ReplaceOneModel{Filter: raw(bson.D{{Key: "_id", Value: bson.Regex{Pattern: "a"}}}), Replacement: raw(bson.D{{Key: "_id", Value: bson.Regex{Pattern: "a"}}}), Upsert: &yes}}, false},
		{"serial namespace", item{ns: ns, serial: true, model: &mongo.ReplaceOneModel{Filter: raw(id), Replacement: doc, Upsert: &yes}}, false},
		{"system collection", item{ns: catalog.Namespace{DB: "db", Coll: "system.buckets.m"}, model: &mongo.ReplaceOneModel{Filter: raw(id), Replacement: doc, Upsert: &yes}}, false},
		{"operator update", item{ns: ns, model: &mongo.UpdateOneModel{Filter: raw(id), Update: raw(bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 1}}}}), Upsert: &yes}}, false},
		{"filter not raw", item{ns: ns, model: &mongo.ReplaceOneModel{Filter: id, Replacement: doc, Upsert: &yes}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reinsertable(tt.it); got != tt.want {
				t.Errorf("reinsertable = %v, want %v", got, tt.want)
			}
		})
	}
}
