package full

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/servers"
	"github.com/mongoferry/mongoferry/internal/ferretdb"
	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// benchRound is what one round measured.
type benchRound struct {
	baseline benchPhase
	rawCopy  benchPhase
	copy     benchCopy
}

// benchPhase is one measured phase: documents written, seconds, and the
// CPU seconds each process spent meanwhile.
type benchPhase struct {
	docs    int64
	seconds float64
	cpu     measure.CPU
}

func (p benchPhase) rate() float64 { return measure.Div(float64(p.docs), p.seconds) }

// benchCopy is a copy round: seconds is the copy's own elapsed time
// (fullsync.Status.ElapsedSeconds, planning included); planning and
// copying split it; wall runs from engine.Open to the end of Run.
type benchCopy struct {
	benchPhase
	planning, copying, wall float64
	peakBuffered            int64
	peakRSS                 int64
	// elapsedDrift is how much Status().Copy.ElapsedSeconds grew between
	// the copy's end and the end of Run (0: it stops when the copy ends).
	elapsedDrift float64
}

// benchEnv is the running test bed of a benchmark.
type benchEnv struct {
	src, dst *ferretdb.Server
	cpu      measure.Sampler
	target   *mongo.Client
	log      *slog.Logger
	// peakRSS is this process's peak RSS before the last reset.
	peakRSS int64
}

// startBenchServers starts the source and target servers and connects to
// the target; stop ends everything, also after Ctrl-C.
func startBenchServers(ctx context.Context, out io.Writer) (*benchEnv, func(), error) {
	// No oplog: a full copy does not read it, and the servers should not
	// spend time writing one.
	pair, err := servers.StartPair(ctx, -1)
	if err != nil {
		return nil, nil, err
	}
	env := &benchEnv{src: pair.Source, dst: pair.Target, log: measure.Logger(),
		cpu: measure.Sampler{SourcePID: pair.Source.Pid(), TargetPID: pair.Target.Pid()}}
	if env.target, err = env.dst.Client(ctx); err != nil {
		pair.Stop()
		return nil, nil, fmt.Errorf("connect to the target: %w", err)
	}
	stop := func() {
		_ = env.target.Disconnect(context.Background())
		pair.Stop()
	}
	fmt.Fprintf(out, "servers:   %s (SQLite), source %s, target %s, on this machine\n", servers.Version(ctx), env.src.Addr, env.dst.Addr)
	return env, stop, nil
}

// baselineRound inserts the source's documents, generated in memory, into
// bench_raw_<round> on the target, then drops that database.
func (env *benchEnv) baselineRound(ctx context.Context, o workload.Options, round int) (benchPhase, error) {
	docs := make([]bson.Raw, o.RecordCount)
	for n := range docs {
		docs[n] = o.Document(int64(n))
	}
	db := "bench_raw_" + strconv.Itoa(round)
	cpu0 := env.cpu.Sample()
	st, err := workload.InsertManyBaseline(ctx, env.target, db, measure.Collection, docs, o.BatchSize, o.Threads)
	p := benchPhase{docs: st.Inserts, seconds: st.Elapsed.Seconds(), cpu: env.cpu.Sample().Sub(cpu0)}
	if err != nil {
		return p, fmt.Errorf("round %d baseline: %w", round, err)
	}
	if err := env.checkAndDrop(ctx, db, o.RecordCount); err != nil {
		return p, fmt.Errorf("round %d baseline: %w", round, err)
	}
	return p, nil
}

// rawCopyRound copies bench.usertable to bench_rawcopy_<round>.usertable
// with the simplest pipeline that reads: one find cursor over the whole
// source collection, its batches sized in bytes as the engine sizes them
// (catalog.BatchSizeFor with the copier's per-batch share of
// cache.maxBytes), cut into insertMany batches of --batch-size that
// --threads goroutines insert, unordered. No planning, no progress, no
// budget: what the copy could reach on this source with one cursor.
func (env *benchEnv) rawCopyRound(ctx context.Context, source *mongo.Client, f benchFullFlags, round int) (benchPhase, error) {
	db := "bench_rawcopy_" + strconv.Itoa(round)
	src := source.Database(measure.DB).Collection(measure.Collection)
	dst := env.target.Database(db).Collection(measure.Collection)
	var p benchPhase
	cpu0 := env.cpu.Sample()
	start := time.Now()
	cursorDocs := catalog.BatchSizeFor(ctx, src, rawCopyBatchBytes(f.threads), 1<<20)
	g, gctx := errgroup.WithContext(ctx)
	batches := make(chan []bson.Raw, 2*f.threads)
	var inserted atomic.Int64
	g.Go(func() error {
		defer close(batches)
		cur, err := src.Find(gctx, bson.D{}, options.Find().SetBatchSize(cursorDocs))
		if err != nil {
			return fmt.Errorf("find: %w", err)
		}
		defer func() { _ = cur.Close(context.WithoutCancel(gctx)) }()
		batch := make([]bson.Raw, 0, f.batchSize)
		send := func() error {
			select {
			case batches <- batch:
				batch = make([]bson.Raw, 0, f.batchSize)
				return nil
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		for cur.Next(gctx) {
			batch = append(batch, bson.Raw(slices.Clone(cur.Current)))
			if len(batch) == f.batchSize {
				if err := send(); err != nil {
					return err
				}
			}
		}
		if err := cur.Err(); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if len(batch) > 0 {
			return send()
		}
		return nil
	})
	for range f.threads {
		g.Go(func() error {
			for docs := range batches {
				res, err := dst.InsertMany(gctx, docs, options.InsertMany().SetOrdered(false))
				if err != nil {
					return fmt.Errorf("insertMany: %w", err)
				}
				inserted.Add(int64(len(res.InsertedIDs)))
			}
			return nil
		})
	}
	err := g.Wait()
	p.seconds = time.Since(start).Seconds()
	p.cpu = env.cpu.Sample().Sub(cpu0)
	p.docs = inserted.Load()
	if err != nil {
		return p, fmt.Errorf("round %d raw copy: %w", round, err)
	}
	if err := env.checkAndDrop(ctx, db, f.records); err != nil {
		return p, fmt.Errorf("round %d raw copy: %w", round, err)
	}
	return p, nil
}

// rawCopyBatchBytes is the byte size of one batch as the copier computes
// it for threads readers and threads writers and the default
// cache.maxBytes (fullsync.New): a share of the budget between 256 KiB and
// 16 MiB.
func rawCopyBatchBytes(threads int) int64 {
	maxBytes, _ := config.DefaultMaxBytes.Bytes()
	return min(max(maxBytes/(2*int64(2*threads)), 256<<10), 16<<20)
}

// copyTask is round's full copy of bench.usertable into db, verified by
// the round itself rather than by the engine.
func (env *benchEnv) copyTask(f benchFullFlags, round int, db string) (*config.Task, error) {
	task := &config.Task{Name: fmt.Sprintf("bench-full-%d-%d", round, time.Now().Unix()), Spec: config.Spec{
		Mode:   config.ModeFull,
		Source: config.Endpoint{URI: env.src.URI},
		Target: config.Endpoint{URI: env.dst.URI},
		Namespaces: config.Namespaces{
			Include: []string{regexp.QuoteMeta(measure.DB + "." + measure.Collection)},
			Rename:  []config.Rename{{From: measure.DB, To: db}},
		},
		Threads:  config.Threads{Readers: f.threads, Writers: f.threads},
		Cache:    config.Cache{BatchSize: f.batchSize},
		FullSync: config.FullSync{RangeDocuments: f.rangeDocs, Split: config.RangeSplit(f.split)},
		Verify:   config.Verify{Mode: config.VerifyNone},
	}}
	task.SetDefaults()
	if err := task.Validate(); err != nil {
		return nil, fmt.Errorf("round %d copy task: %w", round, err)
	}
	return task, nil
}

// copyRound copies bench.usertable to bench_copy_<round> with the engine,
// then drops it and the checkpoint database.
func (env *benchEnv) copyRound(ctx context.Context, f benchFullFlags, round int, profile string) (benchCopy, error) {
	var res benchCopy
	// Free the baseline's documents and restart the peak RSS count, so the
	// copy's peak is its own.
	runtime.GC()
	debug.FreeOSMemory()
	env.peakRSS = max(env.peakRSS, procstat.SelfPeakRSS())
	rssReset := measure.ResetPeakRSS()

	db := "bench_copy_" + strconv.Itoa(round)
	task, err := env.copyTask(f, round, db)
	if err != nil {
		return res, err
	}

	stopProfile := func() {}
	if profile != "" {
		if stopProfile, err = measure.StartCPUProfile(profile); err != nil {
			return res, err
		}
		defer stopProfile()
	}

	cpu0 := env.cpu.Sample()
	start := time.Now()
	e, err := engine.Open(ctx, task, engine.Options{Log: env.log})
	if err != nil {
		return res, fmt.Errorf("round %d copy: %w", round, err)
	}
	defer e.Close()
	watch := measure.WatchCopy(e)
	runErr := e.Run(ctx)
	res.wall = time.Since(start).Seconds()
	stages := watch()
	res.cpu = env.cpu.Sample().Sub(cpu0)
	stopProfile()
	st := e.Status()
	if runErr != nil {
		return res, fmt.Errorf("round %d copy: %w", round, runErr)
	}
	res.docs = st.Copy.Documents
	// The copy's elapsed time stops when it is done: the status read
	// after Run must say what the snapshot taken when the stage turned
	// "done" said.
	res.seconds = st.Copy.ElapsedSeconds
	if stages.Done != nil {
		res.elapsedDrift = res.seconds - stages.Done.Copy.ElapsedSeconds
	}
	if !stages.CopyingAt.IsZero() {
		res.planning = stages.CopyingAt.Sub(st.Copy.StartedAt).Seconds()
		res.copying = res.seconds - res.planning
	}
	res.peakBuffered = st.Copy.PeakBufferedBytes
	if rssReset {
		res.peakRSS = procstat.SelfPeakRSS()
	}
	if res.docs != f.records {
		return res, fmt.Errorf("round %d copy: copied %d documents, want %d", round, res.docs, f.records)
	}
	if err := env.checkAndDrop(ctx, db, f.records); err != nil {
		return res, fmt.Errorf("round %d copy: %w", round, err)
	}
	if err := env.target.Database(task.Checkpoint.Database).Drop(ctx); err != nil {
		return res, fmt.Errorf("round %d copy: drop the checkpoint database: %w", round, err)
	}
	return res, nil
}

// checkAndDrop checks that db.usertable holds want documents on the
// target, then drops db. It counts with collStats: a count command reads
// every document on FerretDB (about 5s for 60000 here).
func (env *benchEnv) checkAndDrop(ctx context.Context, db string, want int64) error {
	var stats struct {
		Count int64 `bson:"count"`
	}
	if err := env.target.Database(db).RunCommand(ctx, bson.D{{Key: "collStats", Value: measure.Collection}}).Decode(&stats); err != nil {
		return fmt.Errorf("count %s.%s: %w", db, measure.Collection, err)
	}
	n := stats.Count
	if n != want {
		return fmt.Errorf("%s.%s holds %d documents, want %d", db, measure.Collection, n, want)
	}
	if err := env.target.Database(db).Drop(ctx); err != nil {
		return fmt.Errorf("drop %s: %w", db, err)
	}
	return nil
}
