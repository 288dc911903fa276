package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestUpdateManyReplayOnFerretDB replays one updateMany of 1,057
// documents from a FerretDB source onto a FerretDB target, with the
// options a task gives a FerretDB target (stream.go): the source logs
// 1,057 replacements by _id, which must reach the target as deletes by
// _id and inserts (conn.Profile.ReinsertReplacements), not as 1,057
// update statements (FerretDB spends tens of milliseconds on each: the
// run went at 8 ops/s so, at about 110 ops/s as deletes and inserts).
// The target must end equal to the source. It logs the rate and the
// commands sent (docs/benchmarks.md).
func TestUpdateManyReplayOnFerretDB(t *testing.T) {
	if testing.Short() {
		t.Skip("needs FerretDB servers (make ferretdb); skipped with -short")
	}
	const n = 1057
	src, dst := testserver.Start(t), testserver.Start(t, testserver.Options{OplogBytes: -1})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	ctx := context.Background()
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "customer", Value: fmt.Sprintf("customer-%04d", i)},
			{Key: "status", Value: "new"}, {Key: "total", Value: float64(i) * 1.5}, {Key: "note", Value: "a short note of some forty characters.."}}
	}
	started := time.Now()
	for _, c := range []*mongo.Client{sc, dc} {
		if _, err := c.Database("shop").Collection("orders").InsertMany(ctx, docs); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("inserted %d documents on each side in %s", n, time.Since(started))
	from := newestOplogTS(t, sc)

	started = time.Now()
	res, err := sc.Database("shop").Collection("orders").UpdateMany(ctx, bson.D{}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: "shipped"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("updateMany of %d documents on the source: %s", res.ModifiedCount, time.Since(started))
	last := newestOplogTS(t, sc)

	var mu sync.Mutex
	spent := map[string]time.Duration{} // time in commands, by kind
	observe := func(op string, d time.Duration) {
		mu.Lock()
		spent[op] += d
		mu.Unlock()
	}
	r, tailer := ferretReplayer(t, "updatemany", sc, dc, from, observe)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	started = time.Now()
	go func() { done <- r.Run(rctx) }()
	var firstRead time.Duration
	for r.Status().AppliedTS.Compare(last) < 0 {
		if firstRead == 0 && r.Status().ReadTS.Compare(from) > 0 {
			firstRead = time.Since(started)
		}
		select {
		case err := <-done:
			t.Fatalf("replay stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(started) > 5*time.Minute {
			t.Fatalf("not applied after 5 minutes: %+v", r.Status())
		}
	}
	took := time.Since(started)
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	st := r.Status()
	mu.Lock()
	t.Logf("replayed %d updates in %s (%.1f ops/s; first entry read after %s): commands %v, writes %v, time in commands (summed over writers) %v, tailer %+v",
		n, took, float64(n)/took.Seconds(), firstRead, st.WriteCommands, st.WritesSent, spent, tailer.Stats())
	mu.Unlock()

	// A writer takes what is queued: a run that holds a single
	// replacement goes as one update statement (minReinsert), the rest as
	// deletes and inserts. make test met one such run in 1,057.
	if u := st.WritesSent["update"]; u > n/50 {
		t.Errorf("%d update statements sent for %d replacements by _id; want deletes and inserts", u, n)
	}
	if st.WritesSent["insert"]+st.WritesSent["update"] != n || st.WriteCommands["delete"] > n/10 {
		t.Errorf("sent %v in %v commands; want the %d documents inserted, deleted in batches", st.WritesSent, st.WriteCommands, n)
	}

	want := sortedDocs(t, sc)
	got := sortedDocs(t, dc)
	if len(got) != len(want) {
		t.Fatalf("target holds %d documents, source %d", len(got), len(want))
	}
	for i := range want {
		if !bytesEqualRaw(got[i], want[i]) {
			t.Fatalf("document %d differs: target %s, source %s", i, got[i], want[i])
		}
	}
}

func newestOplogTS(t *testing.T, c *mongo.Client) bson.Timestamp {
	t.Helper()
	raw, err := c.Database("local").Collection("oplog.rs").FindOne(context.Background(), bson.D{},
		options.FindOne().SetSort(bson.D{{Key: "$natural", Value: -1}})).Raw()
	if err != nil {
		t.Fatal(err)
	}
	ts, i, ok := raw.Lookup("ts").TimestampOK()
	if !ok {
		t.Fatalf("oplog entry without ts: %s", raw)
	}
	return bson.Timestamp{T: ts, I: i}
}

func sortedDocs(t *testing.T, c *mongo.Client) []bson.Raw {
	t.Helper()
	return findAll(t, c.Database("shop").Collection("orders"), bson.D{})
}

func bytesEqualRaw(a, b bson.Raw) bool { return string(a) == string(b) }

// ferretReplayer is a Replayer of a FerretDB source's oplog from from
// onto a FerretDB target, with the options a task gives such a pair
// (stream.go): the tailer's settle window, conn.FerretDBProfile's write
// options and whole-document updates. observe may be nil.
func ferretReplayer(t *testing.T, task string, sc, dc *mongo.Client, from bson.Timestamp, observe func(string, time.Duration)) (*Replayer, *source.Tailer) {
	t.Helper()
	spec := config.Spec{}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	tailer := source.NewTailer(sc, from)
	tailer.Settle = 2 * time.Second
	tailer.NewestFromReads = true
	p := conn.FerretDBProfile
	r := New(Options{Task: task, Spec: &spec, Reader: tailer, Source: sc, Target: dc, Mapper: mapper, From: from,
		SaveApplied: func(context.Context, bson.Timestamp) error { return nil }, ObserveWrite: observe,
		MaxWriteBatch: p.MaxWriteBatch, SerialUpdates: p.SerialUpdates, IndexesOneByOne: p.IndexesOneByOne,
		ReinsertReplacements: p.ReinsertReplacements,
		Translator:           oplog.Translator{WholeDocumentUpdates: true}})
	return r, tailer
}
