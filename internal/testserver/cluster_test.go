package testserver

import (
	"context"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/sourceshardcopy"
	"github.com/mongoferry/mongoferry/pkg/engine/targetsharding"
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
	count := func(i int, filter bson.D) int64 { return shardCount(ctx, t, c, i, filter) }
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

// TestClusterChunkTable checks the stand-in's routing table as a reader
// of config sees it through the router: config.chunks covers every key
// with the owners Owner reports, a migration gives the moved chunk a new
// version (an empty one too) and is logged in config.changelog, and the
// recipient's oplog holds its start and end markers around its
// fromMigrate inserts.
func TestClusterChunkTable(t *testing.T) {
	ctx := context.Background()
	c := StartCluster(t, 3)
	ns := "app.t"
	var docs []bson.D
	for k := int64(0); k < 3000; k += 100 {
		docs = append(docs, bson.D{{Key: "_id", Value: k}})
	}
	if err := c.Insert(ctx, ns, docs...); err != nil {
		t.Fatal(err)
	}
	read := func() *sourceshardcopy.Table {
		t.Helper()
		l, ok, err := targetsharding.ReadLayout(ctx, c.RouterClient(), ns)
		if err != nil || !ok {
			t.Fatalf("ReadLayout: %v, sharded %v", err, ok)
		}
		for i := range l.Chunks { // FerretDB refuses MinKey and MaxKey: the stand-in writes others
			l.Chunks[i].Min, l.Chunks[i].Max = RealBound(l.Chunks[i].Min), RealBound(l.Chunks[i].Max)
		}
		tab, err := sourceshardcopy.FromLayout(l)
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	owners := func(tab *sourceshardcopy.Table) {
		t.Helper()
		for _, k := range []int64{-5, 0, 250, 999, 1000, 1500, 2999, 5500, 70000, 1 << 40} {
			doc, _ := bson.Marshal(bson.D{{Key: "_id", Value: k}})
			if got, want := tab.Owner(doc), c.Names[c.Owner(ns, k)]; got != want {
				t.Errorf("key %d: config.chunks gives %s, the cluster routes to %s", k, got, want)
			}
		}
	}
	before := read()
	owners(before)
	if n, err := c.MoveChunk(ctx, ns, 0, 500, 2); err != nil || n != 5 {
		t.Fatalf("MoveChunk = %d, %v; want 5 moved", n, err)
	}
	if _, err := c.MoveChunk(ctx, ns, 5000, 6000, 0); err != nil { // empty
		t.Fatal(err)
	}
	after := read()
	owners(after)
	var changed []string
	for _, ch := range sourceshardcopy.Changed(before, after) {
		changed = append(changed, ch.Shard)
	}
	// The split of [0,1000) at 500 changes both halves; the moves their
	// owners and versions.
	if strings.Join(changed, ",") != "shard2,shard0,shard0" {
		t.Errorf("changed chunks on %v, want shard2 ([0,500) moved), shard0 ([500,1000) split off), shard0 ([5000,6000) moved, empty)", changed)
	}
	if n := len(sourceshardcopy.Changed(after, read())); n != 0 {
		t.Errorf("%d chunks changed between two reads with no migration", n)
	}
	commits, err := c.RouterClient().Database("config").Collection("changelog").CountDocuments(ctx, bson.D{{Key: "what", Value: "moveChunk.commit"}, {Key: "ns", Value: ns}})
	if err != nil || commits != 2 {
		t.Errorf("config.changelog holds %d moveChunk.commit entries (%v), want 2", commits, err)
	}
	oplog := c.ShardClient(2).Database("local").Collection("oplog.rs")
	cur, err := oplog.Find(ctx, bson.D{{Key: "ns", Value: bson.D{{Key: "$in", Value: bson.A{"config.rangeDeletions", ns}}}}, {Key: "fromMigrate", Value: bson.D{{Key: "$ne", Value: false}}}},
		options.Find().SetSort(bson.D{{Key: "ts", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var shape []string
	for cur.Next(ctx) {
		e := cur.Current
		op := e.Lookup("op").StringValue()
		if e.Lookup("ns").StringValue() == "config.rangeDeletions" {
			o := e.Lookup("o").Document()
			if nss, _ := o.Lookup("nss").StringValueOK(); op == "i" && (nss != ns || o.Lookup("donorShardId").StringValue() != "shard0" || !o.Lookup("pending").Boolean()) {
				t.Errorf("start marker %s: want nss %s, donorShardId shard0, pending", o, ns)
			}
			shape = append(shape, "marker-"+op)
			continue
		}
		if fm, _ := e.Lookup("fromMigrate").BooleanOK(); fm {
			shape = append(shape, "migrate-"+op)
		}
	}
	want := "marker-i," + strings.Repeat("migrate-i,", 5) + "marker-d"
	if got := strings.Join(shape, ","); got != want {
		t.Errorf("recipient oplog: %s, want %s", got, want)
	}
}

// TestClusterKeepOrphans checks the stand-in's orphans: with KeepOrphans
// a migration leaves the donor's copies in place, unlogged, until the
// range deleter removes them with fromMigrate deletes; a chunk moving
// back to its donor first loses the orphans there.
func TestClusterKeepOrphans(t *testing.T) {
	ctx := context.Background()
	c := StartCluster(t, 2)
	c.KeepOrphans = true
	ns := "app.t"
	var docs []bson.D
	for k := int64(0); k < 1000; k += 100 {
		docs = append(docs, bson.D{{Key: "_id", Value: k}})
	}
	if err := c.Insert(ctx, ns, docs...); err != nil {
		t.Fatal(err)
	}
	count := func(i int, filter bson.D) int64 { return shardCount(ctx, t, c, i, filter) }
	fmDeletes := func() int64 {
		n, err := c.ShardClient(0).Database("local").Collection("oplog.rs").CountDocuments(ctx, bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: ns}, {Key: "fromMigrate", Value: true}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := c.MoveChunk(ctx, ns, 0, 500, 1); err != nil {
		t.Fatal(err)
	}
	if a, b, o := count(0, bson.D{}), count(1, bson.D{}), fmDeletes(); a != 10 || b != 5 || o != 0 {
		t.Fatalf("after the move: shard0 %d, shard1 %d documents, %d deletes logged on shard0; want 10 (5 orphans), 5, 0", a, b, o)
	}
	if n, err := c.Orphans(ctx); err != nil || n != 5 {
		t.Fatalf("Orphans = %d, %v; want 5", n, err)
	}
	if err := c.RunRangeDeleter(ctx); err != nil {
		t.Fatal(err)
	}
	if a, o := count(0, bson.D{}), fmDeletes(); a != 5 || o != 5 {
		t.Fatalf("after the range deleter: shard0 %d documents, %d fromMigrate deletes; want 5, 5", a, o)
	}
	if _, err := c.MoveChunk(ctx, ns, 0, 500, 0); err != nil { // back, leaving orphans on shard1
		t.Fatal(err)
	}
	if _, err := c.MoveChunk(ctx, ns, 0, 500, 1); err != nil { // again: shard1's orphans go first
		t.Fatal(err)
	}
	if a, b := count(0, bson.D{}), count(1, bson.D{}); a != 10 || b != 5 {
		t.Fatalf("after moving back and forth: shard0 %d, shard1 %d documents; want 10 (5 orphans), 5", a, b)
	}
}

// shardCount counts the documents of app.t matching filter on shard i.
func shardCount(ctx context.Context, t *testing.T, c *Cluster, i int, filter bson.D) int64 {
	t.Helper()
	n, err := c.ShardClient(i).Database("app").Collection("t").CountDocuments(ctx, filter)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
