package oplog

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// shapeRow is one oplog shape: entries in MongoDB's exact form and what
// the replay pipeline (Filter.Skip, Assembler, Translate) makes of them.
// docs/oplog-shapes.md lists every row by server version; a row's name is
// its fixture there (TestOplogShapes/<name>).
type shapeRow struct {
	name    string
	shard   bool // read from a shard member's oplog
	entries []bson.D
	// want describes, in order: "skip <reason>", "unit <ts>/<first ts>"
	// for each unit the Assembler emits, then per operation its writes
	// ("ReplaceOne ...", "UpdateOne ...", "DeleteOne ...",
	// "ddl <command> <ns>[ -> <to>]") or "skip <reason>".
	want []string
	// err, when set, is the error the entries end with.
	err error
}

// describeShape runs entries through what the replayer does before the
// sink and describes the outcome.
func describeShape(t *testing.T, row shapeRow) ([]string, error) {
	t.Helper()
	f := &Filter{ShardMember: row.shard}
	a := NewAssembler()
	var out []string
	for _, d := range row.entries {
		e := mustParse(t, d)
		if skip, reason := f.Skip(e); skip {
			out = append(out, "skip "+reason)
			continue
		}
		u, ok, err := a.Add(e)
		if err != nil {
			return out, err
		}
		if !ok {
			continue
		}
		if u.Txn || u.FirstTS != u.TS {
			out = append(out, fmt.Sprintf("unit %d/%d", u.TS.I, u.FirstTS.I))
		}
		for _, op := range u.Ops {
			if skip, reason := f.Skip(op); skip {
				out = append(out, "skip "+reason)
				continue
			}
			ws, err := Translate(op)
			if err != nil {
				return out, err
			}
			for _, w := range ws {
				switch {
				case w.DDL != nil:
					s := "ddl " + w.DDL.Class.String() + " " + w.DDL.NS.String()
					if w.DDL.Class == CmdRenameCollection {
						s += " -> " + w.DDL.To.String()
					}
					out = append(out, s)
				case w.Model != nil:
					out = append(out, model(t, w.Model))
				}
			}
		}
	}
	return out, nil
}

// Short builders for the table.
func ent(i uint32, op, ns string, o any, kv ...any) bson.D {
	return with(with(outer(i, op, ns), "o", o), kv...)
}

func idOf(v any) bson.D { return bson.D{{Key: "_id", Value: v}} }

func prevOp(i uint32) bson.D {
	ts := bson.Timestamp{}
	if i > 0 {
		ts = tsAt(i)
	}
	return bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}}
}

func js(t *testing.T, v any) string { return marshal(t, v).String() }

// TestOplogShapes replays the oplog shapes mongod 4.4 to 8.0 and FerretDB
// v1 write, taken from MongoDB's server source (the file is named on each
// group), and checks what replay makes of each.
func TestOplogShapes(t *testing.T) {
	uuid := bson.Binary{Subtype: 4, Data: make([]byte, 16)}
	a1 := idOf(1)
	skKey := bson.D{{Key: "sk", Value: 5}, {Key: "_id", Value: 1}}
	one := bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: 1}}
	view := bson.D{{Key: "_id", Value: "shop.paid"}, {Key: "viewOn", Value: "orders"}, {Key: "pipeline", Value: bson.A{}}}
	rows := []shapeRow{
		// CRUD (repl/oplog_entry.idl, op_observer_impl.cpp).
		{name: "insert", entries: []bson.D{ent(1, "i", "shop.orders", one)},
			want: []string{"ReplaceOne " + js(t, a1) + " " + js(t, one) + " upsert=true"}},
		{name: "insert with document key in o2", entries: []bson.D{ent(1, "i", "shop.orders", one, "o2", skKey)},
			want: []string{"ReplaceOne " + js(t, skKey) + " " + js(t, one) + " upsert=true"}},
		{name: "update $v1 operators", entries: []bson.D{ent(1, "u", "shop.orders", bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{{Key: "x", Value: 2}}}}, "o2", a1)},
			want: []string{"UpdateOne " + js(t, a1) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 2}}}}) + " upsert=false"}},
		{name: "update $v2 diff", entries: []bson.D{ent(1, "u", "shop.orders", bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{
			{Key: "d", Value: bson.D{{Key: "old", Value: false}}}, {Key: "u", Value: bson.D{{Key: "x", Value: 2}}}, {Key: "sa", Value: bson.D{{Key: "i", Value: bson.D{{Key: "b", Value: 1}}}}}}}}, "o2", a1)},
			want: []string{
				"UpdateOne " + js(t, a1) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 2}}}, {Key: "$unset", Value: bson.D{{Key: "old", Value: ""}, {Key: "a.b", Value: ""}}}}) + " upsert=false",
				"UpdateOne " + js(t, a1) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "a.b", Value: 1}}}}) + " upsert=false"}},
		{name: "update $v2 array diff", entries: []bson.D{ent(1, "u", "shop.orders", bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{
			{Key: "sarr", Value: bson.D{{Key: "a", Value: true}, {Key: "l", Value: 2}, {Key: "u1", Value: 9}}}}}}, "o2", a1)},
			want: []string{
				"UpdateOne " + js(t, a1) + " " + js(t, bson.D{{Key: "$push", Value: bson.D{{Key: "arr", Value: bson.D{{Key: "$each", Value: bson.A{}}, {Key: "$slice", Value: int32(2)}}}}}}) + " upsert=false",
				"UpdateOne " + js(t, a1) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "arr.1", Value: 9}}}}) + " upsert=false"}},
		{name: "update $v2 diff of a field named with a dot", entries: []bson.D{ent(1, "u", "shop.orders", bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{
			{Key: "u", Value: bson.D{{Key: "a.b", Value: 1}}}}}}, "o2", a1)}, err: ErrUnaddressablePath},
		{name: "replacement", entries: []bson.D{ent(1, "u", "shop.orders", one, "o2", a1)},
			want: []string{"ReplaceOne " + js(t, a1) + " " + js(t, one) + " upsert=true"}},
		// 5.0+ stores top-level $ fields but refuses them in a
		// replacement (code 52): a pipeline update writes them.
		{name: "replacement with top-level $ fields", entries: []bson.D{ent(1, "u", "shop.orders", bson.D{{Key: "_id", Value: 1}, {Key: "$v", Value: 2}, {Key: "$p", Value: 1}}, "o2", a1)},
			want: []string{"UpdateOne " + js(t, a1) + " " + literalJS(t, bson.D{{Key: "_id", Value: 1}, {Key: "$v", Value: 2}, {Key: "$p", Value: 1}}) + " upsert=true"}},
		{name: "insert with top-level $ fields", entries: []bson.D{ent(1, "i", "shop.orders", bson.D{{Key: "_id", Value: 1}, {Key: "$p", Value: 1}})},
			want: []string{"UpdateOne " + js(t, a1) + " " + literalJS(t, bson.D{{Key: "_id", Value: 1}, {Key: "$p", Value: 1}}) + " upsert=true"}},
		{name: "replacement with nested $ and dotted fields", entries: []bson.D{ent(1, "u", "shop.orders", bson.D{{Key: "_id", Value: 1}, {Key: "a.b", Value: 1}, {Key: "c", Value: bson.D{{Key: "$d", Value: 1}}}}, "o2", a1)},
			want: []string{"ReplaceOne " + js(t, a1) + " " + js(t, bson.D{{Key: "_id", Value: 1}, {Key: "a.b", Value: 1}, {Key: "c", Value: bson.D{{Key: "$d", Value: 1}}}}) + " upsert=true"}},
		{name: "delete", entries: []bson.D{ent(1, "d", "shop.orders", a1)}, want: []string{"DeleteOne " + js(t, a1)}},
		{name: "delete by document key", entries: []bson.D{ent(1, "d", "shop.orders", skKey)}, want: []string{"DeleteOne " + js(t, skKey)}},

		// Retryable findAndModify images: 4.4 logs the image as a no-op
		// and points at it (preImageOpTime); 5.1+ keeps it in
		// config.image_collection and marks the entry (needsRetryImage).
		{name: "findAndModify image as a noop (4.4)", entries: []bson.D{
			ent(1, "n", "shop.orders", one),
			ent(2, "u", "shop.orders", bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{{Key: "x", Value: 2}}}}, "o2", a1, "preImageOpTime", prevOp(1), "lsid", lsidOf(3), "txnNumber", int64(1), "stmtId", int32(0))},
			want: []string{"skip noop", "UpdateOne " + js(t, a1) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 2}}}}) + " upsert=false"}},
		{name: "findAndModify needsRetryImage (5.1+)", entries: []bson.D{
			ent(1, "d", "shop.orders", a1, "needsRetryImage", "preImage", "lsid", lsidOf(3), "txnNumber", int64(1), "stmtId", int32(0))},
			want: []string{"DeleteOne " + js(t, a1)}},

		// applyOps (transaction_participant.cpp, op_observer_impl.cpp,
		// batched_write_context.cpp, repl/apply_ops.cpp).
		{name: "transaction in one entry", entries: []bson.D{txnEntry(1, 0, 1, []bson.D{insertOp("shop.orders", one), deleteOp("shop.orders", 2)})},
			want: []string{"unit 1/1", "ReplaceOne " + js(t, a1) + " " + js(t, one) + " upsert=true", "DeleteOne " + js(t, idOf(2))}},
		{name: "transaction as a partialTxn chain", entries: []bson.D{
			txnEntry(1, 0, 1, []bson.D{insertOp("shop.orders", one)}, "partialTxn"),
			txnEntry(2, 1, 1, []bson.D{deleteOp("shop.orders", 2)})},
			want: []string{"unit 2/1", "ReplaceOne " + js(t, a1) + " " + js(t, one) + " upsert=true", "DeleteOne " + js(t, idOf(2))}},
		{name: "prepared transaction committed", entries: []bson.D{
			txnEntry(1, 0, 1, []bson.D{insertOp("shop.orders", one)}, "prepare"),
			txnControl(2, 1, 1, "commitTransaction")},
			want: []string{"unit 2/1", "ReplaceOne " + js(t, a1) + " " + js(t, one) + " upsert=true"}},
		{name: "prepared transaction aborted", entries: []bson.D{
			txnEntry(1, 0, 1, []bson.D{insertOp("shop.orders", one)}, "prepare"),
			txnControl(2, 1, 1, "abortTransaction")}, want: nil},
		{name: "batched delete (6.1+)", entries: []bson.D{
			ent(1, "c", "admin.$cmd", bson.D{{Key: "applyOps", Value: bson.A{deleteOp("shop.orders", 1), deleteOp("shop.orders", 2)}}})},
			want: []string{"unit 1/1", "DeleteOne " + js(t, a1), "DeleteOne " + js(t, idOf(2))}},
		{name: "batched write over 16MB as a sessionless chain (6.1+)", entries: []bson.D{
			ent(1, "c", "admin.$cmd", bson.D{{Key: "applyOps", Value: bson.A{deleteOp("shop.orders", 1)}}, {Key: "partialTxn", Value: true}}, "prevOpTime", prevOp(0)),
			ent(2, "c", "admin.$cmd", bson.D{{Key: "applyOps", Value: bson.A{deleteOp("shop.orders", 2)}}, {Key: "count", Value: int64(2)}}, "prevOpTime", prevOp(1))},
			want: []string{"unit 2/1", "DeleteOne " + js(t, a1), "DeleteOne " + js(t, idOf(2))}},
		{name: "retryable insertMany batches (8.0)", entries: retryableInsertMany("shop.orders", 70, 1),
			want: func() []string {
				out := []string{"unit 1/1"}
				for id := range 70 {
					if id == 64 {
						out = append(out, "unit 2/2")
					}
					out = append(out, "ReplaceOne "+js(t, doc(id))+" "+js(t, doc(id))+" upsert=true")
				}
				return out
			}()},
		{name: "user applyOps with an upserting update", entries: []bson.D{
			ent(1, "c", "admin.$cmd", bson.D{{Key: "applyOps", Value: bson.A{bson.D{{Key: "op", Value: "u"}, {Key: "ns", Value: "shop.orders"}, {Key: "o", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}}, {Key: "o2", Value: a1}, {Key: "b", Value: true}}}}})},
			want: []string{"unit 1/1", "UpdateOne " + js(t, a1) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}) + " upsert=true"}},

		// Index builds and collMod (index_builds_coordinator.cpp,
		// coll_mod.cpp).
		{name: "two-phase index build", entries: []bson.D{
			ent(1, "c", "shop.$cmd", bson.D{{Key: "startIndexBuild", Value: "orders"}, {Key: "indexBuildUUID", Value: uuid}, {Key: "indexes", Value: bson.A{bson.D{{Key: "v", Value: 2}, {Key: "key", Value: bson.D{{Key: "x", Value: 1}}}, {Key: "name", Value: "x_1"}}}}}),
			ent(2, "c", "shop.$cmd", bson.D{{Key: "commitIndexBuild", Value: "orders"}, {Key: "indexBuildUUID", Value: uuid}, {Key: "indexes", Value: bson.A{bson.D{{Key: "v", Value: 2}, {Key: "key", Value: bson.D{{Key: "x", Value: 1}}}, {Key: "name", Value: "x_1"}}}}})},
			want: []string{"skip indexBuildStartOrAbort", "ddl commitIndexBuild shop.orders"}},
		{name: "aborted index build", entries: []bson.D{
			ent(1, "c", "shop.$cmd", bson.D{{Key: "abortIndexBuild", Value: "orders"}, {Key: "indexBuildUUID", Value: uuid}, {Key: "indexes", Value: bson.A{}}})},
			want: []string{"skip indexBuildStartOrAbort"}},
		{name: "createIndexes on an empty collection", entries: []bson.D{
			ent(1, "c", "shop.$cmd", bson.D{{Key: "createIndexes", Value: "orders"}, {Key: "v", Value: 2}, {Key: "key", Value: bson.D{{Key: "x", Value: 1}}}, {Key: "name", Value: "x_1"}})},
			want: []string{"ddl createIndexes shop.orders"}},
		{name: "collMod of a validator", entries: []bson.D{
			ent(1, "c", "shop.$cmd", bson.D{{Key: "collMod", Value: "orders"}, {Key: "validator", Value: bson.D{{Key: "x", Value: bson.D{{Key: "$gt", Value: 0}}}}}, {Key: "validationLevel", Value: "strict"}})},
			want: []string{"ddl collMod shop.orders"}},
		{name: "collMod of an index", entries: []bson.D{
			ent(1, "c", "shop.$cmd", bson.D{{Key: "collMod", Value: "orders"}, {Key: "index", Value: bson.D{{Key: "name", Value: "x_1"}, {Key: "hidden", Value: true}}}})},
			want: []string{"ddl collMod shop.orders"}},
		{name: "dbCheck", entries: []bson.D{ent(1, "c", "shop.$cmd", bson.D{{Key: "dbCheck", Value: "orders"}})}, want: []string{"skip dbCheck"}},
		{name: "emptycapped", entries: []bson.D{ent(1, "c", "shop.$cmd", bson.D{{Key: "emptycapped", Value: "logs"}})}, want: []string{"ddl emptycapped shop.logs"}},

		// Time series (timeseries/*.cpp, catalog/create_collection.cpp;
		// fixtures in timeseries_test.go): the buckets collection's
		// create (the view insert makes nothing: the create makes the
		// whole collection, see TimeSeriesDDL), bucket writes as they are.
		{name: "time-series create", entries: []bson.D{
			ent(0, "c", "shop.$cmd", bson.D{{Key: "create", Value: "system.views"}}), // the database's first view
			ent(1, "c", "shop.$cmd", tsBucketsCreate()),
			ent(2, "i", "shop.system.views", bson.D{{Key: "_id", Value: "shop.weather"}, {Key: "viewOn", Value: "system.buckets.weather"}, {Key: "pipeline", Value: bson.A{}}})},
			want: []string{"skip internalNamespace", "ddl create shop.system.buckets.weather"}},
		{name: "time-series bucket insert (control.version 1)", entries: []bson.D{ent(1, "i", "shop.system.buckets.weather", tsBucketV1())},
			want: []string{"ReplaceOne " + js(t, idOf(tsBucketID)) + " " + js(t, tsBucketV1()) + " upsert=true"}},
		{name: "time-series measurement added ($v:2 bucket diff)", entries: []bson.D{ent(1, "u", "shop.system.buckets.weather", tsAddMeasurement(), "o2", idOf(tsBucketID))},
			want: []string{
				"UpdateOne " + js(t, idOf(tsBucketID)) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "control.max.t", Value: tsT1}, {Key: "control.max.temp", Value: int32(22)}}}, {Key: "$unset", Value: bson.D{{Key: "data.t.1", Value: ""}}}}) + " upsert=false",
				"UpdateOne " + js(t, idOf(tsBucketID)) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "data.t.1", Value: tsT1}}}, {Key: "$unset", Value: bson.D{{Key: "data.temp.1", Value: ""}}}}) + " upsert=false",
				"UpdateOne " + js(t, idOf(tsBucketID)) + " " + js(t, bson.D{{Key: "$set", Value: bson.D{{Key: "data.temp.1", Value: int32(22)}}}}) + " upsert=false"}},
		{name: "time-series bucket compressed (6.0-7.0 replacement, control.version 2)", entries: []bson.D{ent(1, "u", "shop.system.buckets.weather", tsBucketV2(2), "o2", idOf(tsBucketID))},
			want: []string{"ReplaceOne " + js(t, idOf(tsBucketID)) + " " + js(t, tsBucketV2(2)) + " upsert=true"}},
		{name: "time-series compressed bucket insert (8.0)", entries: []bson.D{ent(1, "i", "shop.system.buckets.weather", tsBucketV2(1))},
			want: []string{"ReplaceOne " + js(t, idOf(tsBucketID)) + " " + js(t, tsBucketV2(1)) + " upsert=true"}},
		{name: "time-series binary diff of a compressed bucket (8.0)", entries: []bson.D{ent(1, "u", "shop.system.buckets.weather", tsBinaryDiff(), "o2", idOf(tsBucketID))},
			err: ErrBinaryDiff},
		{name: "time-series bucket delete", entries: []bson.D{ent(1, "d", "shop.system.buckets.weather", idOf(tsBucketID))},
			want: []string{"DeleteOne " + js(t, idOf(tsBucketID))}},
		{name: "time-series batched bucket deletes (7.0+)", entries: []bson.D{
			ent(1, "c", "admin.$cmd", bson.D{{Key: "applyOps", Value: bson.A{deleteOp("shop.system.buckets.weather", tsBucketID), deleteOp("shop.system.buckets.weather", 2)}}})},
			want: []string{"unit 1/1", "DeleteOne " + js(t, idOf(tsBucketID)), "DeleteOne " + js(t, idOf(2))}},
		{name: "time-series collMod of the granularity", entries: []bson.D{
			ent(1, "c", "shop.$cmd", bson.D{{Key: "collMod", Value: "system.buckets.weather"}, {Key: "timeseries", Value: bson.D{{Key: "granularity", Value: "minutes"}}}})},
			want: []string{"ddl collMod shop.system.buckets.weather"}},
		{name: "time-series drop", entries: []bson.D{
			ent(1, "d", "shop.system.views", idOf("shop.weather")),
			ent(2, "c", "shop.$cmd", bson.D{{Key: "drop", Value: "system.buckets.weather"}})},
			want: []string{"ddl drop shop.weather", "ddl drop shop.system.buckets.weather"}},

		// Views (catalog/durable_view_catalog.cpp).
		{name: "view created", entries: []bson.D{ent(1, "i", "shop.system.views", view)}, want: []string{"ddl create shop.paid"}},
		{name: "view modified", entries: []bson.D{ent(1, "u", "shop.system.views", view, "o2", idOf("shop.paid"))}, want: []string{"ddl collMod shop.paid"}},
		{name: "view dropped", entries: []bson.D{ent(1, "d", "shop.system.views", idOf("shop.paid"))}, want: []string{"ddl drop shop.paid"}},

		// DDL through temporary collections (catalog/capped_utils.cpp,
		// pipeline/process_interface, catalog/rename_collection.cpp).
		{name: "convertToCapped on a replica set", entries: []bson.D{
			ent(1, "c", "shop.$cmd", bson.D{{Key: "create", Value: "tmpAb1cD.convertToCapped.logs"}, {Key: "capped", Value: true}, {Key: "size", Value: 4096}, {Key: "temp", Value: true}}),
			ent(2, "i", "shop.tmpAb1cD.convertToCapped.logs", one, "fromMigrate", true),
			ent(3, "c", "admin.$cmd", bson.D{{Key: "renameCollection", Value: "shop.tmpAb1cD.convertToCapped.logs"}, {Key: "to", Value: "shop.logs"}, {Key: "stayTemp", Value: false}, {Key: "dropTarget", Value: uuid}})},
			want: []string{"ddl create shop.tmpAb1cD.convertToCapped.logs", "ReplaceOne " + js(t, a1) + " " + js(t, one) + " upsert=true",
				"ddl renameCollection shop.tmpAb1cD.convertToCapped.logs -> shop.logs"}},
		{name: "convertToCapped on a shard", shard: true, entries: []bson.D{
			ent(1, "i", "shop.tmpAb1cD.convertToCapped.logs", one, "fromMigrate", true)},
			want: []string{"ReplaceOne " + js(t, a1) + " " + js(t, one) + " upsert=true"}},
		{name: "$out through tmp.agg_out", entries: []bson.D{
			ent(1, "c", "shop.$cmd", bson.D{{Key: "create", Value: "tmp.agg_out.1d2f"}, {Key: "temp", Value: true}}),
			ent(2, "i", "shop.tmp.agg_out.1d2f", one),
			ent(3, "c", "admin.$cmd", bson.D{{Key: "renameCollection", Value: "shop.tmp.agg_out.1d2f"}, {Key: "to", Value: "shop.report"}, {Key: "stayTemp", Value: false}, {Key: "dropTarget", Value: true}})},
			want: []string{"ddl create shop.tmp.agg_out.1d2f", "ReplaceOne " + js(t, a1) + " " + js(t, one) + " upsert=true",
				"ddl renameCollection shop.tmp.agg_out.1d2f -> shop.report"}},

		// Chunk migrations on a shard (s/migration_*.cpp, range_deletion_util.cpp).
		{name: "chunk migration copy on a shard", shard: true, entries: []bson.D{ent(1, "i", "shop.orders", one, "fromMigrate", true)}, want: []string{"skip fromMigrate"}},
		{name: "range deletion on a shard", shard: true, entries: []bson.D{ent(1, "d", "shop.orders", a1, "fromMigrate", true)}, want: []string{"skip fromMigrate"}},

		// No-ops (repl/noop_writer.cpp, replication_coordinator_impl.cpp).
		{name: "periodic noop", entries: []bson.D{ent(1, "n", "", bson.D{{Key: "msg", Value: "periodic noop"}})}, want: []string{"skip noop"}},
		{name: "new primary noop", entries: []bson.D{ent(1, "n", "", bson.D{{Key: "msg", Value: "new primary"}})}, want: []string{"skip noop"}},

		// Internal namespaces.
		{name: "config.transactions write", entries: []bson.D{ent(1, "u", "config.transactions", one, "o2", a1)}, want: []string{"skip internalNamespace"}},

		// Anything else stops replay, naming the entry.
		{name: "unknown command", entries: []bson.D{ent(1, "c", "shop.$cmd", bson.D{{Key: "importCollection", Value: "orders"}})}, err: ErrUnknownCommand},
	}
	seen := map[string]bool{}
	for _, row := range rows {
		if seen[row.name] {
			t.Fatalf("two rows named %q", row.name)
		}
		seen[row.name] = true
		t.Run(row.name, func(t *testing.T) {
			got, err := describeShape(t, row)
			if row.err != nil {
				if !errors.Is(err, row.err) {
					t.Fatalf("err %v, want %v", err, row.err)
				}
				// The message names the entry: its op, namespace and ts.
				if !strings.Contains(err.Error(), "ts=100.") {
					t.Errorf("error %q does not name the entry's ts", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, row.want) {
				t.Errorf("replay of the shape\n got %q\nwant %q", got, row.want)
			}
		})
	}
}
