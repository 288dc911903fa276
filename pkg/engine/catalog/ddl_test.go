package catalog

import (
	"bytes"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestCreateCommand feeds listCollections options in the shapes MongoDB
// reports them (FerretDB has no clustered, time series, collation or
// validator collections, so these cannot go through a server here) and
// checks the create command the target receives.
func TestCreateCommand(t *testing.T) {
	m, err := NewMapper(config.Namespaces{Rename: []config.Rename{{From: "shop", To: "store"}, {From: "shop.orders", To: "store.orders_v2"}}}, "mongoferry")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		coll    string
		options string // extended JSON, as listCollections returns it
		want    string // the create command, extended JSON
	}{
		{"plain", "events", `{}`, `{"create": "events"}`},
		{"capped, with legacy fields create refuses", "events",
			`{"capped": true, "size": 1048576, "max": 1000, "autoIndexId": false, "flags": 1}`,
			`{"create": "events", "capped": true, "size": 1048576, "max": 1000}`},
		{"collation and validator", "customers",
			`{"validator": {"$jsonSchema": {"required": ["email"]}}, "validationLevel": "strict", "validationAction": "error",
			  "collation": {"locale": "fr", "caseLevel": false, "strength": 2, "version": "57.1"}}`,
			`{"create": "customers", "validator": {"$jsonSchema": {"required": ["email"]}}, "validationLevel": "strict", "validationAction": "error",
			  "collation": {"locale": "fr", "caseLevel": false, "strength": 2, "version": "57.1"}}`},
		{"clustered with a TTL", "sessions",
			`{"clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}, "expireAfterSeconds": {"$numberLong": "3600"}}`,
			`{"create": "sessions", "clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": true}, "expireAfterSeconds": {"$numberLong": "3600"}}`},
		{"time series with a granularity", "metrics",
			`{"timeseries": {"timeField": "ts", "metaField": "host", "granularity": "seconds", "bucketMaxSpanSeconds": 3600}, "expireAfterSeconds": {"$numberLong": "86400"}}`,
			`{"create": "metrics", "timeseries": {"timeField": "ts", "metaField": "host", "granularity": "seconds"}, "expireAfterSeconds": {"$numberLong": "86400"}}`},
		{"time series with custom buckets", "metrics",
			`{"timeseries": {"timeField": "ts", "bucketMaxSpanSeconds": 600, "bucketRoundingSeconds": 600}}`,
			`{"create": "metrics", "timeseries": {"timeField": "ts", "bucketMaxSpanSeconds": 600, "bucketRoundingSeconds": 600}}`},
		{"view on a renamed collection", "open_orders",
			`{"viewOn": "orders", "pipeline": [{"$match": {"state": "open"}}]}`,
			`{"create": "open_orders", "viewOn": "orders_v2", "pipeline": [{"$match": {"state": "open"}}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var opts bson.Raw
			if err := bson.UnmarshalExtJSON([]byte(c.options), false, &opts); err != nil {
				t.Fatal(err)
			}
			src := Namespace{DB: "shop", Coll: c.coll}
			cmd, err := CreateCommand(Collection{Source: src, Target: m.Target(src), Options: opts}, m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := bson.Marshal(cmd)
			if err != nil {
				t.Fatal(err)
			}
			var want bson.Raw
			if err := bson.UnmarshalExtJSON([]byte(c.want), false, &want); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("create command\n got %s\nwant %s", bson.Raw(got), want)
			}
		})
	}
}
