package fullsync

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// memoryCursor serves documents held in memory as a range's cursor.
type memoryCursor struct {
	docs []bson.Raw
	next int
}

func (m *memoryCursor) Next(ctx context.Context) bool {
	if ctx.Err() != nil || m.next >= len(m.docs) {
		return false
	}
	m.next++
	return true
}
func (m *memoryCursor) Doc() bson.Raw               { return m.docs[m.next-1] }
func (m *memoryCursor) Err() error                  { return nil }
func (m *memoryCursor) Close(context.Context) error { return nil }

// BenchmarkCopyWriteSide measures the full copy's write side against a raw
// insertMany loader on the same FerretDB target, with the same documents
// and batch size: what `ferry bench full` cannot show here, because a
// FerretDB source reads more slowly than the target writes (see
// docs/benchmarks.md). The source is replaced by documents in memory, a
// stand-in the benchmark names, as no server that reads faster than
// FerretDB writes runs on this machine. Everything after the cursor is the
// engine's: one range per reader, the byte budget, the bucket queues, range
// tracking and checkpoints in the target's mongoferry database, the
// writers and sink.Writer's unordered inserts.
//
// Each iteration is a round: the baseline (workload.InsertManyBaseline, 4
// goroutines) into one database and the copy into another, in alternating
// order; both are dropped afterwards. The figures are totals over the rounds:
//
//	go test ./pkg/engine/fullsync -run '^$' -bench CopyWriteSide -benchtime 3x
func BenchmarkCopyWriteSide(b *testing.B) {
	const records, threads, batch = 60_000, 4, 1000
	srv := testserver.Start(b, testserver.Options{OplogBytes: -1})
	client := srv.MustClient(b)
	ctx := context.Background()
	gen := workload.Options{RecordCount: records}
	docs := make([]bson.Raw, records)
	for i := range docs {
		docs[i] = gen.Document(int64(i))
	}

	var baseSecs, copySecs float64
	rounds := 0
	for i := 0; b.Loop(); i++ {
		rounds++
		raw, db := fmt.Sprintf("raw_%d", i), fmt.Sprintf("copy_%d", i)
		baseline := func() error {
			st, err := workload.InsertManyBaseline(ctx, client, raw, "usertable", docs, batch, threads)
			baseSecs += st.Elapsed.Seconds()
			return err
		}
		copyRound := func() error {
			secs, err := copyFromMemory(ctx, client, db, docs, threads, batch)
			copySecs += secs
			return err
		}
		// Alternate which goes first, so that neither always follows the
		// other's writes and drops.
		steps := []func() error{baseline, copyRound}
		if i%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, step := range steps {
			if err := step(); err != nil {
				b.Fatal(err)
			}
		}
		for _, name := range []string{raw, db, "mongoferry"} {
			n, _ := client.Database(name).Collection("usertable").EstimatedDocumentCount(ctx)
			if name != "mongoferry" && n != records {
				b.Fatalf("%s.usertable holds %d documents, want %d", name, n, records)
			}
			if err := client.Database(name).Drop(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(rounds*records)/baseSecs, "baseline-docs/s")
	b.ReportMetric(float64(rounds*records)/copySecs, "copy-docs/s")
	b.ReportMetric(baseSecs/copySecs, "copy/baseline")
}

// copyFromMemory copies docs into db.usertable through the copier's
// readers, queues and writers, as `threads` ranges read from memory, and
// returns the seconds from the first read to the last range recorded done.
func copyFromMemory(ctx context.Context, client *mongo.Client, db string, docs []bson.Raw, threads, batch int) (float64, error) {
	spec := &config.Spec{Mode: config.ModeFull, Threads: config.Threads{Readers: threads, Writers: threads}, Cache: config.Cache{BatchSize: batch}}
	spec.SetDefaults()
	task := "bench-" + db
	store := checkpoint.NewStore(client, spec.Checkpoint.Database, task)
	c, err := New(Options{Task: task, Spec: spec, Target: client, Store: store})
	if err != nil {
		return 0, err
	}
	coll := catalog.Collection{Source: catalog.Namespace{DB: "bench", Coll: "usertable"}, Target: catalog.Namespace{DB: db, Coll: "usertable"}, Type: "collection"}
	ns := coll.Source.String()
	plan := make([]checkpoint.Range, threads)
	for i := range plan {
		plan[i] = checkpoint.Range{Index: i, Filter: bson.Raw{5, 0, 0, 0, 0}, Describe: fmt.Sprintf("part %d of %d", i+1, threads)}
	}
	if err := store.SavePlan(ctx, checkpoint.Plan{NS: ns, Ranges: threads, Estimated: int64(len(docs))}, plan); err != nil {
		return 0, err
	}
	todo, err := store.Ranges(ctx)
	if err != nil {
		return 0, err
	}
	per := (len(docs) + threads - 1) / threads
	c.openRange = func(_ context.Context, r checkpoint.Range, _ catalog.Collection) (rangeCursor, int, error) {
		lo := min(r.Index*per, len(docs))
		return &memoryCursor{docs: docs[lo:min(lo+per, len(docs))]}, batch, nil
	}
	c.progress.addNamespace(ns, coll.Target.String(), int64(len(docs)), threads)
	started := time.Now()
	if err := c.copyRanges(ctx, todo, map[string]catalog.Collection{ns: coll}); err != nil {
		return 0, err
	}
	secs := time.Since(started).Seconds()
	if st := c.Status(); st.Documents != int64(len(docs)) || st.RangesDone != threads {
		return 0, fmt.Errorf("status after the copy: %d documents, %d of %d ranges done; want %d documents", st.Documents, st.RangesDone, threads, len(docs))
	}
	return secs, nil
}
