package testserver

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestClusterMoveChunk checks the test bed itself: writes land on the
// owning shard and on the router; a moved chunk's documents change shard
// with only fromMigrate entries in the shards' oplogs.
func TestClusterMoveChunk(t *testing.T) {
	ctx := context.Background()
	c := StartCluster(t, 2)
	ns := "app.t"
	var docs []bson.D
	for k := int64(0); k < 2000; k += 250 {
		docs = append(docs, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 1}})
	}
	if err := c.Insert(ctx, ns, docs...); err != nil {
		t.Fatal(err)
	}
	count := func(i int, filter bson.D) int64 {
		n, err := c.ShardClient(i).Database("app").Collection("t").CountDocuments(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if a, b := count(0, bson.D{}), count(1, bson.D{}); a != 4 || b != 4 {
		t.Fatalf("shard counts %d, %d; want 4, 4 (keys <1000 on shard0, the rest on shard1)", a, b)
	}
	moved, err := c.MoveChunk(ctx, ns, 0, 500, 1)
	if err != nil || moved != 2 {
		t.Fatalf("MoveChunk = %d, %v; want 2 moved", moved, err)
	}
	if a, b := count(0, bson.D{}), count(1, bson.D{}); a != 2 || b != 6 {
		t.Fatalf("after the move shard counts %d, %d; want 2, 6", a, b)
	}
	if c.Owner(ns, 250) != 1 || c.Owner(ns, 750) != 0 {
		t.Fatalf("owners after the move: 250 on %d, 750 on %d", c.Owner(ns, 250), c.Owner(ns, 750))
	}
	if err := c.Update(ctx, ns, 250, bson.D{{Key: "v", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	oplog := func(i int, filter bson.D) int64 {
		n, err := c.ShardClient(i).Database("local").Collection("oplog.rs").CountDocuments(ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	fm := bson.D{{Key: "fromMigrate", Value: true}}
	if n := oplog(1, append(fm, bson.E{Key: "op", Value: "i"})); n != 2 {
		t.Errorf("recipient fromMigrate inserts = %d, want 2", n)
	}
	if n := oplog(0, append(fm, bson.E{Key: "op", Value: "d"})); n != 2 {
		t.Errorf("donor fromMigrate deletes = %d, want 2", n)
	}
	if n := oplog(0, bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: ns}}); n != 2 {
		t.Errorf("donor deletes = %d, want only the 2 fromMigrate ones", n)
	}
	if n := oplog(1, bson.D{{Key: "op", Value: "u"}, {Key: "o2._id", Value: int64(250)}}); n != 1 {
		t.Errorf("recipient updates of 250 = %d, want 1 (logged after the move)", n)
	}
	var r bson.M
	if err := c.RouterClient().Database("app").Collection("t").FindOne(ctx, bson.D{{Key: "_id", Value: int64(250)}}).Decode(&r); err != nil || r["v"] != int32(2) {
		t.Errorf("router copy of 250 = %v, %v; want v 2", r, err)
	}
}
