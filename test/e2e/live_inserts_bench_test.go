package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// BenchmarkLiveInserts is a user's scenario on real servers: one FerretDB
// source holding 50,000 YCSB documents of about 1.1 KB, one empty FerretDB
// target (no oplog: a target needs none), a fullAndIncremental task that
// copies them and streams; then 2,000 inserts into the source from 4
// clients, as fast as the source takes them. It reports how fast they
// arrive on the target: live-ops/s is 2,000 over the time from the first
// insert until the target holds every document, writes/command what the
// replay's status says. Each iteration runs the whole scenario (about a
// minute); run it once:
//
//	cd test && go test ./e2e -run '^$' -bench LiveInserts -benchtime 1x
//
// A run that has not applied every insert after liveInsertsLimit reports
// the rate of those it applied (and skips the comparison of documents).
//
// It leaves out: the copy (not timed), the network (loopback), and any
// other load on the target. The source, the target and the engine share
// the machine's cores, and FerretDB's tailable cursors make the tailer
// re-open and rescan the oplog (docs/architecture.md, "The test bed"), which bounds how
// soon an insert is seen.
func BenchmarkLiveInserts(b *testing.B) {
	const liveInsertsLimit = 10 * time.Minute
	const records, inserts = 50_000, 2_000
	for range b.N {
		src := testserver.Start(b)
		dst := testserver.Start(b, testserver.Options{OplogBytes: -1})
		ctx := context.Background()
		srcC, err := mongo.Connect(options.Client().ApplyURI(src.URI))
		if err != nil {
			b.Fatal(err)
		}
		dstC, err := mongo.Connect(options.Client().ApplyURI(dst.URI))
		if err != nil {
			b.Fatal(err)
		}
		wl := workload.Options{RecordCount: records, Seed: 1}
		if _, err := workload.Load(ctx, srcC, wl); err != nil {
			b.Fatal(err)
		}
		task := &config.Task{Name: "live-inserts", Spec: config.Spec{Mode: config.ModeFullAndIncremental,
			Source: config.Endpoint{URI: src.URI}, Target: config.Endpoint{URI: dst.URI},
			Threads: config.Threads{Readers: 4, Writers: 4}, Verify: config.Verify{Mode: config.VerifyNone}}}
		task.SetDefaults()
		if err := task.Validate(); err != nil {
			b.Fatal(err)
		}
		e, err := engine.Open(ctx, task, engine.Options{})
		if err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- e.Run(rctx) }()
		coll := dstC.Database("ycsb").Collection("usertable")
		benchWait(b, "the copy", 5*time.Minute, func() bool {
			n, err := coll.CountDocuments(ctx, bson.D{})
			return e.Status().Phase == engine.PhaseStreaming && err == nil && n == records
		})

		b.ResetTimer()
		started := time.Now()
		run := wl
		run.Workload, run.Operations, run.Threads = workload.WorkloadInsert, inserts, 4
		st, err := workload.Run(ctx, srcC, run)
		if err != nil {
			b.Fatal(err)
		}
		sourceDone := time.Since(started)
		// Applied inserts as the engine counts them (a busy FerretDB
		// target answers a count only after the writes queued before
		// it): an insert whose entry showed up late in the source's
		// oplog is applied as a re-read of its document.
		applied := func() int64 {
			if rs := e.Status().Replay; rs != nil {
				return min(rs.Applied["insert"]+rs.Applied["refetch"], inserts)
			}
			return 0
		}
		for applied() < inserts && time.Since(started) < liveInsertsLimit {
			time.Sleep(50 * time.Millisecond)
		}
		elapsed, arrived := time.Since(started), applied()
		b.StopTimer()

		rs := e.Status().Replay
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			b.Fatal(err)
		}
		e.Close()
		if arrived == inserts {
			if diff := sameDocs(ctx, srcC, dstC, "ycsb", "usertable"); diff != "" {
				b.Fatal(diff)
			}
		} else {
			b.Logf("%d of %d inserts applied after %s", arrived, inserts, liveInsertsLimit)
		}
		b.ReportMetric(float64(arrived)/elapsed.Seconds(), "live-ops/s")
		b.ReportMetric(float64(arrived), "applied")
		b.ReportMetric(float64(st.Inserts)/sourceDone.Seconds(), "source-inserts/s")
		if rs != nil {
			b.ReportMetric(rs.WritesPerCommand, "writes/command")
		}
		_ = srcC.Disconnect(ctx)
		_ = dstC.Disconnect(ctx)
	}
}

// benchWait polls cond until it holds or the deadline passes.
func benchWait(b *testing.B, what string, timeout time.Duration, cond func() bool) {
	b.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("timed out waiting for %s", what)
		}
	}
}

// sameDocs compares a collection on two servers byte for byte; "" when
// equal.
func sameDocs(ctx context.Context, src, dst *mongo.Client, db, coll string) string {
	read := func(c *mongo.Client) (map[string]bson.Raw, error) {
		cur, err := c.Database(db).Collection(coll).Find(ctx, bson.D{})
		if err != nil {
			return nil, err
		}
		out := map[string]bson.Raw{}
		for cur.Next(ctx) {
			out[cur.Current.Lookup("_id").String()] = bytes.Clone(cur.Current)
		}
		return out, cur.Err()
	}
	want, err := read(src)
	if err != nil {
		return err.Error()
	}
	got, err := read(dst)
	if err != nil {
		return err.Error()
	}
	if len(got) != len(want) {
		return fmt.Sprintf("target holds %d documents, source %d", len(got), len(want))
	}
	for id, d := range want {
		if !bytes.Equal(got[id], d) {
			return fmt.Sprintf("_id %s: target %s, source %s", id, got[id], d)
		}
	}
	return ""
}
