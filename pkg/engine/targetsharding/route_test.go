package targetsharding

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestRouter places documents on the shards the ranged plan of
// TestMakePlan gives their chunks: [MinKey, AP) and [AP, EU/5000) on the
// primary shard-b, [EU/5000, NA) and [NA, MaxKey) on shard-a, with the
// key's fields compared in key order and in MongoDB's type order, and a
// missing field as null.
func TestRouter(t *testing.T) {
	ranged70, two := testRanged70(t), testTwoShards()
	plan, err := MakePlan(Request{TargetNS: "shop.orders", Source: ranged70, Target: two, Primary: "shard-b"})
	if err != nil {
		t.Fatal(err)
	}
	r := plan.Router()
	if r == nil {
		t.Fatal("no router for a moveRange plan")
	}
	doc := func(d bson.D) bson.Raw { b, _ := bson.Marshal(d); return b }
	for _, tc := range []struct {
		doc  bson.D
		want string
	}{
		{bson.D{{Key: "_id", Value: 1}, {Key: "region", Value: "AA"}, {Key: "orderId", Value: 7}}, "shard-b"},
		{bson.D{{Key: "orderId", Value: 4999}, {Key: "region", Value: "EU"}}, "shard-b"},
		{bson.D{{Key: "region", Value: "EU"}, {Key: "orderId", Value: int64(5000)}}, "shard-a"},
		{bson.D{{Key: "region", Value: "EU"}, {Key: "orderId", Value: 5000.5}}, "shard-a"},
		{bson.D{{Key: "region", Value: "EU"}, {Key: "orderId", Value: "a string sorts after numbers"}}, "shard-a"},
		{bson.D{{Key: "_id", Value: 2}}, "shard-b"}, // null region sorts before strings
		{bson.D{{Key: "region", Value: "NA"}}, "shard-a"},
		{bson.D{{Key: "region", Value: "ZZ"}, {Key: "orderId", Value: 1}}, "shard-a"},
	} {
		if got := r.Owner(doc(tc.doc)); got != tc.want {
			t.Errorf("%v: owner %s, want %s", tc.doc, got, tc.want)
		}
	}
	groups := r.Group([]bson.Raw{doc(bson.D{{Key: "region", Value: "ZZ"}}), doc(bson.D{{Key: "region", Value: "AA"}}), doc(bson.D{{Key: "region", Value: "ZY"}})})
	if len(groups) != 2 || len(groups[0]) != 2 || len(groups[1]) != 1 {
		t.Errorf("groups %v, want ZZ and ZY together, AA alone", groups)
	}
	hashed, err := MakePlan(Request{TargetNS: "shop.carts", Source: testHashed50(t), Target: two, Primary: "shard-b"})
	if err != nil {
		t.Fatal(err)
	}
	if hashed.Router() != nil {
		t.Error("a hashed plan has a router: the server decides its chunks")
	}
}
