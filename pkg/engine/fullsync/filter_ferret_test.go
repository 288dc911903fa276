package fullsync

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// TestFilteredCopyOnFerretDB copies a shared collection split in _id
// ranges with a filter on one tenant (namespaces.filters): the target
// must hold exactly what find(filter) returns on the source, byte for
// byte, and none of the other tenants' documents; a collection without a
// filter is copied whole.
func TestFilteredCopyOnFerretDB(t *testing.T) {
	if testing.Short() {
		t.Skip("needs FerretDB servers (make ferretdb); skipped with -short")
	}
	src := testserver.Start(t, testserver.Options{OplogBytes: -1}).MustClient(t)
	dst := testserver.Start(t, testserver.Options{OplogBytes: -1}).MustClient(t)
	ctx := context.Background()

	tenants := []string{"acme", "beta", "gamma"}
	var orders, invoices []any
	for i := range 600 {
		orders = append(orders, bson.D{{Key: "_id", Value: int32(i)}, {Key: "tenant", Value: tenants[i%3]},
			{Key: "total", Value: float64(i%97) * 1.25}, {Key: "items", Value: bson.A{bson.D{{Key: "sku", Value: fmt.Sprintf("s%d", i%7)}}}}})
		if i < 50 {
			invoices = append(invoices, bson.D{{Key: "_id", Value: int32(i)}, {Key: "tenant", Value: tenants[i%3]}})
		}
	}
	if _, err := src.Database("shop").Collection("orders").InsertMany(ctx, orders); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Database("shop").Collection("invoices").InsertMany(ctx, invoices); err != nil {
		t.Fatal(err)
	}

	query := `{"tenant": "acme", "$or": [{"total": {"$gte": 10}}, {"items.sku": "s3"}]}`
	spec := &config.Spec{
		Namespaces: config.Namespaces{Filters: []config.Filter{{Namespace: "shop.orders", Query: config.Query(query)}}},
		FullSync:   config.FullSync{Split: config.SplitAlways, RangeDocuments: 100},
	}
	spec.SetDefaults()
	store := checkpoint.NewStore(dst, spec.Checkpoint.Database, "filtered")
	c, err := New(Options{Task: "filtered", Spec: spec, Source: src, Target: dst, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Preflight(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	ranges, err := store.Ranges(ctx)
	if err != nil || len(ranges) < 2 {
		t.Fatalf("%d ranges (%v): want the copy split in several", len(ranges), err)
	}

	filter, err := spec.Namespaces.Filters[0].Query.Document()
	if err != nil {
		t.Fatal(err)
	}
	want := sortedDocs(ctx, t, src.Database("shop").Collection("orders"), filter)
	got := sortedDocs(ctx, t, dst.Database("shop").Collection("orders"), bson.D{})
	if len(want) == 0 || len(want) == len(orders) {
		t.Fatalf("the filter selects %d of %d documents: the test needs a proper subset", len(want), len(orders))
	}
	if len(got) != len(want) {
		t.Fatalf("target holds %d documents, find(filter) on the source %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("document %d: target %s, source %s", i, got[i], want[i])
		}
	}
	if n, err := dst.Database("shop").Collection("orders").CountDocuments(ctx, bson.D{{Key: "tenant", Value: bson.D{{Key: "$ne", Value: "acme"}}}}); err != nil || n != 0 {
		t.Errorf("target holds %d documents of other tenants (%v), want none", n, err)
	}
	if n, err := dst.Database("shop").Collection("invoices").CountDocuments(ctx, bson.D{}); err != nil || n != int64(len(invoices)) {
		t.Errorf("unfiltered shop.invoices: %d documents on the target (%v), want all %d", n, err, len(invoices))
	}
	t.Logf("copied %d of %d documents of shop.orders in %d ranges", len(got), len(orders), len(ranges))
}

// sortedDocs returns the documents of coll that match filter, by _id.
func sortedDocs(ctx context.Context, t *testing.T, coll *mongo.Collection, filter any) []bson.Raw {
	t.Helper()
	cur, err := coll.Find(ctx, filter, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []bson.Raw
	for cur.Next(ctx) {
		out = append(out, bytes.Clone(cur.Current))
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
