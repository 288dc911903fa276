package sourceshardcopy_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/rangelease"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/sourceshardcopy"
)

// TestCopierQuery copies one shard's ranges of a collection shared by
// three tenants with a document filter (namespaces.filters) on FerretDB:
// the target holds find({tenant: "b"}) of the source, byte for byte, and
// nothing of the other tenants.
func TestCopierQuery(t *testing.T) {
	ctx := context.Background()
	src := testserver.Start(t).MustClient(t)
	var docs []any
	for i := range 60 {
		docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "tenant", Value: string(rune('a' + i%3))}, {Key: "n", Value: i}})
	}
	if _, err := src.Database("app").Collection("c").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	key, _ := bson.Marshal(bson.D{{Key: "_id", Value: 1}})
	lo, _ := bson.Marshal(bson.D{{Key: "_id", Value: bson.MinKey{}}})
	hi, _ := bson.Marshal(bson.D{{Key: "_id", Value: bson.MaxKey{}}})
	table, err := sourceshardcopy.NewTable(key, []sourceshardcopy.Chunk{{Min: lo, Max: hi, Shard: "s0"}})
	if err != nil {
		t.Fatal(err)
	}
	query, _ := bson.Marshal(bson.D{{Key: "tenant", Value: "b"}})
	dst := testserver.Start(t).MustClient(t)
	c := &sourceshardcopy.Copier{Shard: "s0", Source: src, NS: "app.c", Target: dst.Database("app").Collection("c"),
		Query: query, BatchDocs: 7, Writer: &sink.Writer{MaxRetries: 3},
		Leaser: rangelease.New(dst.Database("mongoferry"), rangelease.Options{Task: "q", Owner: "w", TTL: time.Minute})}
	ranges, err := sourceshardcopy.PlanShard(ctx, src, "s0", "app.c", 0, source.Splitter{RangeDocuments: 10})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Copy(ctx, table, ranges); err != nil {
		t.Fatal(err)
	}
	read := func(coll *mongo.Collection, filter bson.Raw) []bson.Raw {
		cur, err := coll.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
		if err != nil {
			t.Fatal(err)
		}
		var out []bson.Raw
		for cur.Next(ctx) {
			out = append(out, append(bson.Raw(nil), cur.Current...))
		}
		return out
	}
	all, _ := bson.Marshal(bson.D{})
	want, got := read(src.Database("app").Collection("c"), query), read(dst.Database("app").Collection("c"), all)
	if len(want) != 20 || len(got) != len(want) {
		t.Fatalf("target holds %d documents, the source %d matching (of 60)", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(want[i], got[i]) {
			t.Fatalf("document %d: target %s, source %s", i, got[i], want[i])
		}
	}
}
