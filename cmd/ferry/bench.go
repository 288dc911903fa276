package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay/replaybench"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// benchTargetRatio is the copy/baseline throughput ratio `ferry bench
// full` aims for: a full copy should write within 10% of a plain loader.
const benchTargetRatio = 0.9

// benchNoisyShare is the share of the machine's CPU capacity other
// processes may use during the rounds before a benchmark warns that its
// figures are skewed.
const benchNoisyShare = 0.1

// benchFullRecords is the default size of `ferry bench full`: above
// fullSync.rangeDocuments (50000), so a copy that splits (--split always,
// or a MongoDB source) plans two ranges like any larger collection, and
// small enough that three rounds take
// about a minute and a half on two cores (100000 took nearly six minutes).
const benchFullRecords = 60_000

// The source namespace of the benchmarks.
const (
	benchDB   = "bench"
	benchColl = "usertable"
)

func init() {
	commands = append(commands, newBenchCommand())
}

// newBenchCommand is `ferry bench`; each benchmark is a subcommand built by
// its own newBenchXCommand function.
func newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the engine's throughput on throwaway local servers",
		Long: `bench runs MongoFerry's benchmarks. 'full' and 'live' use throwaway FerretDB
servers (built by 'make ferretdb' into bin/ferretdb) started on free loopback
ports and removed afterwards ('live' runs a whole task on them: start-up,
copy, replay of live writes); 'replay' needs no server (a synthetic oplog
into a discarding sink). Each benchmark prints its figures, the command line and
the peak memory; copy them into docs/benchmarks.md.

A benchmark exits 0 when it ran, whether or not its figures reach their
target, and non-zero only when something failed.`,
		Example: `  make bench
  ferry bench full --records 50000 --rounds 5
  ferry bench replay --shape ddt
  ferry bench live --inserts 2000 --updates 0 --deletes 0`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newBenchFullCommand(), newBenchReplayCommand(), newBenchLiveCommand())
	return cmd
}

// benchFullFlags are the flags of `ferry bench full`.
type benchFullFlags struct {
	records     int64
	fieldCount  int
	fieldLength int
	batchSize   int
	threads     int
	rounds      int
	rangeDocs   int64
	split       string
	cpuProfile  string
}

func newBenchFullCommand() *cobra.Command {
	var f benchFullFlags
	cmd := &cobra.Command{
		Use:   "full",
		Short: "Full-copy documents/second against a raw insertMany loader on the same target",
		Long: `full measures how fast a full copy writes compared with the fastest plain
client: unordered insertMany batches of the same size from the same number
of threads, into the same target server.

It starts a source and a target FerretDB, loads --records YCSB documents
(fixed seed) into bench.usertable on the source, then for each of --rounds
rounds:

  baseline  inserts the same documents, generated in memory beforehand, into
            bench_raw_<round>.usertable on the target with
            workload.InsertManyBaseline (--batch-size, --threads);
  raw copy  copies bench.usertable into bench_rawcopy_<round>.usertable
            with one find cursor (batches sized in bytes as the engine
            sizes them) feeding insertMany batches of --batch-size to
            --threads goroutines: a copy with no planning, no progress and
            no budget;
  copy      runs a full-copy task (mode full, verify none, --threads readers
            and writers, cache.batchSize --batch-size) of bench.usertable,
            renamed to bench_copy_<round>, through the engine.

Each database is counted and dropped as soon as it is measured, so every
round finds the target as the first did. Copy documents per second are
documents over the copy's own elapsed time (planning included, as a user
waits for it); the planning and copying stages and the wall time
(connecting included) are shown too. The result is the ratio of the median
copy rate to the median baseline rate, against a target of 0.9, and the
ratio of the median copy rate to the median raw copy rate.

--split and --range-documents are the copy's fullSync.split (auto) and
fullSync.rangeDocuments (0, the default, keeps the engine's 50000). With
split auto the copy reads a FerretDB source's collection as one range, one
scan, as the raw copy does. On FerretDB every _id range costs a full scan
of the source (no $sample, no index-backed range scans), so with --split
always a copy split into k ranges reads the collection k+2 times: once for
the _id sample, once per range and once for the range of other _id types.

A second table gives the CPU seconds of ferry and of each server per phase,
and those of other processes: on a shared machine the figures are skewed,
and the benchmark warns when others took more than 10% of the CPUs.

--cpuprofile writes a CPU profile of each copy round (FILE.<round> when there
is more than one round); read them with 'go tool pprof bin/ferry FILE*'.`,
		Example: `  # The default benchmark (make bench)
  ferry bench full

  # A quicker run, and a larger one with bigger documents
  ferry bench full --records 20000 --rounds 1
  ferry bench full --records 200000 --fieldcount 20 --fieldlength 200

  # Profile the copy rounds, then look at where the time goes
  ferry bench full --cpuprofile /tmp/copy.prof
  go tool pprof -top bin/ferry /tmp/copy.prof.*`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return benchExit(cmd.Context(), cmd.OutOrStdout(), runBenchFull(cmd.Context(), cmd.OutOrStdout(), f))
		},
	}
	fl := cmd.Flags()
	fl.Int64Var(&f.records, "records", benchFullRecords, "documents to load into the source and to copy per round")
	fl.IntVar(&f.fieldCount, "fieldcount", workload.DefaultFieldCount, "fields per document besides _id")
	fl.IntVar(&f.fieldLength, "fieldlength", workload.DefaultFieldLength, "characters per field")
	fl.IntVar(&f.batchSize, "batch-size", workload.DefaultBatchSize, "documents per insertMany, for the baseline and the copy (cache.batchSize)")
	fl.IntVar(&f.threads, "threads", workload.DefaultThreads, "baseline inserters, and the copy's readers and writers each")
	fl.IntVar(&f.rounds, "rounds", 3, "baseline and copy rounds, alternating; the medians are compared")
	fl.Int64Var(&f.rangeDocs, "range-documents", 0, "the copy task's fullSync.rangeDocuments (0: the engine default, "+strconv.Itoa(config.DefaultRangeDocuments)+"; on FerretDB each range is a full scan)")
	fl.StringVar(&f.split, "split", string(config.SplitAuto), "the copy task's fullSync.split: auto (one range per collection on FerretDB), always or never")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of each copy round to this file (FILE.<round> with several rounds)")
	return cmd
}

// printRangeNote says how the copy will split the collection and what that
// costs on FerretDB.
func printRangeNote(out io.Writer, f benchFullFlags) {
	per := f.rangeDocs
	how := "--range-documents"
	if per == 0 {
		per, how = config.DefaultRangeDocuments, "the engine default"
	}
	k := (f.records + per - 1) / per
	if k > 1 && config.RangeSplit(f.split) != config.SplitAlways {
		fmt.Fprintf(out, "ranges:    fullSync.split %s: the copy reads the collection as one range, one scan of the source, like the raw copy\n"+
			"           (FerretDB reads an _id range by scanning the whole collection; --split always plans %d ranges and scans it %d times)\n", f.split, k, k+2)
		return
	}
	if k <= 1 {
		fmt.Fprintf(out, "ranges:    fullSync.rangeDocuments %d (%s) >= %d documents: the copy reads the collection as one range, one scan\n", per, how, f.records)
		return
	}
	fmt.Fprintf(out, "ranges:    fullSync.rangeDocuments %d (%s): the copy plans %d _id ranges plus one for _ids of other types.\n", per, how, k)
	fmt.Fprintf(out, "note:      FerretDB has no $sample and no index-backed range scans: it reads the whole collection for the _id\n"+
		"           sample and again for every range, so this copy scans the source k+2 = %d times (the raw copy once);\n"+
		"           --range-documents %d copies it as one range\n", k+2, f.records)
}

// benchExit turns a benchmark's error into the command's result: after
// Ctrl-C (the servers are stopped by then) it says so and exits 130 like a
// shell.
func benchExit(ctx context.Context, out io.Writer, err error) error {
	if err != nil && ctx.Err() != nil {
		fmt.Fprintln(out, "\nbench: interrupted; the servers are stopped")
		return exitError{code: 130}
	}
	return err
}

func (f benchFullFlags) validate() error {
	switch {
	case f.records < 1:
		return fmt.Errorf("--records must be at least 1, got %d", f.records)
	case f.batchSize < 1 || f.batchSize > 100_000:
		return fmt.Errorf("--batch-size must be between 1 and 100000, got %d", f.batchSize)
	case f.threads < 1 || f.threads > 256:
		return fmt.Errorf("--threads must be between 1 and 256 (the task's limit on readers and writers), got %d", f.threads)
	case f.rounds < 1:
		return fmt.Errorf("--rounds must be at least 1, got %d", f.rounds)
	case f.rangeDocs < 0:
		return fmt.Errorf("--range-documents must be 0 (the default) or more, got %d", f.rangeDocs)
	case !slices.Contains([]config.RangeSplit{config.SplitAuto, config.SplitAlways, config.SplitNever}, config.RangeSplit(f.split)):
		return fmt.Errorf("--split must be auto, always or never, got %q", f.split)
	}
	o := f.workloadOptions()
	if err := o.ValidateLoad(); err != nil {
		return flagError(err)
	}
	return nil
}

func (f benchFullFlags) workloadOptions() workload.Options {
	return workload.Options{Database: benchDB, Collection: benchColl, RecordCount: f.records,
		FieldCount: f.fieldCount, FieldLength: f.fieldLength, KeyType: workload.KeyString,
		Threads: f.threads, BatchSize: f.batchSize, Seed: 1}
}

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
	cpu     cpuSeconds
}

func (p benchPhase) rate() float64 { return safeDiv(float64(p.docs), p.seconds) }

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

// cpuSeconds is user+system CPU time of this process, of the two servers
// and of the whole machine (busy time of all CPUs).
type cpuSeconds struct{ ferry, source, target, machine float64 }

func (c cpuSeconds) sub(o cpuSeconds) cpuSeconds {
	return cpuSeconds{c.ferry - o.ferry, c.source - o.source, c.target - o.target, c.machine - o.machine}
}

// ours is the CPU time of ferry and the servers.
func (c cpuSeconds) ours() float64 { return c.ferry + c.source + c.target }

// others is the CPU time of every other process on the machine: load that
// was not the benchmark's and skews its figures.
func (c cpuSeconds) others() float64 { return max(c.machine-c.ours(), 0) }

// benchEnv is the running test bed of a benchmark.
type benchEnv struct {
	src, dst       *testserver.Server
	srcPID, dstPID int
	target         *mongo.Client
	log            *slog.Logger
	// peakRSS is this process's peak RSS before the last reset.
	peakRSS int64
}

func runBenchFull(ctx context.Context, out io.Writer, f benchFullFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	o := f.workloadOptions()
	fmt.Fprintln(out, "ferry bench full: full copy vs raw insertMany, same target server")
	printBenchHeader(out)
	fmt.Fprintf(out, "documents: %d x %d bytes (%d fields x %d characters, string _id), batches of %d, %d threads (copy: %d readers, %d writers), %d rounds\n",
		f.records, o.DocumentSize(), o.WithDefaults().FieldCount, o.WithDefaults().FieldLength, f.batchSize, f.threads, f.threads, f.threads, f.rounds)
	printRangeNote(out, f)

	env, stop, err := startBenchServers(ctx, out)
	if err != nil {
		return err
	}
	defer stop()

	sc, err := env.src.Client(ctx)
	if err != nil {
		return fmt.Errorf("connect to the source: %w", err)
	}
	defer func() { _ = sc.Disconnect(context.Background()) }()
	fmt.Fprintf(out, "\nLoading %d documents into the source %s.%s... ", f.records, benchDB, benchColl)
	ls, err := workload.Load(ctx, sc, o)
	if err != nil {
		fmt.Fprintln(out)
		return fmt.Errorf("load the source: %w", err)
	}
	fmt.Fprintf(out, "%.1fs (%s docs/s)\n\n", ls.Elapsed.Seconds(), human(int64(ls.OpsPerSec)))

	rounds := make([]benchRound, 0, f.rounds)
	for r := 1; r <= f.rounds; r++ {
		var round benchRound
		if round.baseline, err = env.baselineRound(ctx, o, r); err != nil {
			return err
		}
		fmt.Fprintf(out, "round %d baseline: %d docs in %.2fs = %s docs/s\n", r, round.baseline.docs, round.baseline.seconds, human(int64(round.baseline.rate())))
		if round.rawCopy, err = env.rawCopyRound(ctx, sc, f, r); err != nil {
			return err
		}
		fmt.Fprintf(out, "round %d raw copy: %d docs in %.2fs = %s docs/s\n", r, round.rawCopy.docs, round.rawCopy.seconds, human(int64(round.rawCopy.rate())))
		profile := ""
		if f.cpuProfile != "" {
			profile = f.cpuProfile
			if f.rounds > 1 {
				profile += "." + strconv.Itoa(r)
			}
		}
		if round.copy, err = env.copyRound(ctx, f, r, profile); err != nil {
			return err
		}
		c := round.copy
		fmt.Fprintf(out, "round %d copy:     %d docs in %.2fs = %s docs/s (planning %.2fs, copying %.2fs = %s docs/s; wall %.2fs)\n",
			r, c.docs, c.seconds, human(int64(c.rate())), c.planning, c.copying, human(int64(safeDiv(float64(c.docs), c.copying))), c.wall)
		if c.elapsedDrift > 0.05 {
			fmt.Fprintf(out, "WARNING: Status().Copy.ElapsedSeconds went on counting after the copy ended (+%.2fs)\n", c.elapsedDrift)
		}
		rounds = append(rounds, round)
	}
	fmt.Fprintln(out)
	printBenchFullTable(out, rounds, max(env.peakRSS, peakRSS()))
	if f.cpuProfile != "" {
		files := f.cpuProfile
		if f.rounds > 1 {
			files += ".*"
		}
		fmt.Fprintf(out, "\nCPU profiles of the copy rounds: %s (read with: go tool pprof -top %s %s)\n", files, os.Args[0], files)
	}
	return nil
}

// printBenchHeader prints the command line and the machine.
func printBenchHeader(out io.Writer) {
	fmt.Fprintf(out, "command:   %s\n", shellQuote(os.Args))
	mem := "unknown memory"
	if n := memTotal(); n > 0 {
		mem = bytesHuman(n) + " memory"
	}
	fmt.Fprintf(out, "machine:   %d CPUs (GOMAXPROCS %d), %s, %s %s/%s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// startBenchServers starts the source and target servers and connects to
// the target; stop ends everything, also after Ctrl-C.
func startBenchServers(ctx context.Context, out io.Writer) (*benchEnv, func(), error) {
	bin, err := testserver.Binary()
	if err != nil {
		return nil, nil, err
	}
	env := &benchEnv{log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	var cleanups []func()
	stop := func() {
		for _, c := range slices.Backward(cleanups) {
			c()
		}
	}
	// No oplog: a full copy does not read it, and the servers should not
	// spend time writing one.
	if env.src, err = testserver.StartProcess(ctx, testserver.Options{OplogBytes: -1}); err != nil {
		return nil, nil, fmt.Errorf("start the source server: %w", err)
	}
	cleanups = append(cleanups, env.src.Stop)
	if env.dst, err = testserver.StartProcess(ctx, testserver.Options{OplogBytes: -1}); err != nil {
		stop()
		return nil, nil, fmt.Errorf("start the target server: %w", err)
	}
	cleanups = append(cleanups, env.dst.Stop)
	if env.target, err = env.dst.Client(ctx); err != nil {
		stop()
		return nil, nil, fmt.Errorf("connect to the target: %w", err)
	}
	cleanups = append(cleanups, func() { _ = env.target.Disconnect(context.Background()) })
	env.srcPID, env.dstPID = serverPID(env.src.Addr), serverPID(env.dst.Addr)
	fmt.Fprintf(out, "servers:   %s (SQLite), source %s, target %s, on this machine\n", ferretVersion(ctx, bin), env.src.Addr, env.dst.Addr)
	return env, stop, nil
}

// cpu returns the CPU seconds used so far by this process and the servers
// (0 for a server whose process was not found).
func (env *benchEnv) cpu() cpuSeconds {
	var ru syscall.Rusage
	c := cpuSeconds{source: procCPU(env.srcPID), target: procCPU(env.dstPID), machine: machineBusy()}
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.ferry = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return c
}

// baselineRound inserts the source's documents, generated in memory, into
// bench_raw_<round> on the target, then drops that database.
func (env *benchEnv) baselineRound(ctx context.Context, o workload.Options, round int) (benchPhase, error) {
	docs := make([]bson.Raw, o.RecordCount)
	for n := range docs {
		docs[n] = o.Document(int64(n))
	}
	db := "bench_raw_" + strconv.Itoa(round)
	cpu0 := env.cpu()
	st, err := workload.InsertManyBaseline(ctx, env.target, db, benchColl, docs, o.BatchSize, o.Threads)
	p := benchPhase{docs: st.Inserts, seconds: st.Elapsed.Seconds(), cpu: env.cpu().sub(cpu0)}
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
	src := source.Database(benchDB).Collection(benchColl)
	dst := env.target.Database(db).Collection(benchColl)
	var p benchPhase
	cpu0 := env.cpu()
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
	p.cpu = env.cpu().sub(cpu0)
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

// copyRound copies bench.usertable to bench_copy_<round> with the engine,
// then drops it and the checkpoint database.
func (env *benchEnv) copyRound(ctx context.Context, f benchFullFlags, round int, profile string) (benchCopy, error) {
	var res benchCopy
	// Free the baseline's documents and restart the peak RSS count, so the
	// copy's peak is its own.
	runtime.GC()
	debug.FreeOSMemory()
	env.peakRSS = max(env.peakRSS, peakRSS())
	rssReset := resetPeakRSS()

	db := "bench_copy_" + strconv.Itoa(round)
	task := &config.Task{Name: fmt.Sprintf("bench-full-%d-%d", round, time.Now().Unix()), Spec: config.Spec{
		Mode:   config.ModeFull,
		Source: config.Endpoint{URI: env.src.URI},
		Target: config.Endpoint{URI: env.dst.URI},
		Namespaces: config.Namespaces{
			Include: []string{regexp.QuoteMeta(benchDB + "." + benchColl)},
			Rename:  []config.Rename{{From: benchDB, To: db}},
		},
		Threads:  config.Threads{Readers: f.threads, Writers: f.threads},
		Cache:    config.Cache{BatchSize: f.batchSize},
		FullSync: config.FullSync{RangeDocuments: f.rangeDocs, Split: config.RangeSplit(f.split)},
		Verify:   config.Verify{Mode: config.VerifyNone},
	}}
	task.SetDefaults()
	if err := task.Validate(); err != nil {
		return res, fmt.Errorf("round %d copy task: %w", round, err)
	}

	if profile != "" {
		pf, err := os.Create(profile)
		if err != nil {
			return res, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() { _ = pf.Close() }()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return res, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	cpu0 := env.cpu()
	start := time.Now()
	e, err := engine.Open(ctx, task, engine.Options{Log: env.log})
	if err != nil {
		return res, fmt.Errorf("round %d copy: %w", round, err)
	}
	defer e.Close()
	watch := watchCopyStages(e)
	runErr := e.Run(ctx)
	res.wall = time.Since(start).Seconds()
	stages := watch()
	res.cpu = env.cpu().sub(cpu0)
	if profile != "" {
		pprof.StopCPUProfile()
	}
	st := e.Status()
	if runErr != nil {
		return res, fmt.Errorf("round %d copy: %w", round, runErr)
	}
	res.docs = st.Copy.Documents
	// The copy's elapsed time stops when it is done: the status read
	// after Run must say what the snapshot taken when the stage turned
	// "done" said.
	res.seconds = st.Copy.ElapsedSeconds
	if stages.done != nil {
		res.elapsedDrift = res.seconds - stages.done.Copy.ElapsedSeconds
	}
	if !stages.copyingAt.IsZero() {
		res.planning = stages.copyingAt.Sub(st.Copy.StartedAt).Seconds()
		res.copying = res.seconds - res.planning
	}
	res.peakBuffered = st.Copy.PeakBufferedBytes
	if rssReset {
		res.peakRSS = peakRSS()
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
	if err := env.target.Database(db).RunCommand(ctx, bson.D{{Key: "collStats", Value: benchColl}}).Decode(&stats); err != nil {
		return fmt.Errorf("count %s.%s: %w", db, benchColl, err)
	}
	n := stats.Count
	if n != want {
		return fmt.Errorf("%s.%s holds %d documents, want %d", db, benchColl, n, want)
	}
	if err := env.target.Database(db).Drop(ctx); err != nil {
		return fmt.Errorf("drop %s: %w", db, err)
	}
	return nil
}

// copyStages is when a copy entered its copying stage, and its status
// when it was first seen done.
type copyStages struct {
	copyingAt time.Time
	done      *engine.Status
}

// watchCopyStages polls e's status every 20ms; the returned func stops
// polling and returns what it saw.
func watchCopyStages(e *engine.Engine) func() copyStages {
	var (
		mu   sync.Mutex
		seen copyStages
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			s := e.Status()
			mu.Lock()
			if s.Copy.Stage == "copying" && seen.copyingAt.IsZero() {
				seen.copyingAt = time.Now()
			}
			if s.Copy.Stage == "done" && seen.done == nil {
				seen.done = &s
			}
			mu.Unlock()
		}
	}()
	return func() copyStages {
		close(stop)
		wg.Wait()
		return seen
	}
}

// printBenchFullTable prints each round, the medians and the verdicts;
// peakRSS is the process's peak over the whole run.
func printBenchFullTable(out io.Writer, rounds []benchRound, peakRSS int64) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tbaseline docs/s\traw copy docs/s\tcopy docs/s\tcopy s\tplanning s\tcopying s\tcopying docs/s\twall s\tcopy/baseline\tcopy/raw copy\t")
	var base, raw, cp, copying []float64
	for i, r := range rounds {
		c := r.copy
		cr := safeDiv(float64(c.docs), c.copying)
		base, raw, cp, copying = append(base, r.baseline.rate()), append(raw, r.rawCopy.rate()), append(cp, c.rate()), append(copying, cr)
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.0f\t%.2f\t%.3f\t%.3f\t\n", i+1, r.baseline.rate(), r.rawCopy.rate(),
			c.rate(), c.seconds, c.planning, c.copying, cr, c.wall, safeDiv(c.rate(), r.baseline.rate()), safeDiv(c.rate(), r.rawCopy.rate()))
	}
	ratio, rawRatio := safeDiv(median(cp), median(base)), safeDiv(median(cp), median(raw))
	fmt.Fprintf(tw, "median\t%.0f\t%.0f\t%.0f\t\t\t\t%.0f\t\t%.3f\t%.3f\t\n", median(base), median(raw), median(cp), median(copying), ratio, rawRatio)
	_ = tw.Flush()

	fmt.Fprintln(out, "\nCPU seconds per phase (user+system)")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tphase\tseconds\tferry\tsource\ttarget\tours\tours per 1k docs\tother processes\t")
	for i, r := range rounds {
		for _, p := range []struct {
			name string
			p    benchPhase
		}{{"baseline", r.baseline}, {"raw copy", r.rawCopy}, {"copy", r.copy.benchPhase}} {
			c := p.p.cpu
			fmt.Fprintf(tw, "%d\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.3f\t%.2f\t\n", i+1, p.name, p.p.seconds, c.ferry, c.source, c.target,
				c.ours(), 1000*safeDiv(c.ours(), float64(p.p.docs)), c.others())
		}
	}
	_ = tw.Flush()
	var others, capacity float64
	for _, r := range rounds {
		others += r.baseline.cpu.others() + r.rawCopy.cpu.others() + r.copy.cpu.others()
		capacity += float64(runtime.NumCPU()) * (r.baseline.seconds + r.rawCopy.seconds + r.copy.wall)
	}
	fmt.Fprintf(out, "(%d CPUs; other processes: CPU time of everything else on the machine, %.0f%% of its capacity)\n", runtime.NumCPU(), 100*safeDiv(others, capacity))
	if safeDiv(others, capacity) > benchNoisyShare {
		fmt.Fprintln(out, "WARNING: the machine was shared with other busy processes; the figures are skewed: run again on a quiet machine (or under nice -n -15)")
	}

	var peakBuf, peakCopy int64
	for _, r := range rounds {
		peakBuf, peakCopy = max(peakBuf, r.copy.peakBuffered), max(peakCopy, r.copy.peakRSS)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "peak RSS of ferry: %s over the whole run (it holds each baseline's documents)", bytesHuman(peakRSS))
	if peakCopy > 0 {
		fmt.Fprintf(out, ", %s during the copy rounds", bytesHuman(peakCopy))
	}
	fmt.Fprintf(out, "; copy peak buffered %s\n", bytesHuman(peakBuf))
	verdict := "PASS"
	if ratio < benchTargetRatio {
		verdict = "BELOW TARGET"
	}
	fmt.Fprintf(out, "copy/baseline (medians): %.3f  target >= %.2f: %s\n", ratio, benchTargetRatio, verdict)
	fmt.Fprintf(out, "copy/raw copy (medians): %.3f  (the engine against one find cursor feeding the same insertMany batches)\n", rawRatio)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func safeDiv(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// shellQuote writes args as a shell command line.
func shellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && !strings.ContainsFunc(a, func(r rune) bool {
			return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("-_./=:,+@%", r)
		}) {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// ferretVersion asks the server binary for its version.
func ferretVersion(ctx context.Context, bin string) string {
	b, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "FerretDB (" + filepath.Base(bin) + ", version unknown)"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "version:"); ok {
			return "FerretDB " + strings.TrimSpace(v)
		}
	}
	return "FerretDB"
}

// serverPID finds the server process listening on addr by its command
// line (0 when not found): the test server does not expose its process.
func serverPID(addr string) int {
	want := "--listen-addr=" + addr
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(b), "\x00"), want) {
			return pid
		}
	}
	return 0
}

// clockTicks is the unit of utime and stime in /proc/<pid>/stat (USER_HZ,
// 100 on Linux).
const clockTicks = 100

// procCPU returns the user+system CPU seconds of process pid, 0 when
// unknown.
func procCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields start after its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(string(b[i+1:]))
	// fields[0] is the state (field 3); utime and stime are fields 14, 15.
	if len(fields) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(fields[11], 64)
	st, _ := strconv.ParseFloat(fields[12], 64)
	return (ut + st) / clockTicks
}

// machineBusy is the busy time of all CPUs since boot, in seconds, from
// /proc/stat (0 when unknown).
func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0
	}
	var busy float64
	// user nice system idle iowait irq softirq steal ...; guest time is
	// already in user.
	for i, v := range fields[1:min(len(fields), 9)] {
		if i == 3 || i == 4 {
			continue
		}
		x, _ := strconv.ParseFloat(v, 64)
		busy += x
	}
	return busy / clockTicks
}

// resetPeakRSS restarts this process's peak RSS count (Linux 4.0 and
// later); false when it could not.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// memTotal is the machine's memory from /proc/meminfo, 0 when unknown.
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// benchReplayTarget is the replay rate `ferry bench replay` aims for with
// the DDT shape on the 2-core development machine: DDT published 400k
// ops/s on about 11 cores, so this is roughly ten times its rate per core.
const benchReplayTarget = 300_000

// benchReplayFlags are the flags of `ferry bench replay`.
type benchReplayFlags struct {
	shape      string
	ops        int64
	pool       int
	writers    int
	batch      int
	readBatch  int
	rounds     int
	cpuProfile string
	shards     int
	migrate    int64
	wire       benchWireFlags
}

func newBenchReplayCommand() *cobra.Command {
	var f benchReplayFlags
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Oplog replay operations/second through the real pipeline into a discarding sink",
		Long: `replay measures how fast the replayer turns oplog entries into writes,
without a server on either side: FerretDB applies a few hundred
single-document writes per second, so a replaying target here measures the
server, not MongoFerry.

It generates a pool of --pool distinct raw oplog entries (fixed seed; 60%
inserts, 30% updates written as $v:2 diffs that set one field, 10%
deletes; updates and deletes of documents inserted earlier) in one of two
shapes:

  ddt   documents of about 140 bytes (ObjectId _id, two short strings, an
        int, a double, a date, a boolean) over 10 collections, the shape
        DDT published its replay figures with;
  ycsb  YCSB's usertable records: string _id and 10 fields of 100
        characters (1159 bytes), one collection.

--shape insertmany replays MongoDB 8.0's retryable insertMany instead:
500 ddt documents per insertMany, logged as eight applyOps entries
(seven batches of 64 inserts and one of 52) with lsid, txnNumber,
multiOpType 1 and prevOpTime; each batch is applied as a unit of its own,
without draining the writers. --ops counts entries (batches) there.

A reader serves --ops entries in batches of --read-batch, cycling through
the pool, each batch copied into its own buffer with new ts values (as a
tailer copies what its cursor returns), to a real replay.Replayer: parse, skip rules and namespace filter,
transaction assembly, translation into write models, partitioning by
(namespace, document key) over --writers queues under the byte budget,
writer batching of up to --batch writes, watermark and checkpoint. The
sink writes nothing but does what the driver does before sending: it
marshals every filter with the BSON encoder, checks every update and
replacement, builds the update/delete statements and copies them into
command messages. A round ends when the sink has every write; it checks
the counts and that the checkpoint reached the last entry.

Reported per round and as medians: ops/s, ns/op (wall time per entry),
allocs/op and bytes/op (heap allocations of the whole process during the
round, from runtime.MemStats), and the writes per Apply call and per
command the batching achieved; then the peak RSS during the rounds (the
pool included) and GOMAXPROCS. Target: 300000 ops/s
for the ddt shape on the 2-core development machine.

--shards N (N > 1) replays the same entries as a sharded source logs them:
each entry on the shard its document's _id hashes to, one replayer per
shard (the subtasks of a sharded task, with a shared in-memory position
board), and every --migrate-every entries a chunk migration's fromMigrate
entry on one shard in turn, after which that shard holds the namespace's
writes until the others have applied up to it (subtasks publish every
200ms here). It reports the writes held and the time they were held.

--cpuprofile writes a CPU profile of each shape's rounds (FILE.<shape> with
--shape both); read them with 'go tool pprof -top bin/ferry FILE*'.

` + benchWireHelp,
		Example: `  # Both shapes, 1M entries each, 3 rounds (about a minute)
  ferry bench replay

  # The DDT shape only, 8 writers, and its CPU profile
  ferry bench replay --shape ddt --writers 8 --cpuprofile /tmp/replay.prof
  go tool pprof -top bin/ferry /tmp/replay.prof

  # Three shards with chunk migrations: ops/s and writes held
  ferry bench replay --shards 3

  # The same through go test
  go test ./pkg/engine/replay/ -run '^$' -bench Replay -benchmem` + benchWireExamples,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.wire.enabled {
				f.wire.opsGiven = cmd.Flags().Changed("ops")
				return benchExit(cmd.Context(), cmd.OutOrStdout(), runBenchReplayWire(cmd.Context(), cmd.OutOrStdout(), f))
			}
			return benchExit(cmd.Context(), cmd.OutOrStdout(), runBenchReplay(cmd.Context(), cmd.OutOrStdout(), f))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.shape, "shape", "both", "ddt, ycsb, both, or insertmany (8.0 retryable insertMany batches)")
	fl.Int64Var(&f.ops, "ops", 1_000_000, "oplog entries replayed per round")
	fl.IntVar(&f.pool, "pool", replaybench.DefaultPool, "distinct entries generated per shape and cycled through")
	fl.IntVar(&f.writers, "writers", config.DefaultWriters, "threads.writers: writer goroutines and queues")
	fl.IntVar(&f.batch, "batch", config.DefaultBatchSize, "cache.batchSize: writes per bulk write at most")
	fl.IntVar(&f.readBatch, "read-batch", replaybench.DefaultReadBatch, "entries the reader returns per call")
	fl.IntVar(&f.rounds, "rounds", 3, "rounds per shape; the medians are reported")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the rounds to this file (FILE.<shape> with --shape both)")
	fl.IntVar(&f.shards, "shards", 1, "replay as a sharded source with this many shards, one replayer each")
	fl.Int64Var(&f.migrate, "migrate-every", replaybench.DefaultMigrateEvery, "with --shards: entries between chunk migrations (fromMigrate entries); 0 for none")
	addBenchWireFlags(fl, &f.wire)
	return cmd
}

func (f benchReplayFlags) shapes() ([]replaybench.Shape, error) {
	if f.shape == "both" {
		return replaybench.Shapes, nil
	}
	s, err := replaybench.ParseShape(f.shape)
	if err != nil {
		return nil, fmt.Errorf("--shape: %w (or both)", err)
	}
	return []replaybench.Shape{s}, nil
}

func (f benchReplayFlags) validate() error {
	switch {
	case f.ops < 1:
		return fmt.Errorf("--ops must be at least 1, got %d", f.ops)
	case f.pool < 1 || f.pool > 10_000_000:
		return fmt.Errorf("--pool must be between 1 and 10000000, got %d", f.pool)
	case f.writers < 1 || f.writers > 256:
		return fmt.Errorf("--writers must be between 1 and 256 (the task's limit), got %d", f.writers)
	case f.batch < 1 || f.batch > 100_000:
		return fmt.Errorf("--batch must be between 1 and 100000, got %d", f.batch)
	case f.readBatch < 1:
		return fmt.Errorf("--read-batch must be at least 1, got %d", f.readBatch)
	case f.rounds < 1:
		return fmt.Errorf("--rounds must be at least 1, got %d", f.rounds)
	case f.shards < 1 || f.shards > 255:
		return fmt.Errorf("--shards must be between 1 and 255, got %d", f.shards)
	case f.migrate < 0:
		return fmt.Errorf("--migrate-every must be 0 or more, got %d", f.migrate)
	}
	_, err := f.shapes()
	return err
}

// benchReplayShape is what the rounds of one shape measured.
type benchReplayShape struct {
	in     *replaybench.Input
	rounds []replaybench.Result
	// held, holdSeconds and migrations are per round, with --shards.
	held, migrations []int64
	holdSeconds      []float64
	peakRSS          int64
	// others is the CPU time of other processes during the rounds,
	// capacity the CPU time the machine had.
	others, capacity float64
}

func runBenchReplay(ctx context.Context, out io.Writer, f benchReplayFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	shapes, _ := f.shapes()
	fmt.Fprintln(out, "ferry bench replay: synthetic oplog -> replay pipeline -> encoding, discarding sink")
	printBenchHeader(out)
	fmt.Fprintf(out, "pipeline:  %d writers, batches of up to %d writes, reads of %d entries, cache.maxBytes %s, %d rounds per shape\n",
		f.writers, f.batch, f.readBatch, config.DefaultMaxBytes, f.rounds)
	if f.shards > 1 {
		fmt.Fprintf(out, "sharded:   %d shards, one replayer each (the pipeline figures are per replayer), a migration every %d entries\n", f.shards, f.migrate)
	}
	var results []benchReplayShape
	for _, shape := range shapes {
		res, err := benchReplayRounds(ctx, out, f, shape, len(shapes) > 1)
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	fmt.Fprintln(out)
	printBenchReplayTable(out, results)
	return nil
}

// benchReplayRounds generates one shape's entries and replays them
// f.rounds times.
func benchReplayRounds(ctx context.Context, out io.Writer, f benchReplayFlags, shape replaybench.Shape, several bool) (benchReplayShape, error) {
	res := benchReplayShape{}
	start := time.Now()
	in, err := replaybench.Generate(shape, f.pool, replaybench.Mix{}, 1)
	if err != nil {
		return res, err
	}
	res.in = in
	c := in.Counts(f.ops)
	fmt.Fprintf(out, "\n%s: %d entries per round (%d inserts, %d $v:2 updates, %d deletes) over %d collection(s), documents of %d bytes, entries of %.0f bytes on average; pool of %d entries (%s) generated in %.1fs\n",
		shape, f.ops, c.Inserts, c.Updates, c.Deletes, in.Collections, in.DocBytes, in.EntryBytes(), len(in.Entries), bytesHuman(in.Bytes), time.Since(start).Seconds())

	runtime.GC()
	debug.FreeOSMemory()
	rssReset := resetPeakRSS()
	if f.cpuProfile != "" {
		name := f.cpuProfile
		if several {
			name += "." + string(shape)
		}
		pf, err := os.Create(name)
		if err != nil {
			return res, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() { _ = pf.Close() }()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return res, fmt.Errorf("--cpuprofile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			fmt.Fprintf(out, "CPU profile of the %s rounds: %s (read with: go tool pprof -top %s %s)\n", shape, name, os.Args[0], name)
		}()
	}
	cfg := replaybench.Config{Ops: f.ops, Writers: f.writers, BatchSize: f.batch, ReadBatch: f.readBatch}
	env := &benchEnv{}
	for r := 1; r <= f.rounds; r++ {
		cpu0 := env.cpu()
		var (
			rr  replaybench.Result
			err error
		)
		if f.shards > 1 {
			migrate := f.migrate
			if migrate == 0 {
				migrate = -1
			}
			var sr replaybench.ShardResult
			sr, err = replaybench.RunShards(ctx, in, replaybench.ShardConfig{Config: cfg, Shards: f.shards, MigrateEvery: migrate})
			rr = sr.Result
			res.held, res.migrations, res.holdSeconds = append(res.held, sr.HeldWrites), append(res.migrations, sr.Migrations), append(res.holdSeconds, sr.HoldSeconds)
			if err == nil {
				fmt.Fprintf(out, "round %d: %d shards, %d migrations, %d writes held (%.2f%% of the writes) for %.2fs in all\n",
					r, f.shards, sr.Migrations, sr.HeldWrites, 100*safeDiv(float64(sr.HeldWrites), float64(rr.Ops)), sr.HoldSeconds)
			}
		} else {
			rr, err = replaybench.Run(ctx, in, cfg)
		}
		if err != nil {
			return res, fmt.Errorf("%s round %d: %w", shape, r, err)
		}
		cpu := env.cpu().sub(cpu0)
		fmt.Fprintf(out, "round %d: %d ops in %.3fs = %s ops/s, %.0f ns/op, %.1f allocs/op, %.0f B/op, %d GCs; CPU: ferry %.2fs (%.2f cores), other processes %.2fs\n",
			r, rr.Ops, rr.Elapsed.Seconds(), human(int64(rr.OpsPerSecond())), rr.NsPerOp(), rr.AllocsPerOp(), rr.BytesPerOp(), rr.GCs,
			cpu.ferry, safeDiv(cpu.ferry, rr.Elapsed.Seconds()), cpu.others())
		res.rounds = append(res.rounds, rr)
		res.others += cpu.others()
		res.capacity += float64(runtime.NumCPU()) * rr.Elapsed.Seconds()
	}
	if rssReset {
		res.peakRSS = peakRSS()
	}
	return res, nil
}

// printBenchReplayTable prints each shape's medians and the verdict.
func printBenchReplayTable(out io.Writer, shapes []benchReplayShape) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\tops\tentry bytes\tops/s\tns/op\tallocs/op\tB/op\twrites/apply\twrites/command\tpeak RSS\t")
	for _, s := range shapes {
		var rate, ns, allocs, bytesOp []float64
		for _, r := range s.rounds {
			rate, ns = append(rate, r.OpsPerSecond()), append(ns, r.NsPerOp())
			allocs, bytesOp = append(allocs, r.AllocsPerOp()), append(bytesOp, r.BytesPerOp())
		}
		last := s.rounds[len(s.rounds)-1].Sink
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t%.1f\t%.1f\t%s\t\n", s.in.Shape, s.rounds[0].Ops,
			s.in.EntryBytes(), median(rate), median(ns), median(allocs), median(bytesOp),
			safeDiv(float64(last.Writes), float64(last.Batches)), s.rounds[len(s.rounds)-1].WritesPerCommand(),
			bytesHuman(s.peakRSS))
	}
	_ = tw.Flush()
	for _, s := range shapes {
		if len(s.held) == 0 {
			continue
		}
		var held, migrations []float64
		for i := range s.held {
			held, migrations = append(held, float64(s.held[i])), append(migrations, float64(s.migrations[i]))
		}
		fmt.Fprintf(out, "%s held writes (median per round): %.0f after %.0f migrations\n", s.in.Shape, median(held), median(migrations))
	}
	fmt.Fprintf(out, "(medians of the rounds; GOMAXPROCS %d on %d CPUs; peak RSS of ferry during the shape's rounds, its pool included)\n", runtime.GOMAXPROCS(0), runtime.NumCPU())
	var others, capacity float64
	for _, s := range shapes {
		others, capacity = others+s.others, capacity+s.capacity
	}
	fmt.Fprintf(out, "other processes used %.0f%% of the machine's CPU capacity during the rounds\n", 100*safeDiv(others, capacity))
	if safeDiv(others, capacity) > benchNoisyShare {
		fmt.Fprintln(out, "WARNING: the machine was shared with other busy processes; the figures are skewed: run again on a quiet machine")
	}
	for _, s := range shapes {
		if s.in.Shape != replaybench.ShapeDDT {
			continue
		}
		var rate []float64
		for _, r := range s.rounds {
			rate = append(rate, r.OpsPerSecond())
		}
		verdict := "PASS"
		if median(rate) < benchReplayTarget {
			verdict = "BELOW TARGET"
		}
		fmt.Fprintf(out, "ddt ops/s (median): %.0f  target >= %d: %s; per core: %.0f ops/s (DDT published 400000 on about 11 cores, about 36000 per core)\n",
			median(rate), benchReplayTarget, verdict, median(rate)/float64(runtime.GOMAXPROCS(0)))
	}
}
