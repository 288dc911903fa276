package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// mixedIDs returns n _ids of mixed types: int32, int64, string, ObjectID,
// embedded document and double, in turn.
func mixedIDs(n int) []any {
	ids := make([]any, n)
	for i := range ids {
		switch i % 6 {
		case 0:
			ids[i] = int32(i)
		case 1:
			ids[i] = int64(1)<<40 + int64(i)
		case 2:
			ids[i] = fmt.Sprintf("s-%03d", i)
		case 3:
			ids[i] = objectID(i)
		case 4:
			ids[i] = bson.D{{Key: "k", Value: int32(i)}, {Key: "s", Value: "x"}}
		case 5:
			ids[i] = float64(i) + 0.5
		}
	}
	return ids
}

func objectID(i int) bson.ObjectID {
	oid, err := bson.ObjectIDFromHex(fmt.Sprintf("64b7f0c2a1b2c3d4e5f6%04x", i))
	if err != nil {
		panic(err)
	}
	return oid
}

func document(id any, i int) bson.D {
	return bson.D{
		{Key: "_id", Value: id},
		{Key: "name", Value: fmt.Sprintf("doc %d", i)},
		{Key: "n", Value: int32(i)},
		{Key: "big", Value: int64(i) * 1e12},
		{Key: "f", Value: float64(i) / 3},
		{Key: "ok", Value: i%2 == 0},
		{Key: "at", Value: bson.NewDateTimeFromTime(time.Date(2024, 1, 1, 0, 0, i, 0, time.UTC))},
		{Key: "tags", Value: bson.A{"a", int32(i), bson.D{{Key: "t", Value: i}}}},
		{Key: "sub", Value: bson.D{{Key: "z", Value: "last"}, {Key: "a", Value: "first"}, {Key: "nil", Value: nil}}},
		{Key: "bin", Value: bson.Binary{Subtype: 0, Data: []byte{byte(i), 0, 1}}},
	}
}

// seed inserts the same documents into a collection on each client.
func seed(t *testing.T, ns catalog.Namespace, ids []any, clients ...*mongo.Client) {
	t.Helper()
	docs := make([]any, len(ids))
	for i, id := range ids {
		docs[i] = document(id, i)
	}
	for _, c := range clients {
		if _, err := c.Database(ns.DB).Collection(ns.Coll).InsertMany(context.Background(), docs); err != nil {
			t.Fatalf("seed %s: %v", ns, err)
		}
	}
}

// render returns the _id as the report renders it.
func render(t *testing.T, id any) string {
	t.Helper()
	k, err := keyOf(raw(t, bson.D{{Key: "_id", Value: id}}))
	if err != nil {
		t.Fatal(err)
	}
	return k.String()
}

func list(t *testing.T, source *mongo.Client, ns config.Namespaces) []catalog.Collection {
	t.Helper()
	m, err := catalog.NewMapper(ns, config.DefaultDatabase)
	if err != nil {
		t.Fatal(err)
	}
	colls, err := catalog.List(context.Background(), source, m)
	if err != nil {
		t.Fatal(err)
	}
	return colls
}

func run(t *testing.T, source, target *mongo.Client, colls []catalog.Collection, opts Options) *Report {
	t.Helper()
	rep, err := Run(context.Background(), source, target, colls, opts)
	if err != nil {
		t.Fatalf("Run(%s): %v", opts.Mode, err)
	}
	if len(rep.Namespaces) != len(colls) {
		t.Fatalf("Run(%s): %d results for %d collections", opts.Mode, len(rep.Namespaces), len(colls))
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s:\n%s", opts.Mode, b.String())
	return rep
}

func result(t *testing.T, rep *Report, coll string) NamespaceResult {
	t.Helper()
	for _, r := range rep.Namespaces {
		if r.Source.Coll == coll {
			return r
		}
	}
	t.Fatalf("no result for %s", coll)
	return NamespaceResult{}
}

func TestRunEndToEnd(t *testing.T) {
	source := testserver.Start(t).MustClient(t)
	target := testserver.Start(t).MustClient(t)
	ctx := context.Background()

	items := catalog.Namespace{DB: "app", Coll: "items"}
	events := catalog.Namespace{DB: "app", Coll: "events"}
	itemIDs, eventIDs := mixedIDs(60), mixedIDs(24)
	seed(t, items, itemIDs, source, target)
	seed(t, events, eventIDs, source, target)
	for _, c := range []*mongo.Client{source, target} {
		if err := c.Database("app").CreateCollection(ctx, "empty"); err != nil {
			t.Fatal(err)
		}
	}

	colls := list(t, source, config.Namespaces{})
	if len(colls) != 3 {
		t.Fatalf("listed %d collections, want 3: %+v", len(colls), colls)
	}
	// FerretDB has no views; a listed view is skipped whatever the server.
	view := catalog.Namespace{DB: "app", Coll: "recent"}
	colls = append(colls, catalog.Collection{Source: view, Target: view, Type: "view"})

	var mu sync.Mutex
	progressed := map[string]int64{}
	opts := func(mode config.VerifyMode, sampleSize int) Options {
		return Options{Mode: mode, SampleSize: sampleSize, Progress: func(ns, _ string, done, _ int64) {
			mu.Lock()
			defer mu.Unlock()
			progressed[ns] = max(progressed[ns], done)
		}}
	}

	t.Run("identical", func(t *testing.T) {
		for _, o := range []Options{opts(config.VerifyCount, 0), opts(config.VerifyHash, 0), opts(config.VerifySample, 1000), opts(config.VerifySample, 7)} {
			rep := run(t, source, target, colls, o)
			if !rep.OK() || rep.Differing() != 0 {
				t.Errorf("%s (sample size %d): OK = false on identical data", o.Mode, o.SampleSize)
			}
			r := result(t, rep, "items")
			if r.SourceCount != 60 || r.TargetCount != 60 {
				t.Errorf("%s: items counts %d/%d, want 60/60", o.Mode, r.SourceCount, r.TargetCount)
			}
			if o.Mode == config.VerifyHash && (r.SourceHash != r.TargetHash || len(r.SourceHash) != 32) {
				t.Errorf("hashes %q and %q", r.SourceHash, r.TargetHash)
			}
			if o.Mode == config.VerifySample {
				if want := int64(min(o.SampleSize, 60)); r.Sampled != want {
					t.Errorf("sampled %d, want %d", r.Sampled, want)
				}
			}
			if v := result(t, rep, "recent"); !v.Skipped || !v.OK || !strings.Contains(v.Note, "view") {
				t.Errorf("view result %+v, want skipped with a note", v)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if progressed["app.items"] != 60 {
			t.Errorf("progress for app.items reached %d documents, want its 60 (both sides read count once)", progressed["app.items"])
		}
		if _, ok := progressed["app.recent"]; ok {
			t.Error("progress reported for a skipped view")
		}
	})

	// On the target: change one item, delete another, add one extra event.
	changedID, missingID, extraID := itemIDs[3], itemIDs[4], int64(-77)
	if res, err := target.Database("app").Collection("items").UpdateOne(ctx,
		bson.D{{Key: "_id", Value: changedID}}, bson.D{{Key: "$set", Value: bson.D{{Key: "name", Value: "changed"}}}}); err != nil || res.ModifiedCount != 1 {
		t.Fatalf("update: %v %+v", err, res)
	}
	if res, err := target.Database("app").Collection("items").DeleteOne(ctx, bson.D{{Key: "_id", Value: missingID}}); err != nil || res.DeletedCount != 1 {
		t.Fatalf("delete: %v %+v", err, res)
	}
	if _, err := target.Database("app").Collection("events").InsertOne(ctx, document(extraID, 99)); err != nil {
		t.Fatal(err)
	}

	t.Run("hash finds the three documents", func(t *testing.T) {
		rep := run(t, source, target, colls, opts(config.VerifyHash, 0))
		if rep.OK() || rep.Differing() != 2 {
			t.Fatalf("OK = %v, Differing = %d; want false, 2", rep.OK(), rep.Differing())
		}
		it := result(t, rep, "items")
		want := NamespaceResult{Source: items, Target: items, SourceCount: 60, TargetCount: 59,
			Missing: []string{render(t, missingID)}, MissingCount: 1,
			Changed: []string{render(t, changedID)}, ChangedCount: 1}
		assertDiff(t, it, want)
		if it.SourceHash == it.TargetHash {
			t.Error("items: equal hashes")
		}
		ev := result(t, rep, "events")
		assertDiff(t, ev, NamespaceResult{Source: events, Target: events, SourceCount: 24, TargetCount: 25,
			Extra: []string{render(t, extraID)}, ExtraCount: 1})
		if !result(t, rep, "empty").OK {
			t.Error("empty collection differs")
		}
		if render(t, changedID) != `{"$oid":"64b7f0c2a1b2c3d4e5f60003"}` || render(t, missingID) != `{"k":{"$numberInt":"4"},"s":"x"}` {
			t.Errorf("rendered _ids %s, %s", render(t, changedID), render(t, missingID))
		}
	})

	t.Run("count reports the count differences", func(t *testing.T) {
		rep := run(t, source, target, colls, opts(config.VerifyCount, 0))
		if rep.OK() || rep.Differing() != 2 {
			t.Fatalf("OK = %v, Differing = %d; want false, 2", rep.OK(), rep.Differing())
		}
		if r := result(t, rep, "items"); r.SourceCount != 60 || r.TargetCount != 59 || r.OK {
			t.Errorf("items: %d/%d ok=%v, want 60/59 false", r.SourceCount, r.TargetCount, r.OK)
		}
		if r := result(t, rep, "events"); r.SourceCount != 24 || r.TargetCount != 25 || r.OK {
			t.Errorf("events: %d/%d ok=%v, want 24/25 false", r.SourceCount, r.TargetCount, r.OK)
		}
	})

	t.Run("sample of everything finds missing and changed", func(t *testing.T) {
		rep := run(t, source, target, colls, opts(config.VerifySample, 1000))
		assertDiff(t, result(t, rep, "items"), NamespaceResult{Source: items, Target: items, SourceCount: 60, TargetCount: 59,
			Missing: []string{render(t, missingID)}, MissingCount: 1,
			Changed: []string{render(t, changedID)}, ChangedCount: 1})
		ev := result(t, rep, "events")
		if ev.OK || ev.SourceCount != 24 || ev.TargetCount != 25 || ev.MissingCount+ev.ChangedCount != 0 {
			t.Errorf("events: %+v, want counts 24/25 and no sampled differences", ev)
		}
	})

	t.Run("small sample", func(t *testing.T) {
		rep := run(t, source, target, colls, opts(config.VerifySample, 10))
		it := result(t, rep, "items")
		if it.OK || it.Sampled != 10 || it.MissingCount > 1 || it.ChangedCount > 1 {
			t.Errorf("items: %+v, want 10 sampled, at most one missing and one changed, not OK", it)
		}
	})

	// One more extra item: counts are equal again, and count mode is blind
	// to the three differences that hash mode still lists.
	extraItemID := "zz-extra"
	if _, err := target.Database("app").Collection("items").InsertOne(ctx, document(extraItemID, 100)); err != nil {
		t.Fatal(err)
	}
	t.Run("hash with equal counts", func(t *testing.T) {
		rep := run(t, source, target, colls, opts(config.VerifyHash, 0))
		assertDiff(t, result(t, rep, "items"), NamespaceResult{Source: items, Target: items, SourceCount: 60, TargetCount: 60,
			Missing: []string{render(t, missingID)}, MissingCount: 1,
			Extra: []string{render(t, extraItemID)}, ExtraCount: 1,
			Changed: []string{render(t, changedID)}, ChangedCount: 1})
		count := run(t, source, target, colls, opts(config.VerifyCount, 0))
		if !result(t, count, "items").OK {
			t.Error("count mode: items differ with equal counts")
		}
	})
}

// TestRunTypesAndRenames compares a renamed namespace whose target holds an
// _id of another numeric type, and caps the examples.
func TestRunTypesAndRenames(t *testing.T) {
	source := testserver.Start(t).MustClient(t)
	target := testserver.Start(t).MustClient(t)
	ctx := context.Background()

	src := catalog.Namespace{DB: "shop", Coll: "orders"}
	dst := catalog.Namespace{DB: "archive", Coll: "orders"}
	ids := make([]any, 30)
	for i := range ids {
		ids[i] = int32(i)
	}
	seed(t, src, ids, source)
	// The target has int64 _ids for 0-2, nothing for 3-19, the rest equal.
	tc := target.Database(dst.DB).Collection(dst.Coll)
	for i := range 3 {
		if _, err := tc.InsertOne(ctx, document(int64(i), i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 20; i < 30; i++ {
		if _, err := tc.InsertOne(ctx, document(int32(i), i)); err != nil {
			t.Fatal(err)
		}
	}
	colls := list(t, source, config.Namespaces{Rename: []config.Rename{{From: "shop", To: "archive"}}})
	if len(colls) != 1 || colls[0].Target != dst {
		t.Fatalf("listed %+v", colls)
	}

	rep := run(t, source, target, colls, Options{Mode: config.VerifyHash, MaxExamples: 4})
	r := rep.Namespaces[0]
	if r.OK || r.MissingCount != 20 || r.ExtraCount != 3 || r.ChangedCount != 0 {
		t.Fatalf("hash: %+v, want 20 missing, 3 extra", r)
	}
	wantMissing := []string{render(t, int32(0)), render(t, int32(1)), render(t, int32(2)), render(t, int32(3))}
	if !slices.Equal(r.Missing, wantMissing) {
		t.Errorf("missing examples %v, want %v", r.Missing, wantMissing)
	}
	if len(r.Extra) != 3 || !slices.Contains(r.Extra, `{"$numberLong":"0"}`) {
		t.Errorf("extra examples %v", r.Extra)
	}

	// Sample everything: the $in lookup matches int64 0 for int32 0, and
	// such a document counts as changed, not missing.
	rep = run(t, source, target, colls, Options{Mode: config.VerifySample, SampleSize: 100})
	r = rep.Namespaces[0]
	if r.OK || r.Sampled != 30 || r.ChangedCount != 3 || r.MissingCount != 17 || len(r.Missing) != DefaultMaxExamples {
		t.Errorf("sample: %+v, want 30 sampled, 3 changed, 17 missing", r)
	}
	if !slices.Contains(r.Changed, `{"$numberInt":"1"}`) {
		t.Errorf("changed examples %v", r.Changed)
	}
}

func TestRunRejectsMode(t *testing.T) {
	for _, m := range []config.VerifyMode{"", config.VerifyNone, "full"} {
		if _, err := Run(context.Background(), nil, nil, nil, Options{Mode: m}); err == nil {
			t.Errorf("mode %q accepted", m)
		}
	}
}

func assertDiff(t *testing.T, got, want NamespaceResult) {
	t.Helper()
	if got.Source != want.Source || got.Target != want.Target ||
		got.SourceCount != want.SourceCount || got.TargetCount != want.TargetCount ||
		got.MissingCount != want.MissingCount || got.ExtraCount != want.ExtraCount || got.ChangedCount != want.ChangedCount ||
		!slices.Equal(got.Missing, want.Missing) || !slices.Equal(got.Extra, want.Extra) || !slices.Equal(got.Changed, want.Changed) ||
		got.OK {
		t.Errorf("%s:\n got %+v\nwant %+v", want.Source, got, want)
	}
}
