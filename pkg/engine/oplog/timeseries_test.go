package oplog

import (
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// Time-series fixtures, in the shapes mongod writes them
// (timeseries/bucket_compression.cpp, timeseries_write_util.cpp,
// create_collection.cpp): a bucket of one measurement, uncompressed
// (5.0-7.0, control.version 1) and compressed (control.version 2, binary
// columns of subtype 7: 6.0-7.0 compress a closed bucket with a
// replacement, 8.0 writes it so from the start).
var (
	tsBucketID = bson.ObjectID{0x65, 0x5f, 0x0, 0x0, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x7, 0x8}
	tsT0       = bson.DateTime(1_700_000_000_000)
	tsT1       = bson.DateTime(1_700_000_060_000)
	tsColumn   = func(b ...byte) bson.Binary { return bson.Binary{Subtype: 7, Data: b} }
)

// tsBucketV1 is a 5.0-7.0 bucket of one measurement {t: t0, temp: 20}.
func tsBucketV1() bson.D {
	m := bson.D{{Key: "t", Value: tsT0}, {Key: "temp", Value: int32(20)}}
	return bson.D{{Key: "_id", Value: tsBucketID},
		{Key: "control", Value: bson.D{{Key: "version", Value: int32(1)}, {Key: "min", Value: m}, {Key: "max", Value: m}}},
		{Key: "meta", Value: "s1"},
		{Key: "data", Value: bson.D{{Key: "t", Value: bson.D{{Key: "0", Value: tsT0}}}, {Key: "temp", Value: bson.D{{Key: "0", Value: int32(20)}}}}}}
}

// tsAddMeasurement is the $v:2 diff mongod logs when {t: t1, temp: 22}
// joins tsBucketV1 (5.0+).
func tsAddMeasurement() bson.D {
	return bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{
		{Key: "scontrol", Value: bson.D{{Key: "smax", Value: bson.D{{Key: "u", Value: bson.D{{Key: "t", Value: tsT1}, {Key: "temp", Value: int32(22)}}}}}}},
		{Key: "sdata", Value: bson.D{
			{Key: "st", Value: bson.D{{Key: "i", Value: bson.D{{Key: "1", Value: tsT1}}}}},
			{Key: "stemp", Value: bson.D{{Key: "i", Value: bson.D{{Key: "1", Value: int32(22)}}}}}}}}}}
}

// tsBucketV2 is a compressed bucket of count measurements.
func tsBucketV2(count int32) bson.D {
	return bson.D{{Key: "_id", Value: tsBucketID},
		{Key: "control", Value: bson.D{{Key: "version", Value: int32(2)},
			{Key: "min", Value: bson.D{{Key: "t", Value: tsT0}, {Key: "temp", Value: int32(20)}}},
			{Key: "max", Value: bson.D{{Key: "t", Value: tsT1}, {Key: "temp", Value: int32(22)}}},
			{Key: "count", Value: count}}},
		{Key: "meta", Value: "s1"},
		{Key: "data", Value: bson.D{{Key: "t", Value: tsColumn(0x09, 0x00, 0x01)}, {Key: "temp", Value: tsColumn(0x10, 0x14, 0x00)}}}}
}

// tsBinaryDiff is the $v:2 diff 8.0 logs when a measurement joins a
// compressed bucket: control updated, each column's bytes from offset o
// replaced with d (doc_diff's b section).
func tsBinaryDiff() bson.D {
	col := func(o int32, b ...byte) bson.D {
		return bson.D{{Key: "o", Value: o}, {Key: "d", Value: bson.Binary{Data: b}}}
	}
	return bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{
		{Key: "scontrol", Value: bson.D{{Key: "u", Value: bson.D{{Key: "count", Value: int32(2)}}}}},
		{Key: "sdata", Value: bson.D{{Key: "b", Value: bson.D{{Key: "t", Value: col(2, 0x80, 0x02, 0x00)}, {Key: "temp", Value: col(2, 0x81, 0x00)}}}}}}}}
}

// tsBucketsCreate is the create mongod logs for db.createCollection(
// "weather", {timeseries: {timeField: "t", metaField: "meta",
// granularity: "seconds"}, expireAfterSeconds: 86400}) (5.0+; 6.3+ add
// bucketMaxSpanSeconds to the options).
func tsBucketsCreate() bson.D {
	return bson.D{{Key: "create", Value: "system.buckets.weather"},
		{Key: "validator", Value: bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "bsonType", Value: "object"}, {Key: "required", Value: bson.A{"_id", "control", "data"}}}}}},
		{Key: "clusteredIndex", Value: true},
		{Key: "timeseries", Value: bson.D{{Key: "timeField", Value: "t"}, {Key: "metaField", Value: "meta"}, {Key: "granularity", Value: "seconds"}, {Key: "bucketMaxSpanSeconds", Value: int32(3600)}}},
		{Key: "expireAfterSeconds", Value: int64(86400)}}
}

// TestTimeSeriesDDL: what a time-series collection's DDL, logged on its
// buckets, does on the target, command by command.
func TestTimeSeriesDDL(t *testing.T) {
	ts := catalog.Namespace{DB: "shop", Coll: "weather"}
	buckets := catalog.Namespace{DB: "shop", Coll: "system.buckets.weather"}
	ddl := func(o bson.D) DDL {
		e := mustParse(t, ent(1, "c", "shop.$cmd", o))
		d, err := e.DDL()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	tests := []struct {
		name string
		o    bson.D
		want []string // "<class> <ns> <command>"
	}{
		{"create: the time-series collection with its options, not the buckets' generated ones", tsBucketsCreate(),
			[]string{"create shop.weather " + js(t, bson.D{{Key: "create", Value: "weather"},
				{Key: "timeseries", Value: bson.D{{Key: "timeField", Value: "t"}, {Key: "metaField", Value: "meta"}, {Key: "granularity", Value: "seconds"}, {Key: "bucketMaxSpanSeconds", Value: int32(3600)}}},
				{Key: "expireAfterSeconds", Value: int64(86400)}})}},
		{"collMod of the granularity", bson.D{{Key: "collMod", Value: "system.buckets.weather"}, {Key: "timeseries", Value: bson.D{{Key: "granularity", Value: "minutes"}}}},
			[]string{"collMod shop.weather " + js(t, bson.D{{Key: "collMod", Value: "weather"}, {Key: "timeseries", Value: bson.D{{Key: "granularity", Value: "minutes"}}}})}},
		{"collMod of expireAfterSeconds", bson.D{{Key: "collMod", Value: "system.buckets.weather"}, {Key: "expireAfterSeconds", Value: int64(3600)}},
			[]string{"collMod shop.weather " + js(t, bson.D{{Key: "collMod", Value: "weather"}, {Key: "expireAfterSeconds", Value: int64(3600)}})}},
		{"collMod of an index by its name", bson.D{{Key: "collMod", Value: "system.buckets.weather"}, {Key: "index", Value: bson.D{{Key: "name", Value: "meta_1"}, {Key: "hidden", Value: true}}}},
			[]string{"collMod shop.weather " + js(t, bson.D{{Key: "collMod", Value: "weather"}, {Key: "index", Value: bson.D{{Key: "name", Value: "meta_1"}, {Key: "hidden", Value: true}}}})}},
		{"collMod of an index by its bucket key pattern stays on the buckets",
			bson.D{{Key: "collMod", Value: "system.buckets.weather"}, {Key: "index", Value: bson.D{{Key: "keyPattern", Value: bson.D{{Key: "meta", Value: int32(1)}}}, {Key: "hidden", Value: true}}}, {Key: "expireAfterSeconds", Value: int64(60)}},
			[]string{
				"collMod shop.weather " + js(t, bson.D{{Key: "collMod", Value: "weather"}, {Key: "expireAfterSeconds", Value: int64(60)}}),
				"collMod shop.system.buckets.weather " + js(t, bson.D{{Key: "collMod", Value: "system.buckets.weather"}, {Key: "index", Value: bson.D{{Key: "keyPattern", Value: bson.D{{Key: "meta", Value: int32(1)}}}, {Key: "hidden", Value: true}}}}),
			}},
		{"drop: the time-series collection, then the buckets", bson.D{{Key: "drop", Value: "system.buckets.weather"}},
			[]string{"drop shop.weather " + js(t, bson.D{{Key: "drop", Value: "weather"}}), "drop shop.system.buckets.weather " + js(t, bson.D{{Key: "drop", Value: "system.buckets.weather"}})}},
		{"an index build (6.3+: meta and time) stays on the buckets",
			bson.D{{Key: "createIndexes", Value: "system.buckets.weather"}, {Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "meta", Value: int32(1)}, {Key: "control.min.t", Value: int32(1)}, {Key: "control.max.t", Value: int32(1)}}}, {Key: "name", Value: "meta_1_t_1"}},
			[]string{"createIndexes shop.system.buckets.weather " + js(t, bson.D{{Key: "createIndexes", Value: "system.buckets.weather"}, {Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "meta", Value: int32(1)}, {Key: "control.min.t", Value: int32(1)}, {Key: "control.max.t", Value: int32(1)}}}, {Key: "name", Value: "meta_1_t_1"}})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, err := TimeSeriesDDL(ddl(tt.o), ts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range ds {
				if d.NS != ts && d.NS != buckets {
					t.Errorf("%s acts on %s", d.Class, d.NS)
				}
				got = append(got, d.Class.String()+" "+d.NS.String()+" "+d.Command.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("target DDL\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}
