package oplog

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// These tests run on RECORDED change events, written as MongoDB 6.0/7.0
// sends them to a stream opened with showExpandedEvents (resume token _id,
// operationType, clusterTime, wallTime, collectionUUID, ns, documentKey,
// fullDocument, updateDescription with disambiguatedPaths, to,
// operationDescription, lsid and txnNumber). FerretDB, the test server of
// this repository, has no change streams, so the reader itself (Watch,
// resuming, postBatchResumeToken no-ops) is not exercised end to end here:
// what is tested is the conversion, the grouping of a transaction's events
// (EventsToEntries runs the reader's grouper) and that every entry made
// parses with Parse and translates with Translate into the
// expected writes.

// tsN is the clusterTime of the n-th recorded event.
func tsN(n uint32) bson.Timestamp { return bson.Timestamp{T: 1718000000, I: n} }

// resumeToken is a resume token as MongoDB 6+ writes it: a hex KeyString
// that starts with the clusterTime (type byte 0x82 and 8 bytes).
func resumeToken(ts bson.Timestamp, n uint32) bson.D {
	return bson.D{{Key: "_data", Value: fmt.Sprintf("82%08X%08X2B042C0100296E5A1004%032X463C5F6964002B%02X0004", ts.T, ts.I, n, n%100)}}
}

var collUUID = bson.Binary{Subtype: bson.TypeBinaryUUID, Data: []byte("0123456789abcdef")}

// ev is a recorded event: the fields every event has, then fields.
func ev(op string, n uint32, fields ...bson.E) bson.D {
	ts := tsN(n)
	d := bson.D{
		{Key: "_id", Value: resumeToken(ts, n)},
		{Key: "operationType", Value: op},
		{Key: "clusterTime", Value: ts},
		{Key: "wallTime", Value: bson.DateTime(1718000000000 + int64(n))},
	}
	return append(d, fields...)
}

// crud adds the fields of a CRUD event on shop.orders.
func crud(key bson.D, fields ...bson.E) []bson.E {
	return append([]bson.E{
		{Key: "collectionUUID", Value: collUUID},
		{Key: "ns", Value: bson.D{{Key: "db", Value: "shop"}, {Key: "coll", Value: "orders"}}},
		{Key: "documentKey", Value: key},
	}, fields...)
}

func e(k string, v any) bson.E { return bson.E{Key: k, Value: v} }

func ns(db, coll string) bson.E {
	if coll == "" {
		return e("ns", bson.D{{Key: "db", Value: db}})
	}
	return e("ns", bson.D{{Key: "db", Value: db}, {Key: "coll", Value: coll}})
}

func desc(updated bson.D, removed bson.A, truncated bson.A, disamb bson.D) bson.E {
	d := bson.D{{Key: "updatedFields", Value: updated}, {Key: "removedFields", Value: removed}, {Key: "truncatedArrays", Value: truncated}}
	if disamb != nil {
		d = append(d, bson.E{Key: "disambiguatedPaths", Value: disamb})
	}
	return e("updateDescription", d)
}

func trunc(field string, size int32) bson.D {
	return bson.D{{Key: "field", Value: field}, {Key: "newSize", Value: size}}
}

func lsid(n byte) bson.D {
	return bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{n}, 16)}}, {Key: "uid", Value: bson.Binary{Subtype: 0, Data: bytes.Repeat([]byte{0xab}, 32)}}}
}

// describeModel describes a write model as "Kind filter update upsert".
func describeModel(t *testing.T, m mongo.WriteModel) string {
	t.Helper()
	up := func(b *bool) string { return fmt.Sprint(b != nil && *b) }
	switch m := m.(type) {
	case *mongo.ReplaceOneModel:
		return "ReplaceOne " + js(t, m.Filter) + " " + js(t, m.Replacement) + " upsert=" + up(m.Upsert)
	case *mongo.UpdateOneModel:
		return "UpdateOne " + js(t, m.Filter) + " " + js(t, m.Update) + " upsert=" + up(m.Upsert)
	case *mongo.DeleteOneModel:
		return "DeleteOne " + js(t, m.Filter)
	}
	t.Fatalf("unexpected model %T", m)
	return ""
}

// convertOne converts a recorded event and parses the entry.
func convertOne(t *testing.T, event bson.D) Entry {
	t.Helper()
	raw, ok, err := EventToEntry(marshal(t, event))
	if err != nil || !ok {
		t.Fatalf("EventToEntry = ok %v, %v", ok, err)
	}
	entry, err := Parse(raw)
	if err != nil {
		t.Fatalf("Parse(%s): %v", raw, err)
	}
	return entry
}

func TestEventToEntryCRUD(t *testing.T) {
	id1 := bson.D{{Key: "_id", Value: 1}}
	order := bson.D{{Key: "_id", Value: 1}, {Key: "item", Value: "pen"}, {Key: "qty", Value: 3}, {Key: "tags", Value: bson.A{"a", "b"}}}
	shardKey := bson.D{{Key: "region", Value: "eu"}, {Key: "_id", Value: 2}}
	tests := []struct {
		name  string
		event bson.D
		op    Op
		kind  Kind
		want  []string
	}{
		{"insert", ev("insert", 1, crud(id1, e("fullDocument", order))...), OpInsert, Insert,
			[]string{"ReplaceOne " + js(t, id1) + " " + js(t, order) + " upsert=true"}},
		{"insert into a sharded collection filters on the shard key", ev("insert", 1, crud(shardKey, e("fullDocument", bson.D{{Key: "_id", Value: 2}, {Key: "region", Value: "eu"}}))...),
			OpInsert, Insert,
			[]string{"ReplaceOne " + js(t, shardKey) + " " + js(t, bson.D{{Key: "_id", Value: 2}, {Key: "region", Value: "eu"}}) + " upsert=true"}},
		{"update: updated and removed fields as $v:1",
			ev("update", 2, crud(id1, desc(bson.D{{Key: "qty", Value: 5}, {Key: "address.city", Value: "Lyon"}}, bson.A{"note"}, bson.A{}, bson.D{}))...),
			OpUpdate, Update,
			[]string{"UpdateOne " + js(t, id1) + " " + js(t, bson.D{
				{Key: "$set", Value: bson.D{{Key: "qty", Value: 5}, {Key: "address.city", Value: "Lyon"}}},
				{Key: "$unset", Value: bson.D{{Key: "note", Value: true}}}}) + " upsert=false"}},
		{"update: removed fields only",
			ev("update", 2, crud(id1, desc(bson.D{}, bson.A{"a", "b.c"}, bson.A{}, nil))...),
			OpUpdate, Update,
			[]string{"UpdateOne " + js(t, id1) + " " + js(t, bson.D{{Key: "$unset", Value: bson.D{{Key: "a", Value: true}, {Key: "b.c", Value: true}}}}) + " upsert=false"}},
		{"update: a numeric field name named by disambiguatedPaths",
			ev("update", 2, crud(id1, desc(bson.D{{Key: "scores.0", Value: 10}}, bson.A{}, bson.A{}, bson.D{{Key: "scores.0", Value: bson.A{"scores", "0"}}}))...),
			OpUpdate, Update,
			[]string{"UpdateOne " + js(t, id1) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "scores.0", Value: 10}}}}) + " upsert=false"}},
		{"update: $pull from the middle truncates, then sets the element",
			ev("update", 2, crud(id1, desc(bson.D{{Key: "tags.1", Value: "c"}}, bson.A{}, bson.A{trunc("tags", 2)}, bson.D{}))...),
			OpUpdate, Update,
			[]string{
				"UpdateOne " + js(t, id1) + " " + js(t, bson.D{{Key: "$push", Value: bson.D{{Key: "tags", Value: bson.D{{Key: "$each", Value: bson.A{}}, {Key: "$slice", Value: int32(2)}}}}}}) + " upsert=false",
				"UpdateOne " + js(t, id1) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "tags.1", Value: "c"}}}}) + " upsert=false",
			}},
		{"update: $pop on a nested array with other fields",
			ev("update", 2, crud(id1, desc(bson.D{{Key: "qty", Value: 1}}, bson.A{"old"}, bson.A{trunc("a.b", 0)}, bson.D{}))...),
			OpUpdate, Update,
			[]string{"UpdateOne " + js(t, id1) + " " + js(t, bson.D{
				{Key: "$set", Value: bson.D{{Key: "qty", Value: 1}}},
				{Key: "$unset", Value: bson.D{{Key: "old", Value: ""}}},
				{Key: "$push", Value: bson.D{{Key: "a.b", Value: bson.D{{Key: "$each", Value: bson.A{}}, {Key: "$slice", Value: int32(0)}}}}}}) + " upsert=false"}},
		{"update: truncated array of documents, an element's field set by an index path",
			ev("update", 2, crud(id1, desc(bson.D{{Key: "m.1.x", Value: 2}}, bson.A{"m.0.y"}, bson.A{trunc("m", 2)},
				bson.D{{Key: "m.1.x", Value: bson.A{"m", int32(1), "x"}}, {Key: "m.0.y", Value: bson.A{"m", int32(0), "y"}}}))...),
			OpUpdate, Update,
			[]string{
				"UpdateOne " + js(t, id1) + " " + js(t, bson.D{{Key: "$push", Value: bson.D{{Key: "m", Value: bson.D{{Key: "$each", Value: bson.A{}}, {Key: "$slice", Value: int32(2)}}}}}}) + " upsert=false",
				"UpdateOne " + js(t, id1) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "m.1.x", Value: 2}}}, {Key: "$unset", Value: bson.D{{Key: "m.0.y", Value: ""}}}}) + " upsert=false",
			}},
		{"update: a dotted field name with a full document is a replacement",
			ev("update", 2, crud(id1, desc(bson.D{{Key: "price.usd", Value: 3}}, bson.A{}, bson.A{}, bson.D{{Key: "price.usd", Value: bson.A{"price.usd"}}}),
				e("fullDocument", bson.D{{Key: "_id", Value: 1}, {Key: "price.usd", Value: 3}}))...),
			OpUpdate, Update,
			[]string{"ReplaceOne " + js(t, id1) + " " + js(t, bson.D{{Key: "_id", Value: 1}, {Key: "price.usd", Value: 3}}) + " upsert=true"}},
		{"update with a full document is still written as operators",
			ev("update", 2, crud(id1, desc(bson.D{{Key: "qty", Value: 4}}, bson.A{}, bson.A{}, bson.D{}), e("fullDocument", order))...),
			OpUpdate, Update,
			[]string{"UpdateOne " + js(t, id1) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "qty", Value: 4}}}}) + " upsert=false"}},
		{"update that changes nothing", ev("update", 2, crud(id1, desc(bson.D{}, bson.A{}, bson.A{}, bson.D{}))...),
			OpUpdate, Update, nil},
		{"replace", ev("replace", 3, crud(id1, e("fullDocument", bson.D{{Key: "_id", Value: 1}, {Key: "item", Value: "ink"}}))...),
			OpUpdate, Update,
			[]string{"ReplaceOne " + js(t, id1) + " " + js(t, bson.D{{Key: "_id", Value: 1}, {Key: "item", Value: "ink"}}) + " upsert=true"}},
		{"delete", ev("delete", 4, crud(shardKey)...), OpDelete, Delete,
			[]string{"DeleteOne " + js(t, shardKey)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entry := convertOne(t, tt.event)
			if entry.Op() != tt.op || entry.NS() != "shop.orders" {
				t.Fatalf("entry %s, want op %s on shop.orders", entry, tt.op)
			}
			wantTS := tt.event[2].Value.(bson.Timestamp)
			if !entry.TS().Equal(wantTS) {
				t.Errorf("ts %v, want the clusterTime %v", entry.TS(), wantTS)
			}
			if w, ok := entry.WallTime(); !ok || w.UnixMilli() != int64(tt.event[3].Value.(bson.DateTime)) {
				t.Errorf("wall %v, want the wallTime", w)
			}
			if ui, ok := entry.UI(); !ok || !bytes.Equal(ui.Data, collUUID.Data) {
				t.Errorf("ui %v, want the collectionUUID", ui)
			}
			if skip, reason := (&Filter{}).Skip(entry); skip {
				t.Errorf("Skip = %s", reason)
			}
			ws, err := Translate(entry)
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			var got []string
			for _, w := range ws {
				if w.Kind != tt.kind || w.NS != "shop.orders" {
					t.Errorf("write kind %s ns %s, want %s on shop.orders", w.Kind, w.NS, tt.kind)
				}
				got = append(got, describeModel(t, w.Model))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("writes:\n got  %q\n want %q", got, tt.want)
			}
		})
	}
}

func TestEventToEntryDDL(t *testing.T) {
	idIndex := bson.D{{Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "_id", Value: int32(1)}}}, {Key: "name", Value: "_id_"}}
	skuIndex := bson.D{{Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "sku", Value: int32(1)}}}, {Key: "name", Value: "sku_1"}, {Key: "unique", Value: true}}
	dateIndex := bson.D{{Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "at", Value: int32(-1)}}}, {Key: "name", Value: "at_-1"}}
	withUUID := e("collectionUUID", collUUID)
	tests := []struct {
		name  string
		event bson.D
		class CommandClass
		ns    string // the namespace acted on
		to    string
		check func(t *testing.T, d DDL)
	}{
		{"create with options", ev("create", 10, withUUID, ns("shop", "log"),
			e("operationDescription", bson.D{{Key: "capped", Value: true}, {Key: "size", Value: int64(1 << 20)}, {Key: "idIndex", Value: idIndex}}),
			e("nsType", "collection")),
			CmdCreate, "shop.log", "", func(t *testing.T, d DDL) {
				opts, err := d.Options()
				want := bson.D{{Key: "capped", Value: true}, {Key: "size", Value: int64(1 << 20)}, {Key: "idIndex", Value: idIndex}}
				if err != nil || js(t, opts) != js(t, want) {
					t.Errorf("Options = %s, %v; want %s", opts, err, js(t, want))
				}
			}},
		{"create a view", ev("create", 10, ns("shop", "big"),
			e("operationDescription", bson.D{{Key: "viewOn", Value: "orders"}, {Key: "pipeline", Value: bson.A{bson.D{{Key: "$match", Value: bson.D{{Key: "qty", Value: bson.D{{Key: "$gt", Value: 10}}}}}}}}}),
			e("nsType", "view")),
			CmdCreate, "shop.big", "", func(t *testing.T, d DDL) {
				opts, _ := d.Options()
				if v, ok := opts.Lookup("viewOn").StringValueOK(); !ok || v != "orders" {
					t.Errorf("Options = %s, want viewOn orders", opts)
				}
			}},
		{"drop", ev("drop", 11, withUUID, ns("shop", "log")), CmdDrop, "shop.log", "", nil},
		{"rename over an existing collection", ev("rename", 12, withUUID, ns("shop", "orders"),
			e("to", bson.D{{Key: "db", Value: "archive"}, {Key: "coll", Value: "orders2024"}}),
			e("operationDescription", bson.D{{Key: "to", Value: bson.D{{Key: "db", Value: "archive"}, {Key: "coll", Value: "orders2024"}}}, {Key: "dropTarget", Value: collUUID}})),
			CmdRenameCollection, "shop.orders", "archive.orders2024", func(t *testing.T, d DDL) {
				if !d.DropTarget() {
					t.Error("DropTarget = false, want true (operationDescription.dropTarget)")
				}
			}},
		{"rename", ev("rename", 12, withUUID, ns("shop", "a"), e("to", bson.D{{Key: "db", Value: "shop"}, {Key: "coll", Value: "b"}}),
			e("operationDescription", bson.D{{Key: "to", Value: bson.D{{Key: "db", Value: "shop"}, {Key: "coll", Value: "b"}}}})),
			CmdRenameCollection, "shop.a", "shop.b", func(t *testing.T, d DDL) {
				if d.DropTarget() {
					t.Error("DropTarget = true, want false")
				}
			}},
		{"dropDatabase", ev("dropDatabase", 13, ns("shop", "")), CmdDropDatabase, "shop.", "", nil},
		{"createIndexes", ev("createIndexes", 14, withUUID, ns("shop", "orders"),
			e("operationDescription", bson.D{{Key: "indexes", Value: bson.A{skuIndex, dateIndex}}})),
			CmdCommitIndexBuild, "shop.orders", "", func(t *testing.T, d DDL) {
				specs, err := d.Indexes()
				if err != nil || len(specs) != 2 || js(t, specs[0]) != js(t, skuIndex) || js(t, specs[1]) != js(t, dateIndex) {
					t.Errorf("Indexes = %v, %v", specs, err)
				}
			}},
		{"dropIndexes", ev("dropIndexes", 15, withUUID, ns("shop", "orders"),
			e("operationDescription", bson.D{{Key: "indexes", Value: bson.A{skuIndex}}})),
			CmdDropIndexes, "shop.orders", "", func(t *testing.T, d DDL) {
				names, err := d.DropIndexNames()
				if err != nil || !slices.Equal(names, []string{"sku_1"}) {
					t.Errorf("DropIndexNames = %v, %v", names, err)
				}
			}},
		{"dropIndexes of several", ev("dropIndexes", 15, withUUID, ns("shop", "orders"),
			e("operationDescription", bson.D{{Key: "indexes", Value: bson.A{skuIndex, dateIndex}}})),
			CmdDropIndexes, "shop.orders", "", func(t *testing.T, d DDL) {
				names, err := d.DropIndexNames()
				if err != nil || !slices.Equal(names, []string{"sku_1", "at_-1"}) {
					t.Errorf("DropIndexNames = %v, %v", names, err)
				}
			}},
		{"modify (collMod) hides an index", ev("modify", 16, withUUID, ns("shop", "orders"),
			e("operationDescription", bson.D{{Key: "index", Value: bson.D{{Key: "name", Value: "sku_1"}, {Key: "hidden", Value: true}}}}),
			e("stateBeforeChange", bson.D{{Key: "collectionOptions", Value: bson.D{{Key: "uuid", Value: collUUID}}}, {Key: "indexOptions", Value: bson.D{{Key: "hidden", Value: false}}}})),
			CmdCollMod, "shop.orders", "", func(t *testing.T, d DDL) {
				opts, err := d.Options()
				want := bson.D{{Key: "index", Value: bson.D{{Key: "name", Value: "sku_1"}, {Key: "hidden", Value: true}}}}
				if err != nil || js(t, opts) != js(t, want) {
					t.Errorf("Options = %s, %v; want %s", opts, err, js(t, want))
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entry := convertOne(t, tt.event)
			if entry.Command() != tt.class {
				t.Fatalf("command %s, want %s", entry.Command(), tt.class)
			}
			if skip, reason := (&Filter{}).Skip(entry); skip {
				t.Errorf("Skip = %s", reason)
			}
			ws, err := Translate(entry)
			if err != nil || len(ws) != 1 || ws[0].DDL == nil {
				t.Fatalf("Translate = %v, %v; want one DDL write", ws, err)
			}
			d := ws[0].DDL
			if got := d.NS.DB + "." + d.NS.Coll; got != tt.ns {
				t.Errorf("NS %s, want %s", got, tt.ns)
			}
			if tt.to != "" && d.To.String() != tt.to {
				t.Errorf("To %s, want %s", d.To, tt.to)
			}
			if tt.check != nil {
				tt.check(t, *d)
			}
		})
	}
}

func TestEventToEntryIndexBuildIsSkipped(t *testing.T) {
	for _, op := range []string{"startIndexBuild", "abortIndexBuild"} {
		entry := convertOne(t, ev(op, 20, ns("shop", "orders"), e("operationDescription", bson.D{{Key: "indexes", Value: bson.A{bson.D{{Key: "name", Value: "x_1"}}}}})))
		if skip, reason := (&Filter{}).Skip(entry); !skip || reason != ReasonIndexBuild {
			t.Errorf("%s: Skip = %v %q, want %q", op, skip, reason, ReasonIndexBuild)
		}
	}
}

func TestEventToEntryWithoutEntry(t *testing.T) {
	for _, op := range []string{"shardCollection", "refineCollectionShardKey", "reshardCollection"} {
		raw, ok, err := EventToEntry(marshal(t, ev(op, 30, ns("shop", "orders"),
			e("operationDescription", bson.D{{Key: "shardKey", Value: bson.D{{Key: "region", Value: 1}}}, {Key: "unique", Value: false}}))))
		if err != nil || ok || raw != nil {
			t.Errorf("%s: EventToEntry = %v, %v, %v; want no entry", op, raw, ok, err)
		}
	}
}

func TestEventToEntryErrors(t *testing.T) {
	id1 := bson.D{{Key: "_id", Value: 1}}
	noClusterTime := ev("insert", 1, crud(id1, e("fullDocument", id1))...)
	noClusterTime = slices.Delete(noClusterTime, 2, 3)
	tests := []struct {
		name  string
		event any
		want  error
		text  string
	}{
		{"invalidate", ev("invalidate", 40), ErrChangeStreamInvalidated, "invalidate"},
		{"unknown operationType", ev("fooBar", 40, ns("shop", "orders")), ErrUnsupportedChangeEvent, `"fooBar"`},
		{"time-series create", ev("create", 40, ns("shop", "metrics"),
			e("operationDescription", bson.D{{Key: "viewOn", Value: "system.buckets.metrics"}, {Key: "pipeline", Value: bson.A{}}})),
			ErrUnsupportedChangeEvent, "time-series collection shop.metrics"},
		{"time-series create by nsType", ev("create", 40, ns("shop", "metrics"), e("nsType", "timeseries"),
			e("operationDescription", bson.D{})), ErrUnsupportedChangeEvent, "time-series"},
		{"no clusterTime", noClusterTime, ErrMalformedChangeEvent, "clusterTime"},
		{"no operationType", bson.D{{Key: "clusterTime", Value: tsN(1)}}, ErrMalformedChangeEvent, "operationType"},
		{"insert without documentKey", ev("insert", 1, ns("shop", "orders"), e("fullDocument", id1)), ErrMalformedChangeEvent, "documentKey is missing"},
		{"insert without fullDocument", ev("insert", 1, crud(id1)...), ErrMalformedChangeEvent, "fullDocument is missing"},
		{"documentKey without _id", ev("delete", 1, crud(bson.D{{Key: "x", Value: 1}})...), ErrMalformedChangeEvent, "no _id"},
		{"ns with a dotted db", ev("delete", 1, e("ns", bson.D{{Key: "db", Value: "a.b"}, {Key: "coll", Value: "c"}}), e("documentKey", id1)), ErrMalformedChangeEvent, "ns.db"},
		{"update without updateDescription", ev("update", 1, crud(id1)...), ErrMalformedChangeEvent, "updateDescription"},
		{"dotted field name without a full document",
			ev("update", 2, crud(id1, desc(bson.D{{Key: "price.usd", Value: 3}}, bson.A{}, bson.A{}, bson.D{{Key: "price.usd", Value: bson.A{"price.usd"}}}))...),
			ErrUnaddressablePath, "fullDocument"},
		{"$-prefixed field", ev("update", 2, crud(id1, desc(bson.D{}, bson.A{"$bad"}, bson.A{}, nil))...), ErrUnaddressablePath, "$bad"},
		{"truncated array with a field path through it",
			ev("update", 2, crud(id1, desc(bson.D{{Key: "arr.x", Value: 1}}, bson.A{}, bson.A{trunc("arr", 1)}, nil))...),
			ErrMalformedChangeEvent, "not an index"},
		{"negative newSize", ev("update", 2, crud(id1, desc(bson.D{}, bson.A{}, bson.A{trunc("arr", -1)}, nil))...), ErrMalformedChangeEvent, "newSize"},
		{"createIndexes without indexes", ev("createIndexes", 14, ns("shop", "orders"), e("operationDescription", bson.D{})), ErrMalformedChangeEvent, "indexes"},
		{"dropIndexes with a nameless index", ev("dropIndexes", 14, ns("shop", "orders"),
			e("operationDescription", bson.D{{Key: "indexes", Value: bson.A{bson.D{{Key: "key", Value: bson.D{{Key: "a", Value: 1}}}}}}})), ErrMalformedChangeEvent, "no name"},
		{"rename without to", ev("rename", 14, ns("shop", "orders")), ErrMalformedChangeEvent, "to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, ok, err := EventToEntry(marshal(t, tt.event))
			if !errors.Is(err, tt.want) || ok || raw != nil {
				t.Fatalf("EventToEntry = %v, %v, %v; want an error wrapping %v", raw, ok, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q does not mention %q", err, tt.text)
			}
		})
	}
	if _, _, err := EventToEntry(bson.Raw{1, 2, 3}); !errors.Is(err, ErrMalformedChangeEvent) {
		t.Errorf("EventToEntry(garbage) = %v, want ErrMalformedChangeEvent", err)
	}
}

// assemble parses entries and runs them through an Assembler, as the
// replayer does, returning the units.
func assemble(t *testing.T, entries []bson.Raw) []Unit {
	t.Helper()
	asm := NewAssembler()
	var units []Unit
	for _, raw := range entries {
		entry, err := Parse(raw)
		if err != nil {
			t.Fatalf("Parse(%s): %v", raw, err)
		}
		u, ok, err := asm.Add(entry)
		if err != nil {
			t.Fatalf("Assembler.Add(%s): %v", entry, err)
		}
		if ok {
			units = append(units, u)
		}
	}
	return units
}

func TestEventsToEntriesTransactions(t *testing.T) {
	id := func(n int) bson.D { return bson.D{{Key: "_id", Value: n}} }
	txn := func(op string, fields ...bson.E) bson.D {
		return append(ev(op, 51, fields...), e("lsid", lsid(7)), e("txnNumber", int64(3)))
	}
	events := []bson.D{
		ev("insert", 50, crud(id(1), e("fullDocument", id(1)))...),
		// One transaction: three events with the commit's clusterTime.
		txn("insert", crud(id(2), e("fullDocument", bson.D{{Key: "_id", Value: 2}, {Key: "n", Value: 1}}))...),
		txn("update", crud(id(1), desc(bson.D{{Key: "n", Value: 2}}, bson.A{}, bson.A{}, bson.D{}))...),
		txn("delete", crud(id(3))...),
		// A sharding event between: no entry.
		ev("shardCollection", 52, ns("shop", "orders"), e("operationDescription", bson.D{{Key: "shardKey", Value: bson.D{{Key: "_id", Value: "hashed"}}}})),
		// A transaction of one event: a plain entry with its lsid.
		append(ev("insert", 53, crud(id(4), e("fullDocument", id(4)))...), e("lsid", lsid(8)), e("txnNumber", int64(1))),
		// A batched deleteMany (one applyOps without a session, MongoDB 6.1+).
		ev("delete", 54, crud(id(5))...),
		ev("delete", 54, crud(id(6))...),
		ev("drop", 55, ns("shop", "orders"), e("collectionUUID", collUUID)),
	}
	raws := make([]bson.Raw, len(events))
	for i, ev := range events {
		raws[i] = marshal(t, ev)
	}
	entries, err := EventsToEntries(raws)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 5 {
		t.Fatalf("%d entries, want 5: %v", len(entries), entries)
	}
	// No two entries share a ts, and they ascend.
	for i := 1; i < len(entries); i++ {
		a, b := entryTS(t, entries[i-1]), entryTS(t, entries[i])
		if !b.After(a) {
			t.Errorf("entry %d ts %v is not after entry %d ts %v", i, b, i-1, a)
		}
	}
	txnEntry, _ := Parse(entries[1])
	if txnEntry.Command() != CmdApplyOps || txnEntry.LSID() == nil {
		t.Errorf("transaction entry %s (lsid %v), want an applyOps with the lsid", txnEntry, txnEntry.LSID())
	}
	if n, ok := txnEntry.TxnNumber(); !ok || n != 3 {
		t.Errorf("txnNumber %d %v, want 3", n, ok)
	}
	single, _ := Parse(entries[2])
	if single.Op() != OpInsert || single.LSID() == nil {
		t.Errorf("one-event transaction: %s lsid %v, want a plain insert with its lsid", single, single.LSID())
	}
	batched, _ := Parse(entries[3])
	if batched.Command() != CmdApplyOps || batched.LSID() != nil {
		t.Errorf("batched delete: %s lsid %v, want an applyOps without lsid", batched, batched.LSID())
	}

	units := assemble(t, entries)
	type want struct {
		ts   bson.Timestamp
		txn  bool
		kind []string
	}
	wants := []want{
		{tsN(50), false, []string{"insert"}},
		{tsN(51), true, []string{"insert", "update", "delete"}},
		{tsN(53), false, []string{"insert"}},
		{tsN(54), true, []string{"delete", "delete"}},
		{tsN(55), false, []string{"command"}},
	}
	if len(units) != len(wants) {
		t.Fatalf("%d units, want %d", len(units), len(wants))
	}
	for i, u := range units {
		var kinds []string
		for _, op := range u.Ops {
			if !op.TS().Equal(u.TS) {
				t.Errorf("unit %d: op ts %v, want the unit's %v", i, op.TS(), u.TS)
			}
			ws, err := Translate(op)
			if err != nil || len(ws) != 1 {
				t.Fatalf("unit %d: Translate(%s) = %v, %v", i, op, ws, err)
			}
			kinds = append(kinds, ws[0].Kind.String())
		}
		if !u.TS.Equal(wants[i].ts) || u.Txn != wants[i].txn || !slices.Equal(kinds, wants[i].kind) {
			t.Errorf("unit %d: ts %v txn %v kinds %v, want %+v", i, u.TS, u.Txn, kinds, wants[i])
		}
	}
	// The transaction's update is the $v:1 update of its event.
	ws, _ := Translate(units[1].Ops[1])
	if got, want := describeModel(t, ws[0].Model), "UpdateOne "+js(t, id(1))+" "+js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: 2}}}})+" upsert=false"; got != want {
		t.Errorf("transaction update %s, want %s", got, want)
	}
}

func TestEventsToEntriesError(t *testing.T) {
	raws := []bson.Raw{marshal(t, ev("insert", 1, crud(bson.D{{Key: "_id", Value: 1}}, e("fullDocument", bson.D{{Key: "_id", Value: 1}}))...)), marshal(t, ev("invalidate", 2))}
	if _, err := EventsToEntries(raws); !errors.Is(err, ErrChangeStreamInvalidated) || !strings.Contains(err.Error(), "event 1") {
		t.Errorf("EventsToEntries = %v, want event 1's ErrChangeStreamInvalidated", err)
	}
}

// seedEvents are the recorded events of the tests above, the fuzzer's
// seeds.
func seedEvents(t testing.TB) []bson.Raw {
	id1 := bson.D{{Key: "_id", Value: 1}}
	events := []bson.D{
		ev("insert", 1, crud(id1, e("fullDocument", bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: bson.A{1, 2}}}))...),
		ev("update", 2, crud(id1, desc(bson.D{{Key: "q", Value: 5}, {Key: "a.b", Value: 1}}, bson.A{"n"}, bson.A{}, bson.D{}))...),
		ev("update", 2, crud(id1, desc(bson.D{{Key: "m.1.x", Value: 2}}, bson.A{"m.0.y"}, bson.A{trunc("m", 2)},
			bson.D{{Key: "m.1.x", Value: bson.A{"m", int32(1), "x"}}}))...),
		ev("update", 2, crud(id1, desc(bson.D{{Key: "p.u", Value: 3}}, bson.A{}, bson.A{}, bson.D{{Key: "p.u", Value: bson.A{"p.u"}}}), e("fullDocument", id1))...),
		ev("replace", 3, crud(id1, e("fullDocument", id1))...),
		append(ev("delete", 4, crud(id1)...), e("lsid", lsid(1)), e("txnNumber", int64(2))),
		ev("create", 5, ns("db", "c"), e("operationDescription", bson.D{{Key: "idIndex", Value: bson.D{{Key: "name", Value: "_id_"}}}})),
		ev("drop", 5, ns("db", "c")),
		ev("rename", 5, ns("db", "c"), e("to", bson.D{{Key: "db", Value: "db"}, {Key: "coll", Value: "d"}})),
		ev("dropDatabase", 5, ns("db", "")),
		ev("createIndexes", 5, ns("db", "c"), e("operationDescription", bson.D{{Key: "indexes", Value: bson.A{bson.D{{Key: "name", Value: "x_1"}}}}})),
		ev("dropIndexes", 5, ns("db", "c"), e("operationDescription", bson.D{{Key: "indexes", Value: bson.A{bson.D{{Key: "name", Value: "x_1"}}}}})),
		ev("modify", 5, ns("db", "c"), e("operationDescription", bson.D{{Key: "validator", Value: bson.D{}}})),
		ev("shardCollection", 6, ns("db", "c")),
		ev("invalidate", 7),
	}
	out := make([]bson.Raw, len(events))
	for i, ev := range events {
		out[i] = marshal(t, ev)
	}
	return out
}

// FuzzEventToEntry feeds arbitrary bytes to EventToEntry: it never panics,
// its errors wrap the package's sentinels, and every entry it makes
// parses and goes through Translate or the Assembler without a panic.
func FuzzEventToEntry(f *testing.F) {
	for _, raw := range seedEvents(f) {
		f.Add([]byte(raw))
		f.Add([]byte(raw[:len(raw)/2]))
	}
	f.Add([]byte{})
	f.Add([]byte{5, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, ok, err := EventToEntry(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedChangeEvent) && !errors.Is(err, ErrUnsupportedChangeEvent) &&
				!errors.Is(err, ErrChangeStreamInvalidated) && !errors.Is(err, ErrUnaddressablePath) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		if !ok {
			return
		}
		entry, err := Parse(raw)
		if err != nil {
			t.Fatalf("the entry does not parse: %v\nentry %s", err, raw)
		}
		_, _ = (&Filter{}).Skip(entry)
		if _, _, err := NewAssembler().Add(entry); err != nil {
			t.Fatalf("Assembler.Add: %v", err)
		}
		_, _ = Translate(entry)
		// The same event twice shares a clusterTime: one applyOps.
		entries, err := EventsToEntries([]bson.Raw{data, data})
		if err != nil || len(entries) != 1 {
			t.Fatalf("EventsToEntries = %d entries, %v; want 1", len(entries), err)
		}
		group, err := Parse(entries[0])
		if err != nil {
			t.Fatalf("the applyOps entry does not parse: %v\nentry %s", err, entries[0])
		}
		if _, _, err := NewAssembler().Add(group); err != nil {
			t.Fatalf("Assembler.Add(applyOps): %v", err)
		}
	})
}

// entryTS is the ts of a raw entry.
func entryTS(t *testing.T, raw bson.Raw) bson.Timestamp {
	t.Helper()
	e, err := Parse(raw)
	if err != nil {
		t.Fatalf("Parse(%s): %v", raw, err)
	}
	return e.TS()
}
