package e2e

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestReplayUpdateShapes feeds update entries FerretDB cannot store in its
// oplog ($v:1 operators, $v:2 diffs) through a scripted reader behind the
// tailer's interface; the writes go to a real target, which is compared
// document by document with the expected end state (DESIGN scenario 4).
// Updates no path can apply (a field name with a dot; an old entry
// through a field whose type has changed) re-read their document from the
// source. Array truncation is left out: FerretDB accepts the $push/$slice form
// MongoDB needs for it but does not apply it (pkg/engine/oplog covers its
// shape).
func TestReplayUpdateShapes(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	dc := dst.MustClient(t)
	ctx := context.Background()
	initial := []any{
		doc("_id", 1, "name", "a", "profile", doc("city", "Oslo", "zip", "0150", "tags", bson.A{"x", "y"}), "old", true),
		doc("_id", 2, "list", bson.A{int32(1), int32(2)}, "n", int32(5)),
		doc("_id", 3, "v", int32(1), "gone", "yes"),
		doc("_id", 4, "v", int32(1)),
	}
	insertDocs(t, dc, "app", "c", initial)
	// Documents the replayer re-reads from the source: 5 gets a diff on a
	// field name no update path can address (5.0+ $setField), 6 an older
	// $set through a field that has since become a number (the copy/replay
	// overlap or a resume applies old entries again).
	insertDocs(t, dc, "app", "c", []any{doc("_id", 5, "v", int32(1)), doc("_id", 6, "a", int32(5))})
	want := map[int32]bson.D{
		1: doc("_id", int32(1), "name", "b", "profile", doc("city", "Bergen", "tags", bson.A{"x", "z"}), "added", int32(7)),
		2: doc("_id", int32(2), "list", bson.A{int32(1), int32(2), int32(3), doc("k", "v")}, "n", int32(6)),
		3: doc("_id", int32(3), "v", int32(2)),
		4: doc("_id", int32(4), "diff", doc("u", doc("v", int32(9))), "note", "replacement"),
		5: doc("_id", int32(5), "v", int32(42), "note", "as on the source"),
		6: doc("_id", int32(6), "a", int32(5), "fixed", true),
	}
	// The source holds every document as the entries leave it (as a real
	// source does): a document re-read from it is in its final state.
	var final []any
	for _, d := range want {
		final = append(final, d)
	}
	insertDocs(t, src.MustClient(t), "app", "c", final)

	// Above the source's own oplog entries (the replay starts after its
	// newest one).
	base := uint32(time.Now().Unix()) + 1000
	ts := base
	entry := func(op string, o, o2 bson.D) bson.Raw {
		ts++
		d := doc("ts", bson.Timestamp{T: ts, I: 1}, "t", int64(1), "op", op, "ns", "app.c", "o", o)
		if o2 != nil {
			d = append(d, bson.E{Key: "o2", Value: o2})
		}
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	reader := source.NewScripted(bson.Timestamp{T: base, I: 0},
		// $v:2: nested s section, d delete, u set, i insert.
		entry("u", doc("$v", int32(2), "diff", doc(
			"d", doc("old", false),
			"u", doc("name", "b"),
			"i", doc("added", int32(7)),
			"sprofile", doc("u", doc("city", "Bergen"), "d", doc("zip", false),
				"stags", doc("a", true, "u1", "z")))), doc("_id", 1)),
		// $v:2 array growth: l with element updates and a nested section.
		entry("u", doc("$v", int32(2), "diff", doc(
			"slist", doc("a", true, "l", int32(4), "u2", int32(3), "u3", doc("k", "v")),
			"u", doc("n", int32(6)))), doc("_id", 2)),
		// $v:1 operators.
		entry("u", doc("$v", int32(1), "$set", doc("v", int32(2)), "$unset", doc("gone", true)), doc("_id", 3)),
		// A replacement whose document has a field named diff.
		entry("u", doc("_id", 4, "diff", doc("u", doc("v", int32(9))), "note", "replacement"), doc("_id", 4)),
		// The same document again later, as after a restart: idempotent.
		entry("u", doc("$v", int32(2), "diff", doc("u", doc("name", "b"))), doc("_id", 1)),
		// A field named with a dot: re-read from the source.
		entry("u", doc("$v", int32(2), "diff", doc("u", doc("a.b", int32(1)))), doc("_id", 5)),
		// An old entry through a field that is now a number.
		entry("u", doc("$v", int32(1), "$set", doc("a.b", int32(1))), doc("_id", 6)),
	)
	task := newTask(t, "shapes", src, dst, func(t *config.Task) {
		t.Mode = config.ModeIncremental
		t.Verify.Mode = config.VerifyNone
	})
	opts := engineOpts()
	opts.Reader = func(from bson.Timestamp) source.OplogReader { return reader }
	e, stop := startEngine(t, task, opts)
	last, _ := reader.Newest(ctx)
	waitApplied(t, e, last)
	_ = stop()

	for id, w := range want {
		got, err := dc.Database("app").Collection("c").FindOne(ctx, doc("_id", id)).Raw()
		if err != nil {
			t.Fatalf("_id %d: %v", id, err)
		}
		wantRaw, _ := bson.Marshal(w)
		if !bsonEqual(got, wantRaw) {
			t.Errorf("_id %d on the target:\n got  %s\n want %s", id, got, bson.Raw(wantRaw))
		}
	}
}

// bsonEqual compares documents field by field, ignoring int32/int64/double
// differences of equal numbers that a server may introduce.
func bsonEqual(a, b bson.Raw) bool {
	var x, y any
	if bson.Unmarshal(a, &x) != nil || bson.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := bson.MarshalExtJSON(x, false, false)
	ya, _ := bson.MarshalExtJSON(y, false, false)
	return string(xa) == string(ya)
}
