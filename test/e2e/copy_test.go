package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
)

// mixedIDDocs returns n documents whose _ids cycle through int32, int64,
// string, ObjectId and embedded documents, with values that interleave
// across types.
func mixedIDDocs(n int) []any {
	docs := make([]any, 0, n)
	for i := 0; i < n; i++ {
		var id any
		switch i % 6 {
		case 0:
			id = int32(i)
		case 1:
			id = int64(i) * 1_000_003
		case 2:
			id = fmt.Sprintf("key-%06d", i)
		case 3:
			oid := bson.NewObjectID()
			id = oid
		case 4:
			id = bson.D{{Key: "region", Value: fmt.Sprintf("r%02d", i%7)}, {Key: "seq", Value: int32(i)}}
		case 5:
			id = float64(i) + 0.5
		}
		docs = append(docs, bson.D{{Key: "_id", Value: id}, {Key: "n", Value: int32(i)}, {Key: "payload", Value: strings.Repeat("x", i%50)}})
	}
	return docs
}

func TestCopyMixedIDTypesAcrossManyRanges(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "app", "mixed", mixedIDDocs(3000))

	task := newTask(t, "mixed", src, dst, func(t *config.Task) { t.FullSync.RangeDocuments, t.FullSync.Split = 200, config.SplitAlways })
	st, err := runEngine(t, task, engineOpts())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if st.Copy.Ranges < 10 {
		t.Fatalf("planned %d ranges, want at least 10 so that ranges span type brackets", st.Copy.Ranges)
	}
	assertSameDocs(t, sc, "app.mixed", dc, "app.mixed")
	if st.Copy.Documents != 3000 {
		t.Fatalf("status reports %d documents copied, want 3000", st.Copy.Documents)
	}
}

// TestCopySplitModes checks how fullSync.split plans a collection larger
// than rangeDocuments on a FerretDB source: auto and never copy it as one
// range (each range read would scan the whole collection there), always
// splits it; every mode copies every document once.
func TestCopySplitModes(t *testing.T) {
	src := testserver.Start(t)
	sc := src.MustClient(t)
	insertDocs(t, sc, "app", "mixed", mixedIDDocs(1500))
	for _, c := range []struct {
		split      config.RangeSplit
		wantRanges func(int) bool
		want       string
	}{
		{config.SplitAuto, func(n int) bool { return n == 1 }, "1"},
		{config.SplitNever, func(n int) bool { return n == 1 }, "1"},
		{config.SplitAlways, func(n int) bool { return n >= 7 }, "at least 7"},
	} {
		t.Run(string(c.split), func(t *testing.T) {
			dst := testserver.Start(t)
			task := newTask(t, "split", src, dst, func(t *config.Task) { t.FullSync.RangeDocuments, t.FullSync.Split = 200, c.split })
			st, err := runEngine(t, task, engineOpts())
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if !c.wantRanges(st.Copy.Ranges) {
				t.Errorf("split %s planned %d ranges for 1500 documents with rangeDocuments 200, want %s", c.split, st.Copy.Ranges, c.want)
			}
			assertSameDocs(t, sc, "app.mixed", dst.MustClient(t), "app.mixed")
		})
	}
}

func TestCopyFiltersRenamesOptionsAndIndexes(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	ctx := context.Background()
	for _, ns := range []string{"shop.orders", "shop.customers", "shop.tmp_cache", "hr.people", "logs.events"} {
		db, coll := split(ns)
		docs := make([]any, 300)
		for i := range docs {
			docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "email", Value: fmt.Sprintf("%s-%d@example.com", coll, i)}}
		}
		insertDocs(t, sc, db, coll, docs)
	}
	if _, err := sc.Database("shop").Collection("customers").Indexes().CreateOne(ctx,
		indexModel("email_unique", true)); err != nil {
		t.Fatal(err)
	}
	if err := sc.Database("logs").RunCommand(ctx, bson.D{{Key: "create", Value: "capped"}, {Key: "capped", Value: true}, {Key: "size", Value: int64(1 << 20)}}).Err(); err != nil {
		t.Fatal(err)
	}
	insertDocs(t, sc, "logs", "capped", []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}})

	task := newTask(t, "filters", src, dst, func(t *config.Task) {
		t.Namespaces = config.Namespaces{
			Include: []string{`shop\..*`, `hr\.people`, `logs\..*`},
			Exclude: []string{`.*\.tmp_.*`},
			Rename:  []config.Rename{{From: "shop", To: "store"}, {From: "hr.people", To: "staff.employees"}},
		}
	})
	if _, err := runEngine(t, task, engineOpts()); err != nil {
		t.Fatalf("run: %v", err)
	}
	assertSameDocs(t, sc, "shop.orders", dc, "store.orders")
	assertSameDocs(t, sc, "shop.customers", dc, "store.customers")
	assertSameDocs(t, sc, "hr.people", dc, "staff.employees")
	assertSameDocs(t, sc, "logs.events", dc, "logs.events")
	assertSameDocs(t, sc, "logs.capped", dc, "logs.capped")

	names, err := dc.ListDatabaseNames(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n == "shop" || n == "hr" {
			t.Errorf("renamed source database %q exists on the target", n)
		}
	}
	if n, _ := dc.Database("store").Collection("tmp_cache").CountDocuments(ctx, bson.D{}); n != 0 {
		t.Errorf("excluded collection copied: %d documents in store.tmp_cache", n)
	}
	// The unique index came along and is enforced.
	_, err = dc.Database("store").Collection("customers").InsertOne(ctx, bson.D{{Key: "_id", Value: 9999}, {Key: "email", Value: "customers-1@example.com"}})
	if err == nil {
		t.Errorf("duplicate email accepted on the target: unique index not copied")
	}
	// The capped collection is capped on the target.
	var info struct {
		Options bson.M `bson:"options"`
	}
	cur, err := dc.Database("logs").ListCollections(ctx, bson.D{{Key: "name", Value: "capped"}})
	if err != nil || !cur.Next(ctx) {
		t.Fatalf("logs.capped missing on target: %v", err)
	}
	_ = cur.Decode(&info)
	if info.Options["capped"] != true {
		t.Errorf("logs.capped options on target = %v, want capped", info.Options)
	}
}

func TestCopyOnConflict(t *testing.T) {
	seed := func(t *testing.T) (*testserver.Server, *testserver.Server) {
		src, dst := testserver.Start(t), testserver.Start(t)
		sc, dc := src.MustClient(t), dst.MustClient(t)
		docs := make([]any, 100)
		for i := range docs {
			docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: "source"}}
		}
		insertDocs(t, sc, "db", "c", docs)
		// The target already has _id 0..9 with other values, and _id 500.
		pre := []any{bson.D{{Key: "_id", Value: int32(500)}, {Key: "v", Value: "target-only"}}}
		for i := 0; i < 10; i++ {
			pre = append(pre, bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: "target"}})
		}
		insertDocs(t, dc, "db", "c", pre)
		return src, dst
	}
	countV := func(t *testing.T, dst *testserver.Server, v string) int64 {
		n, err := dst.MustClient(t).Database("db").Collection("c").CountDocuments(context.Background(), bson.D{{Key: "v", Value: v}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tests := []struct {
		policy                 config.ConflictPolicy
		wantSource, wantTarget int64
		wantErr                error
	}{
		{config.ConflictOverwrite, 100, 0, nil},
		{config.ConflictSkip, 90, 10, nil},
		{config.ConflictFail, 0, 10, fullsync.ErrTargetNotEmpty},
	}
	for _, tc := range tests {
		t.Run(string(tc.policy), func(t *testing.T) {
			src, dst := seed(t)
			task := newTask(t, "conflict", src, dst, func(t *config.Task) {
				t.FullSync.OnConflict = tc.policy
				t.Verify.Mode = config.VerifyNone // the target keeps documents the source lacks
			})
			_, err := runEngine(t, task, engineOpts())
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("run: err = %v, want %v", err, tc.wantErr)
			}
			if got := countV(t, dst, "source"); got != tc.wantSource {
				t.Errorf("documents with the source's value: %d, want %d", got, tc.wantSource)
			}
			if got := countV(t, dst, "target"); got != tc.wantTarget {
				t.Errorf("documents with the target's old value: %d, want %d", got, tc.wantTarget)
			}
			if got := countV(t, dst, "target-only"); got != 1 {
				t.Errorf("target-only document count %d, want 1 (a copy never deletes)", got)
			}
			if tc.wantErr != nil {
				if !strings.Contains(err.Error(), "db.c") {
					t.Errorf("error does not name the collection: %v", err)
				}
				names, _ := dst.MustClient(t).ListDatabaseNames(context.Background(), bson.D{})
				for _, n := range names {
					if n == "mongoferry" {
						t.Errorf("the refused task wrote its checkpoint database on the target")
					}
				}
			}
		})
	}
}
