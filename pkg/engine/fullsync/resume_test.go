package fullsync

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// TestResumedRangeTakesLateWrites resumes a copy whose range was started
// by a process that was killed, with onConflict fail. The range is cleared
// on the target and copied again; an insert the killed process had sent
// lands on the target after the clear (a server finishes a dead client's
// command), here injected as the range is opened again. The copy must
// take that document as its own, not stop on a conflict, and the target
// must hold exactly the source's documents. A real FerretDB is the target;
// the source range is served from memory.
func TestResumedRangeTakesLateWrites(t *testing.T) {
	ctx := context.Background()
	client := testserver.Start(t, testserver.Options{OplogBytes: -1}).MustClient(t)
	spec := &config.Spec{Mode: config.ModeFull, Threads: config.Threads{Readers: 1, Writers: 1}, Cache: config.Cache{BatchSize: 10}}
	spec.SetDefaults()
	if spec.FullSync.OnConflict != config.ConflictFail {
		t.Fatalf("default onConflict %q, want fail (the case under test)", spec.FullSync.OnConflict)
	}
	store := checkpoint.NewStore(client, spec.Checkpoint.Database, "resume")
	c, err := New(Options{Task: "resume", Spec: spec, Target: client, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	coll := catalog.Collection{Source: catalog.Namespace{DB: "src", Coll: "k"}, Target: catalog.Namespace{DB: "dst", Coll: "k"}, Type: "collection"}
	ns := coll.Source.String()
	tgt := client.Database("dst").Collection("k")
	var docs []bson.Raw
	for i := range 50 {
		d, _ := bson.Marshal(bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: i}})
		docs = append(docs, d)
	}
	if err := store.SavePlan(ctx, checkpoint.Plan{NS: ns, Ranges: 1, Estimated: 50}, []checkpoint.Range{{Index: 0, Filter: bson.Raw{5, 0, 0, 0, 0}, Describe: "all"}}); err != nil {
		t.Fatal(err)
	}
	ranges, err := store.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The killed attempt: the range marked started, part of it written.
	if err := store.MarkStarted(ctx, ranges[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tgt.InsertMany(ctx, []any{docs[0], docs[1], docs[2]}); err != nil {
		t.Fatal(err)
	}
	if ranges, err = store.Ranges(ctx); err != nil {
		t.Fatal(err)
	}
	c.openRange = func(ctx context.Context, _ checkpoint.Range, _ catalog.Collection) (rangeCursor, int, error) {
		// After the clear: the killed process's last insert lands.
		if _, err := tgt.InsertOne(ctx, docs[30]); err != nil {
			return nil, 0, err
		}
		return &memoryCursor{docs: docs}, 10, nil
	}
	c.progress.addNamespace(ns, coll.Target.String(), 50, 1)
	if err := c.copyRanges(ctx, ranges, map[string]catalog.Collection{ns: coll}); err != nil {
		t.Fatalf("resumed copy: %v", err)
	}
	n, err := tgt.CountDocuments(ctx, bson.D{})
	if err != nil || n != 50 {
		t.Fatalf("target holds %d documents (%v), want the source's 50", n, err)
	}
	done, err := store.Ranges(ctx)
	if err != nil || done[0].State != checkpoint.RangeDone {
		t.Fatalf("range %+v (%v), want done", done, err)
	}
}
