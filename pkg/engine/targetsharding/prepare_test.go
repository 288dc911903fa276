package targetsharding

import (
	"context"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestPrepareReadsConfigThroughAServer: two FerretDB servers stand in for
// the source's and the target's mongos. FerretDB has no sharding, so
// their config databases hold recorded documents (a 4.4 source with
// chunks named by ns, a 7.0 one with chunks by UUID and zone ranges; a
// target with two shards, one in zone EU, and its databases' primaries),
// read by the real queries; the commands are recorded instead of run.
// FerretDB cannot store MinKey or MaxKey (it drops the connection), so
// the stored chunks are the interior ones of each collection, and the
// zone bounds use 0 where a real cluster has MinKey; the bounds a plan
// makes itself (the first and last chunk's) are only recorded.
func TestPrepareReadsConfigThroughAServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	ctx := context.Background()
	src := testserver.Start(t).MustClient(t)
	dst := testserver.Start(t).MustClient(t)
	srcConfig := src.Database("config")
	// FerretDB moves an _id field first in embedded documents too, so the
	// key here is {region, userId}, not {region, _id}.
	k := func(r any) bson.D { return bson.D{{Key: "region", Value: r}, {Key: "userId", Value: int32(0)}} }
	if _, err := srcConfig.Collection("collections").InsertMany(ctx, []any{
		// 7.0: chunks by UUID, two zones.
		bson.D{{Key: "_id", Value: "shop.users"}, {Key: "lastmodEpoch", Value: epoch}, {Key: "lastmod", Value: when}, {Key: "timestamp", Value: version},
			{Key: "uuid", Value: uuid}, {Key: "key", Value: bson.D{{Key: "region", Value: int32(1)}, {Key: "userId", Value: int32(1)}}}, {Key: "unique", Value: false}, {Key: "noBalance", Value: false}},
		// 4.4: chunks by ns.
		bson.D{{Key: "_id", Value: "shop.skus"}, {Key: "lastmodEpoch", Value: epoch}, {Key: "lastmod", Value: when}, {Key: "dropped", Value: false},
			{Key: "key", Value: bson.D{{Key: "sku", Value: 1.0}}}, {Key: "unique", Value: true}, {Key: "uuid", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := srcConfig.Collection("chunks").InsertMany(ctx, []any{
		chunk70(k("EU"), k("NA"), "rs1"),
		chunk70(k("AP"), k("EU"), "rs0"),
		chunk44("shop.skus", bson.D{{Key: "sku", Value: "M"}}, bson.D{{Key: "sku", Value: "T"}}, "rs1"),
		chunk44("shop.skus", bson.D{{Key: "sku", Value: "C"}}, bson.D{{Key: "sku", Value: "G"}}, "rs0"),
		chunk44("shop.skus", bson.D{{Key: "sku", Value: "G"}}, bson.D{{Key: "sku", Value: "M"}}, "rs0"),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := srcConfig.Collection("tags").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "ns", Value: "shop.users"}, {Key: "min", Value: k("US")}, {Key: "max", Value: k("UT")}, {Key: "tag", Value: "US"}},
		bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "ns", Value: "shop.users"}, {Key: "min", Value: k("EU")}, {Key: "max", Value: k("EV")}, {Key: "tag", Value: "EU"}},
	}); err != nil {
		t.Fatal(err)
	}
	dstConfig := dst.Database("config")
	if _, err := dstConfig.Collection("shards").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "t1"}, {Key: "host", Value: "t1/10.1.0.1:27018"}, {Key: "state", Value: int32(1)}, {Key: "topologyTime", Value: version}},
		bson.D{{Key: "_id", Value: "t0"}, {Key: "host", Value: "t0/10.1.0.2:27018"}, {Key: "state", Value: int32(1)}, {Key: "tags", Value: bson.A{"EU"}}, {Key: "topologyTime", Value: version}},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := dstConfig.Collection("databases").InsertOne(ctx, bson.D{{Key: "_id", Value: "shop"}, {Key: "primary", Value: "t0"},
		{Key: "version", Value: bson.D{{Key: "uuid", Value: uuid}, {Key: "timestamp", Value: version}, {Key: "lastMod", Value: int32(1)}}}}); err != nil {
		t.Fatal(err)
	}

	var sent []string
	p := &Preparer{Source: src, Target: dst, Major: 7, Endpoint: config.Endpoint{ShardKeys: []config.ShardKey{{Namespace: "shop.events", Fields: []string{"tenant", "ts"}}}},
		Run: func(_ context.Context, cmd bson.D) error {
			b, err := bson.MarshalExtJSON(cmd, false, false)
			sent = append(sent, string(b))
			return err
		}}
	for _, c := range []struct{ ns, want string }{
		{"shop.users", `{"updateZoneKeyRange":"shop.users","min":{"region":"EU","userId":0},"max":{"region":"EV","userId":0},"zone":"EU"}` + "\n" +
			`{"shardCollection":"shop.users","key":{"region":1,"userId":1}}`},
		{"shop.skus", `{"shardCollection":"shop.skus","key":{"sku":1},"unique":true}` + "\n" +
			`{"split":"shop.skus","middle":{"sku":"G"}}` + "\n" +
			`{"split":"shop.skus","middle":{"sku":"M"}}` + "\n" +
			`{"moveRange":"shop.skus","min":{"sku":"M"},"max":{"sku":{"$maxKey":1}},"toShard":"t1"}`},
		{"shop.events", `{"shardCollection":"shop.events","key":{"tenant":1,"ts":1}}`},
		{"shop.plain", ""},
	} {
		sent = nil
		plan, err := p.Prepare(ctx, c.ns, c.ns, false)
		if err != nil {
			t.Fatalf("%s: %v", c.ns, err)
		}
		if got := strings.Join(sent, "\n"); got != c.want {
			t.Errorf("%s: sent\n%s\nwant\n%s", c.ns, got, c.want)
		}
		t.Logf("%s: %s, %d chunks, notes %q", c.ns, plan.Placement, plan.Chunks, plan.Notes)
	}
	if got := len(p.Plans()); got != 4 {
		t.Errorf("%d plans kept for status, want 4", got)
	}
}
