package wiresim

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// TestWriteBlockProxy: in front of a real FerretDB, which has no
// setUserWriteBlockMode, the proxy blocks user writes as MongoDB does
// (code 372, nothing reaches the server) while reads, and writes to
// internal databases, go on; unblocking lets writes through again.
func TestWriteBlockProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	ctx := context.Background()
	srv := testserver.Start(t)
	p, err := StartWriteBlockProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	client, err := mongo.Connect(options.Client().ApplyURI(p.URI()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(ctx) })
	coll := client.Database("app").Collection("c")
	setBlock := func(on bool) {
		t.Helper()
		if err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "setUserWriteBlockMode", Value: 1}, {Key: "global", Value: on}}).Err(); err != nil {
			t.Fatalf("setUserWriteBlockMode %t: %v", on, err)
		}
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	setBlock(true)
	writes := map[string]func() error{
		"insert": func() error { _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}}); return err },
		"update": func() error {
			_, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}})
			return err
		},
		"delete": func() error { _, err := coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: 1}}); return err },
		"create": func() error { return client.Database("app").CreateCollection(ctx, "d") },
		"unordered insert of three": func() error {
			_, err := coll.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 3}}, bson.D{{Key: "_id", Value: 4}}, bson.D{{Key: "_id", Value: 5}}},
				options.InsertMany().SetOrdered(false))
			// As MongoDB answers: one write error per statement.
			var bwe mongo.BulkWriteException
			if errors.As(err, &bwe) && len(bwe.WriteErrors) != 3 {
				t.Errorf("unordered insert of three while blocked: %d write errors, want 3", len(bwe.WriteErrors))
			}
			return err
		},
	}
	for name, write := range writes {
		var ce mongo.ServerError
		if err := write(); !errors.As(err, &ce) || !ce.HasErrorCode(codeUserWritesBlocked) {
			t.Errorf("%s while blocked: %v, want UserWritesBlocked (372)", name, err)
		}
	}
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Errorf("read while blocked: %d documents, %v; want 1", n, err)
	}
	if _, err := client.Database("admin").Collection("notes").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Errorf("a write to admin while blocked: %v, want it through", err)
	}
	if got := p.Refused(); got != int64(len(writes)) {
		t.Errorf("%d writes refused, want %d", got, len(writes))
	}
	setBlock(false)
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Fatalf("insert after unblocking: %v", err)
	}
	direct := srv.MustClient(t).Database("app").Collection("c")
	var docs []bson.M
	cur, err := direct.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.All(ctx, &docs); err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[0]["x"] != nil {
		t.Errorf("the server holds %v; want _id 1 unchanged and _id 2", docs)
	}
}
