package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestReplayMongoShapes replays oplog shapes that mongod 6.0 to 8.0 write
// and FerretDB never does, injected into a FerretDB source's oplog and read
// back through the real tailer onto a FerretDB target (docs/oplog-shapes.md
// lists them with the server source files they come from):
//
//   - a retryable insertMany on 8.0: one applyOps per batch, with lsid,
//     txnNumber, multiOpType: 1 and a prevOpTime naming the previous batch
//     (op_observer_impl.cpp, oplog.cpp): each batch a unit of its own;
//   - a batched delete too large for one entry: a partialTxn chain with no
//     lsid, linked by prevOpTime (batched_write_context.cpp);
//   - convertToCapped: create of tmpXXXXX.convertToCapped.<name>, the
//     clone's inserts flagged fromMigrate, then renameCollection over the
//     original with dropTarget (capped_utils.cpp), with an include list
//     that names only the final collection: it is copied again;
//   - emptycapped (onEmptyCapped): every document deleted;
//   - $out into a collection the include list names, through a temporary
//     collection it does not (tmp.agg_out.<uuid>, then a rename with
//     dropTarget): the collection is copied again from the source.
func TestReplayMongoShapes(t *testing.T) {

	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "app", "big", []any{doc("_id", 1), doc("_id", 2), doc("_id", 3), doc("_id", 4)})
	insertDocs(t, sc, "app", "logs", []any{doc("_id", 1, "m", "a"), doc("_id", 2, "m", "b")})
	insertDocs(t, sc, "app", "report", []any{doc("_id", "stale")})
	insertDocs(t, sc, "app", "other", []any{doc("_id", 1)})

	task := newTask(t, "shapes", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		// The include list does not name the temporary collections, so the
		// renames out of them copy the collection again from the source.
		// (With every collection selected, convertToCapped is replayed as
		// logged: the clone's fromMigrate inserts, then the rename; FerretDB
		// cannot rename a collection whose name holds a '.', so that form is
		// checked on the translated writes in pkg/engine/oplog.)
		t.Namespaces = config.Namespaces{Include: []string{`app\.(orders|big|logs|report)`}}
	})
	opts := engineOpts()
	opts.CheckpointInterval = 100 * time.Millisecond
	e, stop := startEngine(t, task, opts)
	defer func() { _ = stop() }()
	waitEngineCaughtUp(t, e, sc, 2*time.Minute)

	// $out into app.report: the source really holds the new report (the
	// rename is done on the source so that the copy finds it), and the
	// injected entries below show the temporary collection and the rename
	// that $out logs.
	// (FerretDB's renameCollection has no dropTarget: drop, then rename.)
	if err := sc.Database("app").Collection("report").Drop(context.Background()); err != nil {
		t.Fatal(err)
	}
	insertDocs(t, sc, "app", "staging", []any{doc("_id", "r1", "total", 10), doc("_id", "r2", "total", 20)})
	if err := sc.Database("admin").RunCommand(context.Background(), doc("renameCollection", "app.staging", "to", "app.report")).Err(); err != nil {
		t.Fatalf("rename on the source: %v", err)
	}
	in := newInjector(t, sc) // above the entries of the real writes
	// 8.0 retryable insertMany of 5 documents in batches of 2, 2 and 1.
	retry := func(prev bson.Timestamp, ids ...int) bson.Timestamp {
		var ops bson.A
		for _, id := range ids {
			ops = append(ops, doc("op", "i", "ns", "app.orders", "o", doc("_id", id, "v", id), "o2", doc("_id", id), "stmtId", int32(id)))
		}
		return in.add("c", "admin.$cmd", o(doc("applyOps", ops)), lsid(7), bson.E{Key: "txnNumber", Value: int64(3)},
			bson.E{Key: "prevOpTime", Value: doc("ts", prev, "t", int64(1))}, bson.E{Key: "multiOpType", Value: int32(1)})
	}
	b1 := retry(bson.Timestamp{}, 1, 2)
	b2 := retry(b1, 3, 4)
	retry(b2, 5)
	// A batched delete of app.big split over two entries, no session.
	d1 := in.add("c", "admin.$cmd", o(doc("applyOps", bson.A{del("app.big", 1), del("app.big", 2)}, "partialTxn", true)),
		bson.E{Key: "prevOpTime", Value: doc("ts", bson.Timestamp{}, "t", int64(-1))})
	in.add("c", "admin.$cmd", o(doc("applyOps", bson.A{del("app.big", 3)}, "count", int64(2))),
		bson.E{Key: "prevOpTime", Value: doc("ts", d1, "t", int64(1))})
	// convertToCapped of app.logs.
	in.add("c", "app.$cmd", o(doc("create", "tmpQ1w2E.convertToCapped.logs", "capped", true, "size", int64(1<<20), "temp", true)))
	in.add("i", "app.tmpQ1w2E.convertToCapped.logs", o(doc("_id", 1, "m", "a")), bson.E{Key: "fromMigrate", Value: true})
	in.add("i", "app.tmpQ1w2E.convertToCapped.logs", o(doc("_id", 2, "m", "b")), bson.E{Key: "fromMigrate", Value: true})
	in.add("c", "app.$cmd", o(doc("renameCollection", "app.tmpQ1w2E.convertToCapped.logs", "to", "app.logs", "stayTemp", false, "dropTarget", true)))
	// emptycapped of the new capped collection, then a fresh insert.
	in.add("c", "app.$cmd", o(doc("emptycapped", "logs")))
	in.add("i", "app.logs", o(doc("_id", 9, "m", "after")))
	// $out into app.report through tmp.agg_out.<uuid>.
	in.add("c", "app.$cmd", o(doc("create", "tmp.agg_out.1d2f", "temp", true)))
	in.add("i", "app.tmp.agg_out.1d2f", o(doc("_id", "r1", "total", 10)))
	in.add("i", "app.tmp.agg_out.1d2f", o(doc("_id", "r2", "total", 20)))
	last := in.add("c", "app.$cmd", o(doc("renameCollection", "app.tmp.agg_out.1d2f", "to", "app.report", "stayTemp", false, "dropTarget", true)))

	waitApplied(t, e, last)
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("replay: %v", err)
	}
	want := map[string][]string{
		"app.orders": {`{"$numberInt":"1"}`, `{"$numberInt":"2"}`, `{"$numberInt":"3"}`, `{"$numberInt":"4"}`, `{"$numberInt":"5"}`},
		"app.big":    {`{"$numberInt":"4"}`},
		"app.logs":   {`{"$numberInt":"9"}`},
		"app.report": {`"r1"`, `"r2"`},
	}
	for ns, w := range want {
		if got := ids(t, dc, ns); strings.Join(got, ",") != strings.Join(sortStrings(w), ",") {
			t.Errorf("%s on the target: %v, want %v", ns, got, w)
		}
	}
	if got := collNames(t, dc, "app"); strings.Join(got, ",") != "big,logs,orders,report" {
		t.Errorf("app collections on the target: %v, want big, logs, orders, report (no temporary collection, other not selected)", got)
	}
}
