package replay

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/holdback"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestReplayBucketWrites replays a time-series collection's bucket writes,
// in the shapes MongoDB 5.0-8.0 log them (pkg/engine/oplog's time-series
// fixtures), onto a target whose time-series collection exists, and
// compares the target's buckets byte for byte with the source's after
// the same writes: a 5.0-7.0 bucket (control.version 1) inserted, given a
// measurement by a $v:2 diff, then compressed by a replacement (6.0-7.0,
// control.version 2, binary columns); an 8.0 compressed bucket inserted,
// then extended by a binary diff (re-read from the source's buckets); a
// bucket deleted by a batched applyOps (7.0+); the index 6.3+ builds on
// the metaField and time built on the buckets. The buckets of a time-series
// collection the task does not select are left alone.
//
// What stands in: FerretDB v1.24 has no time series ("timeseries" is not
// implemented in create), so the buckets collection
// shop.system.buckets.weather is a plain collection on both servers,
// which FerretDB takes under that name. The target's catalog (the view
// over the buckets, their clustered index) is not modelled; the create
// that makes it is checked as a command in pkg/engine/oplog
// (TestTimeSeriesDDL).
func TestReplayBucketWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	ctx := context.Background()
	src, dst := testserver.Start(t).MustClient(t), testserver.Start(t).MustClient(t)

	a, b, c := bson.ObjectID{1}, bson.ObjectID{2}, bson.ObjectID{3}
	t0, t1 := bson.DateTime(1_700_000_000_000), bson.DateTime(1_700_000_060_000)
	col := func(p ...byte) bson.Binary { return bson.Binary{Subtype: 7, Data: p} }
	m0 := bson.D{{Key: "t", Value: t0}, {Key: "temp", Value: int32(20)}}
	bucketV1 := func(id bson.ObjectID) bson.D {
		return bson.D{{Key: "_id", Value: id},
			{Key: "control", Value: bson.D{{Key: "version", Value: int32(1)}, {Key: "min", Value: m0}, {Key: "max", Value: m0}}},
			{Key: "meta", Value: "s1"},
			{Key: "data", Value: bson.D{{Key: "t", Value: bson.D{{Key: "0", Value: t0}}}, {Key: "temp", Value: bson.D{{Key: "0", Value: int32(20)}}}}}}
	}
	bucketV2 := func(id bson.ObjectID, count int32, t, temp bson.Binary) bson.D {
		return bson.D{{Key: "_id", Value: id},
			{Key: "control", Value: bson.D{{Key: "version", Value: int32(2)}, {Key: "min", Value: m0},
				{Key: "max", Value: bson.D{{Key: "t", Value: t1}, {Key: "temp", Value: int32(22)}}}, {Key: "count", Value: count}}},
			{Key: "meta", Value: "s1"},
			{Key: "data", Value: bson.D{{Key: "t", Value: t}, {Key: "temp", Value: temp}}}}
	}
	addMeasurement := bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{
		{Key: "scontrol", Value: bson.D{{Key: "smax", Value: bson.D{{Key: "u", Value: bson.D{{Key: "t", Value: t1}, {Key: "temp", Value: int32(22)}}}}}}},
		{Key: "sdata", Value: bson.D{
			{Key: "st", Value: bson.D{{Key: "i", Value: bson.D{{Key: "1", Value: t1}}}}},
			{Key: "stemp", Value: bson.D{{Key: "i", Value: bson.D{{Key: "1", Value: int32(22)}}}}}}}}}}
	binaryDiff := bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{
		{Key: "scontrol", Value: bson.D{{Key: "u", Value: bson.D{{Key: "count", Value: int32(2)}}}}},
		{Key: "sdata", Value: bson.D{{Key: "b", Value: bson.D{
			{Key: "t", Value: bson.D{{Key: "o", Value: int32(2)}, {Key: "d", Value: bson.Binary{Data: []byte{0x80, 0x02, 0x00}}}}},
			{Key: "temp", Value: bson.D{{Key: "o", Value: int32(2)}, {Key: "d", Value: bson.Binary{Data: []byte{0x81, 0x00}}}}}}}}}}}}

	// The source's buckets after every write below: b as 8.0 leaves it
	// after the binary diff, which the replay re-reads.
	bFinal := bucketV2(b, 2, col(0x09, 0x00, 0x80, 0x02, 0x00), col(0x10, 0x14, 0x81, 0x00))
	aFinal := bucketV2(a, 2, col(0x09, 0x00, 0x01), col(0x10, 0x14, 0x00))
	if _, err := src.Database("shop").Collection("system.buckets.weather").InsertMany(ctx, []any{aFinal, bFinal}); err != nil {
		t.Fatal(err)
	}
	// The target's time-series collection exists (its buckets collection
	// stands for it), and so does another one the task does not select.
	if err := dst.Database("shop").CreateCollection(ctx, "system.buckets.weather"); err != nil {
		t.Fatal(err)
	}

	n := uint32(0)
	entry := func(op, ns string, o, o2 bson.D) bson.Raw {
		n++
		e := bson.D{{Key: "ts", Value: bson.Timestamp{T: 100, I: n}}, {Key: "t", Value: int64(1)}, {Key: "op", Value: op}, {Key: "ns", Value: ns}, {Key: "o", Value: o}}
		if o2 != nil {
			e = append(e, bson.E{Key: "o2", Value: o2})
		}
		return mustRaw(t, e)
	}
	id := func(v bson.ObjectID) bson.D { return bson.D{{Key: "_id", Value: v}} }
	const buckets = "shop.system.buckets.weather"
	del := func(v bson.ObjectID) bson.D {
		return bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: buckets}, {Key: "o", Value: id(v)}}
	}
	entries := []bson.Raw{
		entry("i", buckets, bucketV1(a), nil),                                                  // 5.0-7.0
		entry("u", buckets, addMeasurement, id(a)),                                             // 5.0+
		entry("u", buckets, aFinal, id(a)),                                                     // 6.0-7.0: compressed on close
		entry("i", buckets, bucketV2(b, 1, col(0x09, 0x00, 0x00), col(0x10, 0x14, 0x00)), nil), // 8.0
		entry("u", buckets, binaryDiff, id(b)),                                                 // 8.0
		entry("i", buckets, bucketV1(c), nil),
		entry("c", "admin.$cmd", bson.D{{Key: "applyOps", Value: bson.A{del(c)}}}, nil), // 7.0+ batched delete
		entry("i", "shop.system.buckets.other", bucketV1(a), nil),                       // not selected
		// 6.3+: the index on the metaField and time, in bucket terms.
		entry("c", "shop.$cmd", bson.D{{Key: "createIndexes", Value: "system.buckets.weather"}, {Key: "v", Value: int32(2)},
			{Key: "key", Value: bson.D{{Key: "meta", Value: int32(1)}, {Key: "control.min.t", Value: int32(1)}, {Key: "control.max.t", Value: int32(1)}}}, {Key: "name", Value: "meta_1_t_1"}}, nil),
	}
	spec := config.Spec{Namespaces: config.Namespaces{Exclude: []string{`shop\.other`}}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	from := bson.Timestamp{T: 99}
	r := New(Options{Task: "t", Spec: &spec, Reader: source.NewScripted(from, entries...), Source: src, Target: dst, Mapper: mapper, From: from,
		CheckpointInterval: time.Hour})
	runUntil(t, r, bson.Timestamp{T: 100, I: n}, 30*time.Second)

	cur, err := dst.Database("shop").Collection("system.buckets.weather").Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var got []bson.Raw
	if err := cur.All(ctx, &got); err != nil {
		t.Fatal(err)
	}
	want := []bson.Raw{mustRaw(t, aFinal), mustRaw(t, bFinal)}
	if len(got) != len(want) {
		t.Fatalf("target buckets %v, want %v", got, want)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("bucket %d on the target\n got %s\nwant %s", i, got[i], want[i])
		}
	}
	specs, err := dst.Database("shop").Collection("system.buckets.weather").Indexes().ListSpecifications(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[1].Name != "meta_1_t_1" {
		t.Errorf("indexes of the target's buckets: %v, want _id_ and meta_1_t_1", specs)
	}
	if names, _ := dst.Database("shop").ListCollectionNames(ctx, bson.D{{Key: "name", Value: "system.buckets.other"}}); len(names) != 0 {
		t.Errorf("the buckets of shop.other, which the task excludes, reached the target")
	}
}

// TestTimeSeriesDDLOnTheTarget applies a time-series collection's DDL, as
// logged on its buckets, and checks the commands the target receives:
// the create of the collection with its options (expireAfterSeconds held
// back until cut-over, as for any TTL), the collMod of its granularity on
// its name, an index build on its buckets, its drop. FerretDB stands in
// for the target and refuses what it lacks (create with timeseries,
// collMod); the commands are read from the driver's command monitor.
func TestTimeSeriesDDLOnTheTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	ctx := context.Background()
	srv := testserver.Start(t)
	var mu sync.Mutex
	var sent []string
	mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		switch e.CommandName {
		case "create", "collMod", "createIndexes", "drop":
			mu.Lock()
			defer mu.Unlock()
			if e.DatabaseName == "shop" {
				cmd, _ := bson.Raw(e.Command).Elements()
				var keep bson.D
				for _, el := range cmd {
					if k := el.Key(); k != "$db" && k != "lsid" && k != "$clusterTime" && k != "writeConcern" {
						keep = append(keep, bson.E{Key: k, Value: el.Value()})
					}
				}
				sent = append(sent, mustRaw(t, keep).String())
			}
		}
	}}
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(ctx) })
	spec := config.Spec{}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	r := New(Options{Task: "t", Spec: &spec, Reader: source.NewScripted(bson.Timestamp{}), Target: client, Mapper: mapper})
	ddl := func(o bson.D) oplog.DDL {
		e, err := oplog.Parse(mustRaw(t, bson.D{{Key: "ts", Value: bson.Timestamp{T: 100, I: 1}}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "shop.$cmd"}, {Key: "o", Value: o}}))
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.DDL()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	tsOpts := bson.D{{Key: "timeField", Value: "t"}, {Key: "metaField", Value: "meta"}, {Key: "granularity", Value: "seconds"}, {Key: "bucketMaxSpanSeconds", Value: int32(3600)}}
	indexKey := bson.D{{Key: "meta", Value: int32(1)}, {Key: "control.min.t", Value: int32(1)}, {Key: "control.max.t", Value: int32(1)}}
	steps := []struct {
		name string
		o    bson.D
		want []bson.D // commands the target receives
	}{
		{"create", bson.D{{Key: "create", Value: "system.buckets.weather"}, {Key: "validator", Value: bson.D{{Key: "$jsonSchema", Value: bson.D{}}}},
			{Key: "clusteredIndex", Value: true}, {Key: "timeseries", Value: tsOpts}, {Key: "expireAfterSeconds", Value: int64(86400)}},
			[]bson.D{{{Key: "create", Value: "weather"}, {Key: "timeseries", Value: tsOpts[:3]}}}},
		{"collMod of the granularity", bson.D{{Key: "collMod", Value: "system.buckets.weather"}, {Key: "timeseries", Value: bson.D{{Key: "granularity", Value: "minutes"}}}},
			[]bson.D{{{Key: "collMod", Value: "weather"}, {Key: "timeseries", Value: bson.D{{Key: "granularity", Value: "minutes"}}}}}},
		{"collMod of expireAfterSeconds: held", bson.D{{Key: "collMod", Value: "system.buckets.weather"}, {Key: "expireAfterSeconds", Value: int64(3600)}}, nil},
		{"index build on the buckets", bson.D{{Key: "createIndexes", Value: "system.buckets.weather"}, {Key: "v", Value: int32(2)}, {Key: "key", Value: indexKey}, {Key: "name", Value: "meta_1_t_1"}},
			[]bson.D{{{Key: "createIndexes", Value: "system.buckets.weather"}, {Key: "indexes", Value: bson.A{bson.D{{Key: "key", Value: indexKey}, {Key: "name", Value: "meta_1_t_1"}}}}}}},
		{"drop", bson.D{{Key: "drop", Value: "system.buckets.weather"}},
			[]bson.D{{{Key: "drop", Value: "weather"}}, {{Key: "drop", Value: "system.buckets.weather"}}}},
	}
	for _, st := range steps {
		mu.Lock()
		sent = nil
		mu.Unlock()
		err := r.applyDDL(ctx, ddl(st.o))
		t.Logf("%s: %v", st.name, err) // FerretDB refuses create with timeseries
		mu.Lock()
		var want []string
		for _, w := range st.want {
			want = append(want, mustRaw(t, w).String())
		}
		if strings.Join(sent, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s: the target received\n%s\nwant\n%s", st.name, strings.Join(sent, "\n"), strings.Join(want, "\n"))
		}
		mu.Unlock()
		if st.name == "collMod of expireAfterSeconds: held" {
			held, err := holdback.Pending(ctx, client, spec.Checkpoint.Database, "t")
			if err != nil || len(held) != 1 || held[0].ExpireAfterSeconds != 3600 {
				t.Errorf("held back: %v (%v), want shop.weather's expireAfterSeconds 3600", held, err)
			}
		}
	}
}
