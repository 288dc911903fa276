package fullsync

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// thirds stands in for a sharded target's router (targetsharding.Router, tested
// on recorded layouts in its package): documents go to one of three
// "shards" by _id modulo 3.
type thirds struct{ split atomic.Int64 }

func (r *thirds) Group(docs []bson.Raw) [][]bson.Raw {
	out := make([][]bson.Raw, 3)
	for _, d := range docs {
		i := d.Lookup("_id").Int32() % 3
		out[i] = append(out[i], d)
	}
	r.split.Add(1)
	return out
}

// TestCopyPerTargetShard copies through a router: each batch is written
// as one command per owning shard, in parallel, and the target (a real
// FerretDB; no sharded cluster runs here) ends with exactly the source's
// documents.
func TestCopyPerTargetShard(t *testing.T) {
	ctx := context.Background()
	client := testserver.Start(t, testserver.Options{OplogBytes: -1}).MustClient(t)
	spec := &config.Spec{Mode: config.ModeFull, Threads: config.Threads{Readers: 1, Writers: 2}, Cache: config.Cache{BatchSize: 50}}
	spec.SetDefaults()
	store := checkpoint.NewStore(client, spec.Checkpoint.Database, "routed")
	c, err := New(Options{Task: "routed", Spec: spec, Target: client, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	coll := catalog.Collection{Source: catalog.Namespace{DB: "src", Coll: "k"}, Target: catalog.Namespace{DB: "dst", Coll: "k"}, Type: "collection"}
	ns := coll.Source.String()
	router := &thirds{}
	c.routers = map[string]Router{ns: router}
	var docs []bson.Raw
	for i := range 500 {
		d, _ := bson.Marshal(bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: i * i}})
		docs = append(docs, d)
	}
	if err := store.SavePlan(ctx, checkpoint.Plan{NS: ns, Ranges: 1, Estimated: 500}, []checkpoint.Range{{Index: 0, Filter: bson.Raw{5, 0, 0, 0, 0}, Describe: "all"}}); err != nil {
		t.Fatal(err)
	}
	ranges, err := store.Ranges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.openRange = func(context.Context, checkpoint.Range, catalog.Collection) (rangeCursor, int, error) {
		return &memoryCursor{docs: docs}, 50, nil
	}
	c.progress.addNamespace(ns, coll.Target.String(), 500, 1)
	if err := c.copyRanges(ctx, ranges, map[string]catalog.Collection{ns: coll}); err != nil {
		t.Fatal(err)
	}
	if router.split.Load() < 10 {
		t.Errorf("%d batches went through the router, want all 10", router.split.Load())
	}
	cur, err := client.Database("dst").Collection("k").Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var got []bson.Raw
	if err := cur.All(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(docs) {
		t.Fatalf("target holds %d documents, want %d", len(got), len(docs))
	}
	for _, d := range got {
		i := d.Lookup("_id").Int32()
		if !bytes.Equal(d, docs[i]) {
			t.Fatalf("_id %d: target %s, source %s", i, d, docs[i])
		}
	}
	if st := c.Status(); st.Documents != 500 {
		t.Errorf("copy status counts %d documents, want 500", st.Documents)
	}
}
