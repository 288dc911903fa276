package replay

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestShardKeysThroughAServer replays a replica set's entries (each
// carrying _id alone) with TargetShardKeys reading a real server: the
// shard key from its config.collections, the documents' current keys by
// _id. FerretDB has no sharding: its config.collections holds the
// document a 7.0 mongos keeps for a collection sharded on {sk: 1}, and it
// applies the keyed writes as an unsharded collection would (what routing
// they need is checked by test/shardsim's Target). The target ends equal
// to the source, a shard-key change by replacement and one by $set
// included, and the writers read the keys of the target's documents.
func TestShardKeysThroughAServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	ctx := context.Background()
	client := testserver.Start(t).MustClient(t)
	if _, err := client.Database("config").Collection("collections").InsertOne(ctx, bson.D{
		{Key: "_id", Value: "shop.users"}, {Key: "lastmodEpoch", Value: bson.NewObjectID()}, {Key: "lastmod", Value: time.Unix(1_700_000_000, 0)},
		{Key: "timestamp", Value: bson.Timestamp{T: 1_700_000_000, I: 1}}, {Key: "uuid", Value: bson.Binary{Subtype: 4, Data: []byte("0123456789abcdef")}},
		{Key: "key", Value: bson.D{{Key: "sk", Value: int32(1)}}}, {Key: "unique", Value: false}, {Key: "noBalance", Value: false},
	}); err != nil {
		t.Fatal(err)
	}
	coll := client.Database("shop").Collection("users")
	// The copy left document 1 (and 2, which the replay inserts again: a
	// duplicate key, then a replacement).
	if _, err := coll.InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: int32(1)}, {Key: "sk", Value: int32(10)}, {Key: "v", Value: int32(1)}},
		bson.D{{Key: "_id", Value: int32(2)}, {Key: "sk", Value: int32(20)}, {Key: "v", Value: int32(5)}},
	}); err != nil {
		t.Fatal(err)
	}
	n := uint32(0)
	entry := func(op string, o, o2 bson.D) bson.Raw {
		n++
		e := bson.D{{Key: "ts", Value: bson.Timestamp{T: 100, I: n}}, {Key: "t", Value: int64(1)}, {Key: "op", Value: op}, {Key: "ns", Value: "shop.users"}, {Key: "o", Value: o}}
		if o2 != nil {
			e = append(e, bson.E{Key: "o2", Value: o2})
		}
		return mustRaw(t, e)
	}
	id := func(i int32) bson.D { return bson.D{{Key: "_id", Value: i}} }
	doc := func(i, sk, v int32) bson.D {
		return bson.D{{Key: "_id", Value: i}, {Key: "sk", Value: sk}, {Key: "v", Value: v}}
	}
	set := func(f bson.D) bson.D {
		return bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{{Key: "u", Value: f}}}}
	}
	entries := []bson.Raw{
		entry("i", doc(2, 20, 2), nil),
		entry("i", doc(3, 30, 1), nil),
		entry("u", set(bson.D{{Key: "v", Value: int32(2)}}), id(1)),
		entry("u", doc(1, 11, 3), id(1)),                                                           // a replacement that changes sk
		entry("u", set(bson.D{{Key: "sk", Value: int32(31)}, {Key: "v", Value: int32(2)}}), id(3)), // $set of sk
		entry("d", id(2), nil),
		entry("i", doc(4, 40, 1), nil),
		entry("u", doc(4, 41, 2), id(4)),
	}
	want := map[int32]bson.D{1: doc(1, 11, 3), 3: doc(3, 31, 2), 4: doc(4, 41, 2)}

	spec := config.Spec{Threads: config.Threads{Writers: 2}, Cache: config.Cache{BatchSize: 50}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	from := bson.Timestamp{T: 99}
	reader := source.NewScripted(from, entries...)
	r := New(Options{Task: "t", Spec: &spec, Reader: reader, Target: client, Mapper: mapper, From: from, OverlapUntil: bson.Timestamp{T: 100, I: n},
		CheckpointInterval: time.Hour, ShardKeys: TargetShardKeys{Router: client}, TargetMajor: 7})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	for deadline := time.Now().Add(30 * time.Second); r.Checkpoint() != (bson.Timestamp{T: 100, I: n}) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
	}
	cancel()
	if err := <-done; err != nil && rctx.Err() == nil {
		t.Fatal(err)
	}
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var got []bson.Raw
	if err := cur.All(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("target holds %d documents, want %d: %v", len(got), len(want), got)
	}
	for _, g := range got {
		w, ok := want[g.Lookup("_id").Int32()]
		if !ok || g.String() != mustRaw(t, w).String() {
			t.Errorf("target holds %s, want %v", g, w)
		}
	}
	st := r.Status()
	if st.ShardKeyReads == 0 {
		t.Errorf("no read of the target's shard keys: %+v", st)
	}
	t.Logf("%d reads of the target's shard keys; commands %v", st.ShardKeyReads, st.WriteCommands)
}
