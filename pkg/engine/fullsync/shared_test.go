package fullsync

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/rangelease"
)

// TestHelperKilledBeforeTheRunMarkedTheCopy: a copy-only worker claims a
// range the task's run has saved but not yet marked started (the run
// marks the shared copy's ranges when it begins to share it, and may be
// slower than the worker), writes part of it and is killed, and so is the
// run. The user then runs the task alone (fullSync.workers 1, no leases,
// onConflict fail, the default). The range must be started in the
// checkpoint, so that the run clears what the worker wrote and copies it
// again; a pending range would be copied onto the worker's documents and
// stop on the first duplicate key. Real FerretDB holds both sides.
func TestHelperKilledBeforeTheRunMarkedTheCopy(t *testing.T) {
	ctx := context.Background()
	client := testserver.Start(t, testserver.Options{OplogBytes: -1}).MustClient(t)
	docs := make([]any, 60)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: i}}
	}
	if _, err := client.Database("src").Collection("k").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	spec := &config.Spec{Mode: config.ModeFull, Threads: config.Threads{Readers: 1, Writers: 1}, Cache: config.Cache{BatchSize: 10},
		Namespaces: config.Namespaces{Include: []string{"src.k"}, Rename: []config.Rename{{From: "src", To: "dst"}}}}
	spec.SetDefaults()
	if spec.FullSync.OnConflict != config.ConflictFail {
		t.Fatalf("default onConflict %q, want fail (the case under test)", spec.FullSync.OnConflict)
	}
	const task = "helper-first"
	store := checkpoint.NewStore(client, spec.Checkpoint.Database, task)
	ns := "src.k"
	if err := store.SavePlan(ctx, checkpoint.Plan{NS: ns, Ranges: 1, Estimated: 60}, []checkpoint.Range{{Index: 0, Filter: bson.Raw{5, 0, 0, 0, 0}, Describe: "all"}}); err != nil {
		t.Fatal(err)
	}

	// The copy-only worker: killed once its first batch is written.
	hctx, kill := context.WithCancel(ctx)
	defer kill()
	leaser := rangelease.New(client.Database(spec.Checkpoint.Database), rangelease.Options{Task: task, Owner: "copy-0", TTL: rangelease.DefaultTTL})
	helper, err := New(Options{Task: task, Spec: spec, Source: client, Target: client, Store: store, Leaser: leaser, Processes: 2,
		Hook: func(int64) { kill() }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := helper.HelpCopy(hctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("the killed worker's copy returned %v, want it cut short", err)
	}
	written, err := client.Database("dst").Collection("k").CountDocuments(ctx, bson.D{})
	if err != nil || written == 0 || written == 60 {
		t.Fatalf("the worker wrote %d documents (%v), want part of the range", written, err)
	}
	ranges, err := store.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ranges[0].State != checkpoint.RangeStarted {
		t.Errorf("the range the worker partly wrote is %q in the checkpoint, want %q", ranges[0].State, checkpoint.RangeStarted)
	}

	// The task run alone: no leases.
	run, err := New(Options{Task: task, Spec: spec, Source: client, Target: client, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	coll := catalog.Collection{Source: catalog.Namespace{DB: "src", Coll: "k"}, Target: catalog.Namespace{DB: "dst", Coll: "k"}, Type: "collection"}
	run.progress.addNamespace(ns, coll.Target.String(), 60, 1)
	if err := run.copyRanges(ctx, ranges, map[string]catalog.Collection{ns: coll}); err != nil {
		t.Fatalf("the run alone after the kill (the worker had written %d documents): %v", written, err)
	}
	n, err := client.Database("dst").Collection("k").CountDocuments(ctx, bson.D{})
	if err != nil || n != 60 {
		t.Fatalf("target holds %d documents (%v), want the source's 60", n, err)
	}
}
