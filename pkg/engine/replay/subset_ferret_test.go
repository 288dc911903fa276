package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// subsetQuery is the filter of shop.orders in the tests below.
const subsetQuery = `{"tenant": "a", "info.tier": {"$ne": "free"}}`

// TestFilteredReplayUpdateShapes replays the update shapes FerretDB does
// not log ($v:1 operators, $v:2 diffs, a transaction's applyOps) from a
// scripted oplog onto a FerretDB target, for a namespace with a filter.
// The source is modelled by its final documents (Options.Lookup). The
// target starts with the source's matching documents as they were at the
// first entry (the copy), or as they are after the last (a copy read
// later, or a resume from a checkpoint behind what was applied: every
// entry is an overlap write). Either way it must end holding exactly the
// source's matching documents, and only the updates that touch a field
// the filter reads may re-read the source.
func TestFilteredReplayUpdateShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a FerretDB server (make ferretdb); skipped with -short")
	}
	ctx := context.Background()
	dc := testserver.Start(t, testserver.Options{OplogBytes: -1}).MustClient(t)
	type D = bson.D
	doc := func(id int32, kv ...any) D {
		d := D{{Key: "_id", Value: id}}
		for i := 0; i+1 < len(kv); i += 2 {
			d = append(d, bson.E{Key: kv[i].(string), Value: kv[i+1]})
		}
		return d
	}
	// What the source starts with, and the target holds of it (the copy).
	initial := []D{
		doc(1, "tenant", "a", "v", int32(1)),
		doc(2, "tenant", "a", "v", int32(1)),
		doc(3, "tenant", "b", "v", int32(1)),
		doc(4, "tenant", "a", "info", D{{Key: "tier", Value: "paid"}}),
		doc(7, "tenant", "a", "v", int32(1)),
		doc(9, "tenant", "b"),
	}
	// What the source holds after the entries below.
	final := []D{
		doc(1, "tenant", "a", "v", int32(3)),
		doc(2, "tenant", "b", "v", int32(1)),
		doc(3, "tenant", "a", "v", int32(5), "w", int32(1)),
		doc(4, "tenant", "a", "info", D{{Key: "tier", Value: "free"}}),
		doc(5, "tenant", "a"),
		doc(6, "tenant", "b"),
		doc(7, "tenant", "b", "v", int32(9)),
		doc(8, "tenant", "b"),
		doc(10, "tenant", "a"),
	}
	const ns = "shop.orders"
	at := func(i uint32) bson.Timestamp { return bson.Timestamp{T: 100, I: i} }
	entry := func(i uint32, op string, o D, o2 D, more ...bson.E) bson.Raw {
		on := ns
		if op == "c" {
			on = "admin.$cmd"
		}
		d := D{{Key: "ts", Value: at(i)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: op}, {Key: "ns", Value: on}, {Key: "o", Value: o}}
		if o2 != nil {
			d = append(d, bson.E{Key: "o2", Value: o2})
		}
		return raw(t, append(d, more...))
	}
	inner := func(op string, o, o2 D) D {
		d := D{{Key: "op", Value: op}, {Key: "ns", Value: ns}, {Key: "o", Value: o}}
		if o2 != nil {
			d = append(d, bson.E{Key: "o2", Value: o2})
		}
		return d
	}
	diff := func(d D) D { return D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: d}} }
	set := func(kv ...any) D { return D{{Key: "$v", Value: int32(1)}, {Key: "$set", Value: doc(0, kv...)[1:]}} }
	id := func(n int32) D { return D{{Key: "_id", Value: n}} }
	entries := []bson.Raw{
		// not touching the filter: applied to 1, nothing for 3 (not on the target)
		entry(1, "u", diff(D{{Key: "u", Value: D{{Key: "v", Value: int32(2)}}}}), id(1)),
		entry(2, "u", diff(D{{Key: "u", Value: D{{Key: "v", Value: int32(5)}}}}), id(3)),
		// out of the filter by $set of its field, into it by a diff
		entry(3, "u", set("tenant", "b"), id(2)),
		entry(4, "u", diff(D{{Key: "u", Value: D{{Key: "tenant", Value: "a"}}}}), id(3)),
		// out of the filter by a sub-diff below a field it reads
		entry(5, "u", diff(D{{Key: "sinfo", Value: D{{Key: "u", Value: D{{Key: "tier", Value: "free"}}}}}}), id(4)),
		// a transaction: inserts matching and not, an update not touching
		// the filter, a delete of a document the target never had
		entry(6, "c", D{{Key: "applyOps", Value: bson.A{
			inner("i", doc(5, "tenant", "a"), nil),
			inner("i", doc(6, "tenant", "b"), nil),
			inner("u", diff(D{{Key: "i", Value: D{{Key: "w", Value: int32(1)}}}}), id(3)),
			inner("d", id(9), nil),
		}}}, nil,
			bson.E{Key: "lsid", Value: D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{7}, 16)}}}},
			bson.E{Key: "txnNumber", Value: int64(1)},
			bson.E{Key: "prevOpTime", Value: D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}}),
		// a replacement that leaves the filter, an insert that never enters it
		entry(7, "u", doc(7, "tenant", "b", "v", int32(9)), id(7)),
		entry(8, "i", doc(8, "tenant", "b"), nil),
		// $v:1 not touching the filter
		entry(9, "u", set("v", int32(3)), id(1)),
		// an insert that does not match, then an update into the filter:
		// over a later copy, the insert deletes the copied document and
		// the update's re-read writes it again
		entry(10, "i", doc(10, "tenant", "b"), nil),
		entry(11, "u", diff(D{{Key: "u", Value: D{{Key: "tenant", Value: "a"}}}}), id(10)),
	}

	sourceDocs := map[int32]bson.Raw{}
	for _, d := range final {
		sourceDocs[d[0].Value.(int32)] = raw(t, d)
	}
	_, m := filteredMapper(t, `shop\.orders`, subsetQuery)
	f, err := m.Filter(catalog.ParseNamespace(ns))
	if err != nil || f == nil {
		t.Fatalf("filter: %v %v", f, err)
	}
	subsetOf := func(ds []D) []bson.Raw {
		var out []bson.Raw
		for _, d := range ds {
			if b := raw(t, d); func() bool { ok, _ := f.Match(b); return ok }() {
				out = append(out, b)
			}
		}
		return out
	}
	for i, tc := range []struct {
		name   string
		copied []D
	}{
		{"copied before the first entry", initial},
		{"copied after the last entry", final},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lookups atomic.Int32
			lookup := func(_ context.Context, _ catalog.Namespace, filter bson.Raw) (bson.Raw, bson.Timestamp, error) {
				lookups.Add(1)
				return sourceDocs[filter.Lookup("_id").Int32()], bson.Timestamp{}, nil
			}
			// One database per case: the filter names shop.orders, so
			// the target's is renamed.
			var copied []any
			for _, d := range subsetOf(tc.copied) {
				copied = append(copied, d)
			}
			coll := dc.Database(fmt.Sprintf("case%d", i)).Collection("orders")
			if _, err := coll.InsertMany(ctx, copied); err != nil {
				t.Fatal(err)
			}
			spec, _ := filteredMapper(t, `shop\.orders`, subsetQuery)
			spec.Namespaces.Rename = []config.Rename{{From: "shop", To: coll.Database().Name()}}
			m, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
			if err != nil {
				t.Fatal(err)
			}
			r := New(Options{Task: "subset", Spec: spec, Reader: source.NewScripted(at(0), entries...), Target: dc, Mapper: m,
				From: at(0), CheckpointInterval: time.Hour, Lookup: lookup})
			runUntil(t, r, at(uint32(len(entries))), time.Minute)
			assertSubset(t, coll, subsetOf(final))
			// The $set of tenant, the two diffs of tenant and the sub-diff
			// of info.
			if n := lookups.Load(); n != 4 {
				t.Errorf("the source was read %d times, want 4 (the updates touching a field the filter reads)", n)
			}
		})
	}
}

// TestFilteredReplayOnFerretDB replays a FerretDB source's oplog onto a
// FerretDB target for a namespace with a filter: inserts matching and
// not, updates moving documents into and out of the filter and updates
// beside it, a replacement, deletes, and a transaction (an applyOps entry
// written into the source's oplog: FerretDB has no transactions) with an
// insert the filter leaves out. FerretDB logs every update as the whole
// new document ({$v: 1, $set: <document>}); read so (as a task reads a
// FerretDB source) each is a replacement tested on the filter, read as
// $set operators each touches the filter's field and is re-read from the
// source. Either way the target must end equal to find(filter) on the
// source, byte for byte, and hold nothing else.
func TestFilteredReplayOnFerretDB(t *testing.T) {
	if testing.Short() {
		t.Skip("needs FerretDB servers (make ferretdb); skipped with -short")
	}
	for _, tc := range []struct {
		name string
		tr   oplog.Translator
	}{
		{"whole-document updates", oplog.Translator{WholeDocumentUpdates: true}},
		{"updates as $set operators", oplog.Translator{}},
	} {
		t.Run(tc.name, func(t *testing.T) { filteredReplayOnFerretDB(t, tc.tr) })
	}
}

func filteredReplayOnFerretDB(t *testing.T, tr oplog.Translator) {
	ctx := context.Background()
	src, dst := testserver.Start(t), testserver.Start(t, testserver.Options{OplogBytes: -1})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	type D = bson.D
	order := func(id, tenant string, n int32) D {
		return D{{Key: "_id", Value: id}, {Key: "tenant", Value: tenant}, {Key: "n", Value: n}, {Key: "info", Value: D{{Key: "tier", Value: "paid"}}}}
	}
	srcColl, dstColl := sc.Database("shop").Collection("orders"), dc.Database("shop").Collection("orders")
	var seeded []any
	for i, id := range []string{"a1", "a2", "a3", "a4", "a5", "a6", "b1", "b2", "b3", "b4"} {
		seeded = append(seeded, order(id, id[:1], int32(i)))
	}
	if _, err := srcColl.InsertMany(ctx, seeded); err != nil {
		t.Fatal(err)
	}
	spec, m := filteredMapper(t, `shop\.orders`, subsetQuery)
	f, _ := m.Filter(catalog.ParseNamespace("shop.orders"))
	// The copy: find(filter) on the source.
	copyDocs := findAll(t, srcColl, f.Query())
	var copied []any
	for _, d := range copyDocs {
		copied = append(copied, d)
	}
	if _, err := dstColl.InsertMany(ctx, copied); err != nil {
		t.Fatal(err)
	}
	from := newestOplogTS(t, sc)

	setOf := func(kv ...any) D {
		d := D{}
		for i := 0; i+1 < len(kv); i += 2 {
			d = append(d, bson.E{Key: kv[i].(string), Value: kv[i+1]})
		}
		return D{{Key: "$set", Value: d}}
	}
	byID := func(id string) D { return D{{Key: "_id", Value: id}} }
	steps := []struct {
		name string
		do   func() error
	}{
		{"insert matching", func() error { _, err := srcColl.InsertOne(ctx, order("a7", "a", 7)); return err }},
		{"insert not matching", func() error { _, err := srcColl.InsertOne(ctx, order("b5", "b", 8)); return err }},
		{"$set of the filter's field: out", func() error { _, err := srcColl.UpdateOne(ctx, byID("a1"), setOf("tenant", "b")); return err }},
		{"$set of the filter's field: in", func() error { _, err := srcColl.UpdateOne(ctx, byID("b1"), setOf("tenant", "a")); return err }},
		{"$set below a filter's field: out", func() error { _, err := srcColl.UpdateOne(ctx, byID("a2"), setOf("info.tier", "free")); return err }},
		{"$set beside the filter, matching", func() error { _, err := srcColl.UpdateOne(ctx, byID("a3"), setOf("n", int32(30))); return err }},
		{"$set beside the filter, not matching", func() error { _, err := srcColl.UpdateOne(ctx, byID("b2"), setOf("n", int32(31))); return err }},
		{"out and in again", func() error {
			if _, err := srcColl.UpdateOne(ctx, byID("a4"), setOf("tenant", "c")); err != nil {
				return err
			}
			_, err := srcColl.UpdateOne(ctx, byID("a4"), setOf("tenant", "a", "n", int32(40)))
			return err
		}},
		{"replacement out of the filter", func() error {
			_, err := srcColl.ReplaceOne(ctx, byID("a5"), D{{Key: "tenant", Value: "b"}, {Key: "n", Value: int32(50)}})
			return err
		}},
		{"delete matching", func() error { _, err := srcColl.DeleteOne(ctx, byID("a6")); return err }},
		{"delete not matching", func() error { _, err := srcColl.DeleteOne(ctx, byID("b3")); return err }},
		{"the transaction's matching insert", func() error { _, err := srcColl.InsertOne(ctx, order("tx-a", "a", 60)); return err }},
		{"the transaction's delete", func() error { _, err := srcColl.DeleteOne(ctx, byID("b4")); return err }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	// A transaction after them, its ts above the server's: the insert of
	// tx-a and the delete of b4 again, and an insert of tx-b (not
	// matching, which the source never got: were it replayed unfiltered,
	// the target would hold it).
	newest := newestOplogTS(t, sc)
	txn := bson.Timestamp{T: newest.T, I: newest.I + 1}
	inner := func(op string, o D) D {
		return D{{Key: "op", Value: op}, {Key: "ns", Value: "shop.orders"}, {Key: "o", Value: o}}
	}
	if _, err := sc.Database("local").Collection("oplog.rs").InsertOne(ctx, D{
		{Key: "ts", Value: txn}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
		{Key: "o", Value: D{{Key: "applyOps", Value: bson.A{
			inner("i", order("tx-a", "a", 60)),
			inner("i", order("tx-b", "b", 61)),
			inner("d", byID("b4")),
		}}}},
		{Key: "lsid", Value: D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{9}, 16)}}}},
		{Key: "txnNumber", Value: int64(1)},
		{Key: "prevOpTime", Value: D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}},
	}); err != nil {
		t.Fatal(err)
	}
	last := newestOplogTS(t, sc)

	tailer := source.NewTailer(sc, from)
	tailer.Settle = 2 * time.Second
	r := New(Options{Task: "subset", Spec: spec, Reader: tailer, Source: sc, Target: dc, Mapper: m, From: from,
		SaveApplied: func(context.Context, bson.Timestamp) error { return nil }, Translator: tr})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	for deadline := time.Now().Add(2 * time.Minute); r.Status().AppliedTS.Compare(last) < 0; {
		select {
		case err := <-done:
			t.Fatalf("replay stopped: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not applied within 2 minutes: %+v", r.Status())
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	assertSubset(t, dstColl, findAll(t, srcColl, f.Query()))
	t.Logf("applied: %v", r.Status().Applied)
}

// findAll returns the documents of coll that match query, by _id.
func findAll(t *testing.T, coll *mongo.Collection, query any) []bson.Raw {
	t.Helper()
	cur, err := coll.Find(context.Background(), query, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	var out []bson.Raw
	for cur.Next(context.Background()) {
		out = append(out, append(bson.Raw(nil), cur.Current...))
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// assertSubset fails the test unless coll holds want (sorted by _id) and
// nothing else, byte for byte.
func assertSubset(t *testing.T, coll *mongo.Collection, want []bson.Raw) {
	t.Helper()
	got := findAll(t, coll, bson.D{})
	sort.Slice(want, func(i, j int) bool { return want[i].Lookup("_id").String() < want[j].Lookup("_id").String() })
	sort.Slice(got, func(i, j int) bool { return got[i].Lookup("_id").String() < got[j].Lookup("_id").String() })
	show := func(ds []bson.Raw) string {
		s := ""
		for _, d := range ds {
			s += fmt.Sprintf("\n  %s", d)
		}
		return s
	}
	if len(got) != len(want) {
		t.Fatalf("target holds %d documents, want the source's %d matching ones:\ntarget:%s\nwant:%s", len(got), len(want), show(got), show(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("target document %s, want %s", got[i], want[i])
		}
	}
}

// TestFilteredChangeStreamReplay: change-stream mode replays its events
// as the entries they stand for (oplog.EventsToEntries, the reader's
// conversion), so a filtered namespace follows the same rule: inserts
// and a replacement tested on their full documents, an update beside
// the filter applied, one setting the filter's field re-read, a
// transaction's events (one applyOps) filtered one by one.
func TestFilteredChangeStreamReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a FerretDB server (make ferretdb); skipped with -short")
	}
	dc := testserver.Start(t, testserver.Options{OplogBytes: -1}).MustClient(t)
	type D = bson.D
	at := func(i uint32) bson.Timestamp { return bson.Timestamp{T: 1718000000, I: i} }
	order := func(id int32, tenant string, more ...bson.E) D {
		return append(D{{Key: "_id", Value: id}, {Key: "tenant", Value: tenant}}, more...)
	}
	event := func(op string, i uint32, id int32, fields ...bson.E) bson.Raw {
		d := D{{Key: "_id", Value: D{{Key: "_data", Value: fmt.Sprintf("82%08X%08X2B0229296E04", at(i).T, at(i).I)}}},
			{Key: "operationType", Value: op}, {Key: "clusterTime", Value: at(i)}, {Key: "wallTime", Value: bson.DateTime(1718000000000 + int64(i))},
			{Key: "collectionUUID", Value: bson.Binary{Subtype: bson.TypeBinaryUUID, Data: []byte("0123456789abcdef")}},
			{Key: "ns", Value: D{{Key: "db", Value: "shop"}, {Key: "coll", Value: "orders"}}},
			{Key: "documentKey", Value: D{{Key: "_id", Value: id}}}}
		return raw(t, append(d, fields...))
	}
	full := func(d D) bson.E { return bson.E{Key: "fullDocument", Value: d} }
	updated := func(fields D) bson.E {
		return bson.E{Key: "updateDescription", Value: D{{Key: "updatedFields", Value: fields}, {Key: "removedFields", Value: bson.A{}},
			{Key: "truncatedArrays", Value: bson.A{}}, {Key: "disambiguatedPaths", Value: D{}}}}
	}
	txn := []bson.E{{Key: "lsid", Value: D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{5}, 16)}}}}, {Key: "txnNumber", Value: int64(3)}}
	events := []bson.Raw{
		event("insert", 1, 1, full(order(1, "a"))),
		event("insert", 2, 2, full(order(2, "b"))),
		event("update", 3, 1, updated(D{{Key: "v", Value: int32(2)}})),
		event("update", 4, 2, updated(D{{Key: "tenant", Value: "a"}})),
		event("replace", 5, 1, full(order(1, "b", bson.E{Key: "v", Value: int32(3)}))),
		event("delete", 6, 3),
		event("insert", 7, 4, append([]bson.E{full(order(4, "a"))}, txn...)...),
		event("insert", 7, 5, append([]bson.E{full(order(5, "b"))}, txn...)...),
	}
	entries, err := oplog.EventsToEntries(events)
	if err != nil {
		t.Fatal(err)
	}
	final := map[int32]bson.Raw{1: raw(t, order(1, "b", bson.E{Key: "v", Value: int32(3)})), 2: raw(t, order(2, "a")),
		4: raw(t, order(4, "a")), 5: raw(t, order(5, "b"))}
	var lookups atomic.Int32
	lookup := func(_ context.Context, _ catalog.Namespace, filter bson.Raw) (bson.Raw, bson.Timestamp, error) {
		lookups.Add(1)
		return final[filter.Lookup("_id").Int32()], bson.Timestamp{}, nil
	}
	spec, _ := filteredMapper(t, `shop\.orders`, subsetQuery)
	spec.Namespaces.Rename = []config.Rename{{From: "shop", To: "cs"}}
	m, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	r := New(Options{Task: "subset", Spec: spec, Reader: source.NewScripted(at(0), entries...), Target: dc, Mapper: m,
		From: at(0), CheckpointInterval: time.Hour, Lookup: lookup})
	runUntil(t, r, at(7), time.Minute)
	assertSubset(t, dc.Database("cs").Collection("orders"), []bson.Raw{final[2], final[4]})
	if n := lookups.Load(); n != 1 {
		t.Errorf("the source was read %d times, want once (the update of tenant)", n)
	}
}
