package e2e

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// injector writes oplog entries that FerretDB never writes itself
// (transactions, DDL, fromMigrate, no-ops) into a source's local.oplog.rs,
// with ts values above every entry the server wrote, so the real tailer
// reads them back in order.
type injector struct {
	t    *testing.T
	c    *mongo.Client
	base uint32
	i    uint32
}

func newInjector(t *testing.T, c *mongo.Client) *injector {
	t.Helper()
	newest, err := source.NewestTS(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	base := max(newest.T, uint32(time.Now().Unix())) + 5
	return &injector{t: t, c: c, base: base}
}

// next returns the ts of the next injected entry.
func (in *injector) next() bson.Timestamp {
	in.i++
	return bson.Timestamp{T: in.base, I: in.i}
}

// last returns the ts of the last injected entry.
func (in *injector) last() bson.Timestamp { return bson.Timestamp{T: in.base, I: in.i} }

// add injects an entry: fields after ts, op and ns.
func (in *injector) add(op, ns string, fields ...bson.E) bson.Timestamp {
	in.t.Helper()
	ts := in.next()
	doc := append(bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}, {Key: "op", Value: op}, {Key: "ns", Value: ns}}, fields...)
	if _, err := in.c.Database("local").Collection("oplog.rs").InsertOne(context.Background(), doc); err != nil {
		in.t.Fatalf("inject %v: %v", doc, err)
	}
	return ts
}

func o(v any) bson.E       { return bson.E{Key: "o", Value: v} }
func doc(kv ...any) bson.D { return with(bson.D{}, kv...) }
func with(d bson.D, kv ...any) bson.D {
	for i := 0; i+1 < len(kv); i += 2 {
		d = append(d, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return d
}
func ins(ns string, d bson.D) bson.D { return doc("op", "i", "ns", ns, "o", d) }
func del(ns string, id any) bson.D   { return doc("op", "d", "ns", ns, "o", doc("_id", id)) }

func lsid(n byte) bson.E {
	return bson.E{Key: "lsid", Value: doc("id", bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{n}, 16)})}
}

func txn(n byte, prev bson.Timestamp) []bson.E {
	return []bson.E{lsid(n), {Key: "txnNumber", Value: int64(1)}, {Key: "prevOpTime", Value: doc("ts", prev, "t", int64(1))}}
}

// waitApplied waits until replay's checkpoint reaches ts.
func waitApplied(t *testing.T, e *engine.Engine, ts bson.Timestamp) {
	t.Helper()
	waitFor(t, "replay to apply the injected entries", 2*time.Minute, func() bool {
		s := e.Status()
		if s.Phase == engine.PhaseFailed {
			t.Fatalf("the task failed before applying the injected entries: %s", s.Error)
		}
		return s.Replay != nil && s.Replay.AppliedTS.Compare(ts) >= 0 && s.Replay.InFlight == 0
	})
}

func ids(t *testing.T, c *mongo.Client, ns string) []string {
	t.Helper()
	db, coll := split(ns)
	var out []string
	for _, d := range docsByID(t, c, db, coll) {
		out = append(out, d.Lookup("_id").String())
	}
	return sortStrings(out)
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

func collNames(t *testing.T, c *mongo.Client, db string) []string {
	t.Helper()
	names, err := c.Database(db).ListCollectionNames(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	return sortStrings(names)
}

// TestReplayInjectedOplog covers DESIGN scenarios 5, 7 and 11 with entries
// read back through the real tailer: transactions (applyOps, a partialTxn
// chain checkpointed midway then resumed, prepared then committed,
// prepared then aborted), DDL (create, createIndexes, rename, drop and
// recreate, dropDatabase), no-op entries, and namespace
// filters and renames.
func TestReplayInjectedOplog(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "app", "t1", []any{doc("_id", 1, "v", "old"), doc("_id", 2, "v", "old")})
	insertDocs(t, sc, "app", "keep", []any{doc("_id", 1), doc("_id", 2)})
	insertDocs(t, sc, "junk", "stuff", []any{doc("_id", 1)})
	insertDocs(t, sc, "secret", "data", []any{doc("_id", 1)})
	insertDocs(t, sc, "sales", "orders", []any{doc("_id", 1)})

	task := newTask(t, "inject", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.Namespaces = config.Namespaces{Exclude: []string{`secret\..*`}, Rename: []config.Rename{{From: "sales", To: "sales_v2"}}}
	})
	opts := engineOpts()
	opts.CheckpointInterval = 100 * time.Millisecond
	e, stop := startEngine(t, task, opts)
	waitEngineCaughtUp(t, e, sc, 2*time.Minute)

	in := newInjector(t, sc)
	// applyOps (one transaction).
	in.add("c", "admin.$cmd", o(doc("applyOps", bson.A{ins("app.t1", doc("_id", 10)), ins("app.t1", doc("_id", 11)), del("app.t1", 2)})))
	// A no-op. (fromMigrate entries are a shard's chunk migrations only on
	// a shard: see TestReplayMongoShapes and the sharded tests.)
	in.add("n", "", o(doc("msg", "periodic noop")))
	// Prepared, then aborted: nothing applied.
	p1 := in.add("c", "admin.$cmd", append([]bson.E{o(doc("applyOps", bson.A{ins("app.t1", doc("_id", 40))}, "prepare", true))}, txn(3, bson.Timestamp{})...)...)
	in.add("c", "admin.$cmd", append([]bson.E{o(doc("abortTransaction", 1))}, txn(3, p1)...)...)
	// Prepared, then committed.
	p2 := in.add("c", "admin.$cmd", append([]bson.E{o(doc("applyOps", bson.A{ins("app.t1", doc("_id", 30))}, "prepare", true))}, txn(4, bson.Timestamp{})...)...)
	in.add("c", "admin.$cmd", append([]bson.E{o(doc("commitTransaction", 1, "commitTimestamp", in.last()))}, txn(4, p2)...)...)
	// The first half of a partialTxn chain, then a checkpoint and a stop.
	c1 := in.add("c", "admin.$cmd", append([]bson.E{o(doc("applyOps", bson.A{ins("app.t1", doc("_id", 20))}, "partialTxn", true))}, txn(5, bson.Timestamp{})...)...)
	afterFirstHalf := in.add("n", "", o(doc("msg", "noop inside the chain")))
	waitFor(t, "the reader to pass the first half of the chain", time.Minute, func() bool {
		s := e.Status()
		return s.Replay != nil && s.Replay.ReadTS.Compare(afterFirstHalf) >= 0
	})
	time.Sleep(500 * time.Millisecond) // several checkpoint intervals
	if got := e.Status().Replay.AppliedTS; got.Compare(c1) >= 0 {
		t.Fatalf("checkpoint %v passed the start of an open transaction %v", got, c1)
	}
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("stop: %v", err)
	}
	if n := len(ids(t, dc, "app.t1")); n != 3 { // 1, 10, 11 (2 deleted), 30
		t.Logf("app.t1 before the restart: %v", ids(t, dc, "app.t1"))
	}

	// The rest of the chain, then DDL.
	c2 := in.add("c", "admin.$cmd", append([]bson.E{o(doc("applyOps", bson.A{ins("app.t1", doc("_id", 21))}, "partialTxn", true))}, txn(5, c1)...)...)
	in.add("c", "admin.$cmd", append([]bson.E{o(doc("applyOps", bson.A{ins("app.t1", doc("_id", 22))}, "count", int64(3)))}, txn(5, c2)...)...)
	in.add("c", "app.$cmd", o(doc("create", "fresh")))
	in.add("i", "app.fresh", o(doc("_id", "a", "email", "a@x")))
	in.add("c", "app.$cmd", o(doc("createIndexes", "fresh", "v", 2, "key", doc("email", 1), "name", "email_1", "unique", true)))
	in.add("c", "app.$cmd", o(doc("renameCollection", "app.fresh", "to", "app.renamed", "stayTemp", false)))
	// Drop and recreate the same name: the new data stays.
	in.add("c", "app.$cmd", o(doc("drop", "t1")))
	in.add("c", "app.$cmd", o(doc("create", "t1")))
	in.add("i", "app.t1", o(doc("_id", "new")))
	in.add("c", "junk.$cmd", o(doc("dropDatabase", 1)))
	// Filters and renames: excluded namespaces are never touched, renamed
	// ones land under the new name, DDL included.
	in.add("i", "secret.data", o(doc("_id", 2)))
	in.add("c", "secret.$cmd", o(doc("drop", "data")))
	in.add("i", "sales.orders", o(doc("_id", 2)))
	in.add("c", "sales.$cmd", o(doc("create", "returns")))
	last := in.add("i", "sales.returns", o(doc("_id", "r1")))

	e2, stop2 := startEngine(t, task, opts)
	waitApplied(t, e2, last)
	if err := stop2(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("second run: %v", err)
	}

	want := map[string][]string{
		"app.t1":           {`"new"`},
		"app.keep":         {`{"$numberInt":"1"}`, `{"$numberInt":"2"}`},
		"app.renamed":      {`"a"`},
		"sales_v2.orders":  {`{"$numberInt":"1"}`, `{"$numberInt":"2"}`},
		"sales_v2.returns": {`"r1"`},
	}
	for ns, w := range want {
		if got := ids(t, dc, ns); strings.Join(got, ",") != strings.Join(sortStrings(w), ",") {
			t.Errorf("%s on the target: %v, want %v", ns, got, w)
		}
	}
	if got := collNames(t, dc, "app"); strings.Join(got, ",") != "keep,renamed,t1" {
		t.Errorf("app collections on the target: %v, want keep, renamed, t1", got)
	}
	if got := collNames(t, dc, "junk"); len(got) != 0 {
		t.Errorf("junk survived dropDatabase: %v", got)
	}
	if got := collNames(t, dc, "secret"); len(got) != 0 {
		t.Errorf("excluded database secret was touched on the target: %v", got)
	}
	if got := collNames(t, dc, "sales"); len(got) != 0 {
		t.Errorf("renamed database sales exists on the target under its old name: %v", got)
	}
	// The unique index came with createIndexes.
	if _, err := dc.Database("app").Collection("renamed").InsertOne(context.Background(), doc("_id", "b", "email", "a@x")); err == nil {
		t.Errorf("the replayed unique index is missing: a duplicate email was accepted")
	}
}

// TestReplayStopsWhenOplogWindowLost: a checkpoint older than the oldest
// oplog entry stops the task with OplogWindowLost before anything is
// written (DESIGN scenario 3).
func TestReplayStopsWhenOplogWindowLost(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "app", "c", []any{doc("_id", 1)})
	task := newTask(t, "window", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
	})
	e, stop := startEngine(t, task, engineOpts())
	waitEngineCaughtUp(t, e, sc, 2*time.Minute)
	_ = stop()

	// The source moves on while the task is stopped, and its oplog no
	// longer reaches back to the checkpoint.
	insertDocs(t, sc, "app", "c", []any{doc("_id", 2)})
	tasks := dc.Database("mongoferry").Collection("tasks")
	if _, err := tasks.UpdateOne(context.Background(), doc("_id", "window"),
		doc("$set", doc("appliedTS", bson.Timestamp{T: 1, I: 1}))); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dc)

	yaml := writeFile(t, "name: window\nmode: fullAndIncremental\nsource: {uri: \""+src.URI+"\"}\ntarget: {uri: \""+dst.URI+"\"}\nverify: {mode: none}\n")
	cmd := exec.Command(ferryBinary(t), "run", "-f", yaml, "--progress", "none", "--listen", "")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("run: %v (want exit code 3)\n%s", err, out)
	}
	for _, want := range []string{"OplogWindowLost", "resync"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not say %q:\n%s", want, out)
		}
	}
	if after := snapshot(t, dc); after != before {
		t.Errorf("the target changed although the task stopped:\nbefore %s\nafter  %s", before, after)
	}
}

// snapshot renders every document of every database of a server.
func snapshot(t *testing.T, c *mongo.Client) string {
	t.Helper()
	ctx := context.Background()
	dbs, err := c.ListDatabaseNames(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, db := range sortStrings(dbs) {
		for _, coll := range collNames(t, c, db) {
			b.WriteString(db + "." + coll + ":")
			for _, id := range ids(t, c, db+"."+coll) {
				b.WriteString(id + ";")
			}
			raw, _ := c.Database(db).Collection(coll).FindOne(ctx, bson.D{}).Raw()
			b.WriteString(raw.String())
		}
	}
	return b.String()
}

// TestReplayLateOplogEntry: an entry that becomes visible in the source's
// oplog after later entries were applied (a hole, which FerretDB's oplog
// shows under concurrent writes) is not applied in place, over newer
// changes, nor lost: the documents it touched are re-read from the source.
// The late entries are written into local.oplog.rs below the position the
// real tailer has read, and carry stale contents, so applying them in place
// would leave the target different from the source.
func TestReplayLateOplogEntry(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	if p, err := conn.ProbeProfile(context.Background(), sc); err != nil || !p.OplogHasHoles {
		t.Fatalf("profile %+v, %v: FerretDB's oplog can show entries out of order, but it was not recognised", p, err)
	}
	insertDocs(t, sc, "app", "c", []any{doc("_id", 1, "v", "a"), doc("_id", 2, "v", "a"), doc("_id", 3, "v", "a")})
	task := newTask(t, "late", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
	})
	e, stop := startEngine(t, task, engineOpts())
	waitEngineCaughtUp(t, e, sc, 2*time.Minute)
	if _, err := sc.Database("app").Collection("c").UpdateOne(context.Background(), doc("_id", 1), doc("$set", doc("v", "current"))); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Database("app").Collection("c").DeleteOne(context.Background(), doc("_id", 3)); err != nil {
		t.Fatal(err)
	}
	in := newInjector(t, sc)
	waitApplied(t, e, in.add("n", "", o(doc("msg", "the reader moves past the hole"))))

	// Below the read position: a stale insert of a document the source has
	// changed since, a delete of one the source still has, and an insert
	// of one the source has deleted.
	hole := bson.Timestamp{T: in.base - 1}
	for _, entry := range []bson.D{
		ins("app.c", doc("_id", 1, "v", "stale")),
		del("app.c", 2),
		ins("app.c", doc("_id", 3, "v", "stale")),
	} {
		hole.I++
		late := append(bson.D{{Key: "ts", Value: hole}, {Key: "t", Value: int64(1)}}, entry...)
		if _, err := sc.Database("local").Collection("oplog.rs").InsertOne(context.Background(), late); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the late entries to be re-read from the source", 2*time.Minute, func() bool {
		s := e.Status()
		return s.Replay != nil && s.Replay.Applied["refetch"] >= 3
	})
	waitApplied(t, e, in.add("n", "", o(doc("msg", "after the hole"))))
	st := e.Status()
	if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
	if got := st.Replay.Applied["refetch"]; got != 3 {
		t.Errorf("documents re-read for late entries: %d, want 3", got)
	}
	assertSameDocs(t, sc, "app.c", dc, "app.c")
}
