package workload

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// TestEndToEnd loads 2,000 records into a real FerretDB server and runs
// every workload briefly, bounded by operation counts, checking what ends
// up on the server.
func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a FerretDB server")
	}
	srv := testserver.Start(t)
	client := srv.MustClient(t)
	ctx := context.Background()
	base := Options{Database: "ycsb", Collection: "usertable", RecordCount: 2000, BatchSize: 250, Threads: 4, Seed: 11}
	coll := client.Database(base.Database).Collection(base.Collection)

	var progressed atomic.Int64
	load := base
	load.ProgressInterval = 10 * time.Millisecond
	load.Progress = func(Stats) { progressed.Add(1) }
	s, err := Load(ctx, client, load)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Logf("%s (%.0f docs/s)", s, s.OpsPerSec)
	if s.Inserts != 2000 || s.Errors != 0 {
		t.Fatalf("Load stats %+v, want 2000 inserts and no errors", s)
	}
	loaded := fetchAll(t, coll)
	if len(loaded) != 2000 {
		t.Fatalf("server holds %d documents after the load, want 2000", len(loaded))
	}
	for n := range int64(2000) {
		if got := loaded[KeyString.Key(n).(string)]; !bytes.Equal(got, base.Document(n)) {
			t.Fatalf("record %d on the server is %s, want %s", n, got, base.Document(n))
		}
	}

	t.Run("c reads only", func(t *testing.T) {
		o := base
		o.Workload, o.Operations = WorkloadC, 200
		s := mustRun(t, client, o)
		if s.Reads != 200 || s.Ops() != 200 || s.NotFound != 0 {
			t.Errorf("stats %+v, want 200 reads that all found their document", s)
		}
		if changed := diff(loaded, fetchAll(t, coll)); changed != 0 {
			t.Errorf("a read-only workload changed %d documents", changed)
		}
	})
	for _, tc := range []struct {
		w    Workload
		dist Distribution
	}{{WorkloadA, Zipfian}, {WorkloadB, Uniform}} {
		t.Run(string(tc.w)+" "+string(tc.dist), func(t *testing.T) {
			o := base
			o.Workload, o.Distribution, o.Operations = tc.w, tc.dist, 120
			before := fetchAll(t, coll)
			s := mustRun(t, client, o)
			if s.Ops() != 120 || s.Reads+s.Updates != 120 || s.Updates == 0 || s.NotFound != 0 {
				t.Errorf("stats %+v, want 120 reads and updates, no misses", s)
			}
			after := fetchAll(t, coll)
			changed := diff(before, after)
			if len(after) != 2000 || changed == 0 || int64(changed) > s.Updates {
				t.Errorf("%d documents, %d changed after %d updates", len(after), changed, s.Updates)
			}
			checkShape(t, after, o)
		})
	}
	t.Run("insert", func(t *testing.T) {
		o := base
		o.Workload, o.Operations = WorkloadInsert, 100
		s := mustRun(t, client, o)
		if s.Inserts != 100 {
			t.Errorf("stats %+v, want 100 inserts", s)
		}
		after := fetchAll(t, coll)
		if len(after) != 2100 {
			t.Fatalf("%d documents after 100 inserts, want 2100", len(after))
		}
		for n := int64(2000); n < 2100; n++ {
			if got := after[KeyString.Key(n).(string)]; !bytes.Equal(got, o.Document(n)) {
				t.Errorf("inserted record %d is %s, want %s", n, got, o.Document(n))
			}
		}
	})
	t.Run("mixed", func(t *testing.T) {
		o := base
		o.Workload, o.Operations, o.Distribution = WorkloadMixed, 160, Uniform
		o.ReadProportion, o.UpdateProportion, o.InsertProportion, o.DeleteProportion = 0.25, 0.25, 0.25, 0.25
		before := fetchAll(t, coll)
		s := mustRun(t, client, o)
		if s.Ops() != 160 || s.Reads == 0 || s.Updates == 0 || s.Inserts == 0 || s.Deletes == 0 {
			t.Errorf("stats %+v, want 160 operations of every kind", s)
		}
		after := fetchAll(t, coll)
		// Deletes that found nothing hit a key deleted earlier in this run
		// (or an insert still in flight): count the ones that removed one.
		deleted := 0
		for k := range before {
			if _, ok := after[k]; !ok {
				deleted++
			}
		}
		var inserted int64
		for n := int64(2100); n < 2100+s.Inserts; n++ {
			if _, ok := after[KeyString.Key(n).(string)]; ok {
				inserted++
			}
		}
		if deleted == 0 || int64(len(after)) != int64(len(before))-int64(deleted)+inserted {
			t.Errorf("%d documents before, %d after, %d deleted, %d of %d inserts present", len(before), len(after), deleted, inserted, s.Inserts)
		}
		if _, ok := after[KeyString.Key(2100+s.Inserts).(string)]; ok {
			t.Errorf("a key beyond the run's inserts exists")
		}
		checkShape(t, after, o)
		// Reads after the deletes still succeed (mustRun fails on any
		// error): a deleted key is a miss, not an error.
		o.Workload, o.Operations = WorkloadC, 100
		o.ReadProportion, o.UpdateProportion, o.InsertProportion, o.DeleteProportion = 0, 0, 0, 0
		if s := mustRun(t, client, o); s.Reads != 100 {
			t.Errorf("stats %+v, want 100 reads", s)
		}
	})
	if progressed.Load() == 0 {
		t.Logf("the load finished before its first progress report")
	}
}

// TestIntKeysAndReload loads int keys and runs a mixed workload over them,
// then loads a collection twice: the second load reports every document as
// a duplicate.
func TestIntKeysAndReload(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a FerretDB server")
	}
	srv := testserver.Start(t)
	client := srv.MustClient(t)
	ctx := context.Background()
	o := Options{Collection: "ints", RecordCount: 300, KeyType: KeyInt, FieldCount: 3, FieldLength: 10, BatchSize: 64, Threads: 3}
	if _, err := Load(ctx, client, o); err != nil {
		t.Fatalf("Load: %v", err)
	}
	coll := client.Database(DefaultDatabase).Collection("ints")
	var first bson.Raw
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: int64(299)}}).Decode(&first); err != nil || !bytes.Equal(first, o.Document(299)) {
		t.Fatalf("record 299 = %s, %v; want %s", first, err, o.Document(299))
	}
	o.Workload, o.Operations = WorkloadMixed, 120
	s := mustRun(t, client, o)
	if s.Ops() != 120 {
		t.Errorf("stats %+v", s)
	}
	// Run-phase inserts take the int keys after the loaded ones; deletes
	// may remove some of them again, at most one each.
	beyond, err := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: int64(300)}}}})
	if err != nil {
		t.Fatal(err)
	}
	if beyond < s.Inserts-s.Deletes {
		t.Errorf("%d documents with keys from 300 after %d inserts and %d deletes, want at least %d", beyond, s.Inserts, s.Deletes, s.Inserts-s.Deletes)
	}

	again := Options{Collection: "again", RecordCount: 50, KeyType: KeyInt, BatchSize: 20}
	if _, err := Load(ctx, client, again); err != nil {
		t.Fatal(err)
	}
	s, err = Load(ctx, client, again)
	if err == nil || s.Errors != 50 || s.Inserts != 0 || !mongo.IsDuplicateKeyError(errors.Unwrap(err)) {
		t.Errorf("reload: stats %+v, error %v; want 50 duplicate-key failures", s, err)
	}
}

// TestRunStops covers the other bounds: Duration, a cancelled context, a
// rate, and option errors that need the phase to be known.
func TestRunStops(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a FerretDB server")
	}
	srv := testserver.Start(t)
	client := srv.MustClient(t)
	ctx := context.Background()
	o := Options{RecordCount: 100, Threads: 2, Workload: WorkloadC, Seed: 1}
	if _, err := Load(ctx, client, o); err != nil {
		t.Fatal(err)
	}

	d := o
	d.Duration, d.Rate = 200*time.Millisecond, 50
	if s, err := Run(ctx, client, d); err != nil || s.Errors != 0 {
		t.Errorf("Run with Duration: %+v, %v; want a clean stop", s, err)
	}

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := o
	c.ProgressInterval = 20 * time.Millisecond
	var reports atomic.Int64
	c.Progress = func(Stats) { reports.Add(1); cancel() }
	s, err := Run(cctx, client, c)
	if !errors.Is(err, context.Canceled) || reports.Load() == 0 || s.Errors != 0 {
		t.Errorf("unbounded Run cancelled from Progress: %+v, %v (%d reports)", s, err, reports.Load())
	}

	var oe *OptionError
	if _, err := Run(ctx, client, Options{Workload: WorkloadA}); !errors.As(err, &oe) || oe.Field != "RecordCount" {
		t.Errorf("Run without RecordCount: %v, want a RecordCount error", err)
	}
	if _, err := Load(ctx, client, Options{}); !errors.As(err, &oe) || oe.Field != "RecordCount" {
		t.Errorf("Load without RecordCount: %v, want a RecordCount error", err)
	}
	if _, err := Run(ctx, client, Options{Workload: WorkloadInsert, Collection: "fresh", Operations: 5}); err != nil {
		t.Errorf("insert-only Run into an empty collection: %v", err)
	}
}

// TestInsertManyBaseline inserts pre-generated documents and finds them on
// the server byte for byte.
func TestInsertManyBaseline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a FerretDB server")
	}
	srv := testserver.Start(t)
	client := srv.MustClient(t)
	o := Options{Seed: 5}
	docs := make([]bson.Raw, 1000)
	for i := range docs {
		docs[i] = o.Document(int64(i))
	}
	s, err := InsertManyBaseline(context.Background(), client, "bench", "raw", docs, 300, 3)
	if err != nil || s.Inserts != 1000 {
		t.Fatalf("InsertManyBaseline: %+v, %v", s, err)
	}
	t.Logf("%s (%.0f docs/s)", s, s.OpsPerSec)
	got := fetchAll(t, client.Database("bench").Collection("raw"))
	for i, d := range docs {
		if !bytes.Equal(got[KeyString.Key(int64(i)).(string)], d) {
			t.Fatalf("document %d differs on the server", i)
		}
	}
	if _, err := InsertManyBaseline(context.Background(), client, "bench", "raw", docs[:10], 0, 1); err == nil {
		t.Error("batch size 0 accepted")
	}
	if _, err := InsertManyBaseline(context.Background(), client, "bench", "raw", docs[:10], 10, 1); err == nil {
		t.Error("duplicate documents accepted")
	}
}

func mustRun(t *testing.T, client *mongo.Client, o Options) Stats {
	t.Helper()
	s, err := Run(context.Background(), client, o)
	if err != nil {
		t.Fatalf("Run(%s): %v (%s)", o.Workload, err, s)
	}
	t.Logf("%s %s", o.Workload, s)
	if s.Errors != 0 {
		t.Fatalf("Run(%s): %d errors", o.Workload, s.Errors)
	}
	return s
}

// fetchAll returns the collection's documents by string _id (or the
// string form of another _id).
func fetchAll(t *testing.T, coll *mongo.Collection) map[any]bson.Raw {
	t.Helper()
	ctx := context.Background()
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetBatchSize(1000))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cur.Close(ctx) }()
	out := map[any]bson.Raw{}
	for cur.Next(ctx) {
		doc := bson.Raw(append([]byte(nil), cur.Current...))
		id := doc.Lookup("_id")
		if s, ok := id.StringValueOK(); ok {
			out[s] = doc
		} else {
			out[id.String()] = doc
		}
	}
	if err := cur.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// diff counts documents present in both maps whose bytes differ.
func diff(a, b map[any]bson.Raw) int {
	n := 0
	for k, d := range a {
		if e, ok := b[k]; ok && !bytes.Equal(d, e) {
			n++
		}
	}
	return n
}

// checkShape checks that every document still has the generated fields and
// lengths (updates replace a field's value, never its shape).
func checkShape(t *testing.T, docs map[any]bson.Raw, o Options) {
	t.Helper()
	o = o.WithDefaults()
	for k, d := range docs {
		if len(d) != o.DocumentSize() {
			t.Errorf("document %v has %d bytes, want %d: %s", k, len(d), o.DocumentSize(), d)
			return
		}
	}
}
