// Package live is `ferry bench live`: a whole fullAndIncremental task on
// two FerretDB servers (start-up, full copy, replay of live writes,
// verification), measured as a user waits for it.
package live

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"golang.org/x/sync/errgroup"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/cli/flags"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/cli/servers"
	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// benchLiveFlags are the flags of `ferry bench live`.
type benchLiveFlags struct {
	records                   int64
	fieldCount, fieldLength   int
	inserts, updates, deletes int
	writers                   int
	rate                      float64
	oplogMiB                  int64
	readers, copyWriters      int
	timeout                   time.Duration
	progress                  string
	sourceReads               bool
}

// NewCommand returns `ferry bench live`.
func NewCommand() *cobra.Command {
	var f benchLiveFlags
	cmd := &cobra.Command{
		Use:   "live",
		Short: "A whole task on two real servers: start-up, full copy, then replay of live writes",
		Long: `live runs one fullAndIncremental task end to end between two FerretDB servers
(built by 'make ferretdb' into bin/ferretdb) and measures what a user waits
for, on real servers rather than a synthetic source or a discarding sink:

  start-up  from the start of the task to the first document on the target:
            recording the replay start position and planning the copy;
  copy      documents per second from the first document on the target to
            the last (and over the copy's whole elapsed time);
  replay    once the task streams, --inserts, --updates and --deletes
            single-document writes on the source (in a fixed shuffled order,
            from --writers clients, at most --rate per second), then the
            operations per second from the first live write until the target
            has all of them (replay caught up with the source's newest
            entry); the task then verifies with hashes that the target
            equals the source.

The source's oplog (--oplog-size MiB) is created before the --records YCSB
documents are loaded, so it holds their insert entries as a busy
deployment's oplog holds its recent writes: on FerretDB every read of the
oplog scans all of it.

Before the task (--source-reads), it reads the loaded collection twice
with one client: in natural order, as the copy reads a FerretDB source,
and sorted on _id, as MongoShake's copy does (FerretDB sorts in memory
before the first document, so that read's first-to-last rate leaves out
most of its cost). The first read's rate is the most any copy can take
from this source.

It also reports the commands the source served during replay (find and
getMore, from the server's own metrics), the tailer's oplog queries,
re-opens and late entries, and the CPU seconds of ferry and of each server
per phase. Figures are skewed by other load on the machine: the
'other processes' column says how much.

The replay rate is the target's: FerretDB applies a few hundred
single-document writes per second at best (docs/benchmarks.md); 'ferry
bench replay' measures the engine's own replay speed without a server.`,
		Example: `  # The default: 50000 documents of ~1.1 KB, 1000 inserts, 600 updates, 400 deletes
  ferry bench live

  # The scenario of 2000 inserts only, while the task streams
  ferry bench live --inserts 2000 --updates 0 --deletes 0

  # A quick run
  ferry bench live --records 5000 --inserts 100 --updates 50 --deletes 50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit.Bench(cmd.Context(), cmd.OutOrStdout(), runBenchLive(cmd.Context(), cmd.OutOrStdout(), f))
		},
	}
	fl := cmd.Flags()
	fl.Int64Var(&f.records, "records", 50_000, "YCSB documents loaded into the source before the task starts")
	fl.IntVar(&f.fieldCount, "fieldcount", workload.DefaultFieldCount, "fields per document besides _id")
	fl.IntVar(&f.fieldLength, "fieldlength", workload.DefaultFieldLength, "characters per field")
	fl.IntVar(&f.inserts, "inserts", 1000, "live inserts of new documents while the task streams")
	fl.IntVar(&f.updates, "updates", 600, "live updates ($set of one field) of loaded documents while the task streams")
	fl.IntVar(&f.deletes, "deletes", 400, "live deletes of loaded documents while the task streams")
	fl.IntVar(&f.writers, "writers", 2, "concurrent clients making the live writes")
	fl.Float64Var(&f.rate, "rate", 0, "live writes per second at most (0: as fast as the source takes them)")
	fl.Int64Var(&f.oplogMiB, "oplog-size", 128, "capped size of the source's oplog in MiB, created before the load")
	fl.IntVar(&f.readers, "readers", 0, "the task's threads.readers (0: the task's default)")
	fl.IntVar(&f.copyWriters, "copy-writers", 0, "the task's threads.writers (0: the task's default)")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Minute, "give up when replay has not caught up this long after the last live write")
	fl.BoolVar(&f.sourceReads, "source-reads", true, "before the task, read the loaded collection once in natural order and once sorted on _id, and report each read's docs/s and the source's CPU: the most any copy takes from this source")
	fl.StringVar(&f.progress, "progress", "log", "the task's progress output on stderr: auto, bar, log or none")
	return cmd
}

func (f benchLiveFlags) validate() error {
	switch {
	case f.records < 1:
		return fmt.Errorf("--records must be at least 1, got %d", f.records)
	case f.inserts < 0 || f.updates < 0 || f.deletes < 0:
		return fmt.Errorf("--inserts, --updates and --deletes must be 0 or more, got %d, %d, %d", f.inserts, f.updates, f.deletes)
	case int64(f.updates+f.deletes) > f.records:
		return fmt.Errorf("--updates plus --deletes (%d) touch distinct loaded documents and must not exceed --records (%d)", f.updates+f.deletes, f.records)
	case f.inserts+f.updates+f.deletes == 0:
		return fmt.Errorf("--inserts, --updates and --deletes are all 0: there is nothing to replay")
	case f.writers < 1:
		return fmt.Errorf("--writers must be at least 1, got %d", f.writers)
	case f.rate < 0:
		return fmt.Errorf("--rate must be 0 (no limit) or more, got %g", f.rate)
	case f.oplogMiB < 1:
		return fmt.Errorf("--oplog-size must be at least 1 (MiB), got %d", f.oplogMiB)
	case f.readers < 0 || f.readers > 256 || f.copyWriters < 0 || f.copyWriters > 256:
		return fmt.Errorf("--readers and --copy-writers must be between 0 (the default) and 256, got %d and %d", f.readers, f.copyWriters)
	case f.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	}
	if err := f.workloadOptions().ValidateLoad(); err != nil {
		return flags.WorkloadError(err)
	}
	return nil
}

func (f benchLiveFlags) workloadOptions() workload.Options {
	return workload.Options{Database: measure.DB, Collection: measure.Collection, RecordCount: f.records,
		FieldCount: f.fieldCount, FieldLength: f.fieldLength, KeyType: workload.KeyString, Threads: 2, Seed: 1}
}

// liveMilestones are the moments `bench live` measures between.
type liveMilestones struct {
	start, firstDoc, lastDoc, streaming time.Time
	copyDocs                            int64
	copyElapsed                         float64
}

func runBenchLive(ctx context.Context, out io.Writer, f benchLiveFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	o := f.workloadOptions()
	fmt.Fprintln(out, "ferry bench live: a fullAndIncremental task between two FerretDB servers")
	measure.Header(out)
	fmt.Fprintf(out, "documents: %d x %d bytes (%d fields x %d characters, string _id); live writes: %d inserts, %d updates, %d deletes from %d clients\n",
		f.records, o.DocumentSize(), o.WithDefaults().FieldCount, o.WithDefaults().FieldLength, f.inserts, f.updates, f.deletes, f.writers)
	fmt.Fprintf(out, "load:      %s\n", loadAverage())

	pair, err := servers.StartPair(ctx, f.oplogMiB<<20)
	if err != nil {
		return err
	}
	defer pair.Stop()
	src, dst := pair.Source, pair.Target
	cpu := measure.Sampler{SourcePID: src.Pid(), TargetPID: dst.Pid()}
	fmt.Fprintf(out, "servers:   %s (SQLite), source %s (oplog %d MiB), target %s, on this machine\n",
		servers.Version(ctx), src.Addr, f.oplogMiB, dst.Addr)

	sc, err := src.Client(ctx)
	if err != nil {
		return fmt.Errorf("connect to the source: %w", err)
	}
	defer func() { _ = sc.Disconnect(context.Background()) }()
	phases, err := loadSource(ctx, out, sc, o, f, cpu)
	if err != nil {
		return err
	}
	task, err := f.task(src.URI, dst.URI)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "task:      %d readers, %d writers, cache.batchSize %d, verify hash\n\n", task.Threads.Readers, task.Threads.Writers, task.Cache.BatchSize)

	var ms liveMilestones
	cpuCopy := cpu.Sample()
	ms.start = time.Now()
	eng, err := engine.Open(ctx, task, engine.Options{Log: measure.Logger()})
	if err != nil {
		return err
	}
	defer eng.Close()
	stopProgress := progress.Show(ctx, progress.Mode(f.progress), os.Stderr, slog.New(slog.NewTextHandler(os.Stderr, nil)), 5*time.Second, eng.Status)
	defer stopProgress()
	runDone := make(chan error, 1)
	go func() { runDone <- eng.Run(ctx) }()
	if err := waitStreaming(ctx, eng, runDone, &ms); err != nil {
		return err
	}
	phases = append(phases, livePhase{name: "start-up and copy", cpu: cpu.Sample().Sub(cpuCopy), seconds: time.Since(ms.start).Seconds()})
	ms.print(out, eng.Status().StartupSeconds)

	phases, err = replayLive(ctx, out, liveRun{eng: eng, runDone: runDone, sc: sc, debugAddr: src.DebugAddr, cpu: cpu}, o, f, phases)
	if err != nil {
		return err
	}
	runErr := <-runDone
	stopProgress()
	if runErr != nil {
		return fmt.Errorf("the task failed: %w", runErr)
	}
	if err := printVerify(out, eng.Status().Verify); err != nil {
		return err
	}
	printLivePhases(out, phases)
	return nil
}

// liveRun is the running task `bench live` measures, and its source.
type liveRun struct {
	eng       *engine.Engine
	runDone   <-chan error
	sc        *mongo.Client
	debugAddr string
	cpu       measure.Sampler
}

// replayLive writes to the source while the task streams, then waits
// until the target has every write, and prints the replay's figures.
func replayLive(ctx context.Context, out io.Writer, r liveRun, o workload.Options, f benchLiveFlags, phases []livePhase) ([]livePhase, error) {
	finds0 := measure.ServerCommands(r.debugAddr)
	src0 := r.eng.Status().Source
	cpuReplay := r.cpu.Sample()
	first := time.Now()
	written, err := liveWrites(ctx, r.sc.Database(measure.DB).Collection(measure.Collection), o, f)
	if err != nil {
		return phases, fmt.Errorf("live writes: %w", err)
	}
	lastWrite := time.Now()
	fmt.Fprintf(out, "writes:    %d ops on the source in %.2fs = %.0f ops/s\n", written, lastWrite.Sub(first).Seconds(), measure.Div(float64(written), lastWrite.Sub(first).Seconds()))
	r.eng.FinishWhenCaughtUp()
	caughtUp, waitErr := waitCaughtUp(ctx, r.eng, r.runDone, lastWrite, f.timeout)
	if waitErr != nil {
		caughtUp = time.Now()
	}
	phases = append(phases, livePhase{name: "live writes and replay", cpu: r.cpu.Sample().Sub(cpuReplay), seconds: caughtUp.Sub(first).Seconds()})
	printSourceCommands(out, measure.ServerCommands(r.debugAddr), finds0, r.eng.Status().Source, src0, caughtUp.Sub(first))
	if waitErr != nil {
		st := r.eng.Status()
		if rs := st.Replay; rs != nil {
			fmt.Fprintf(out, "replay:    gave up after %.0fs: %d ops applied, lag %s\n", caughtUp.Sub(first).Seconds(), progress.Applied(rs), rs.LagText())
		}
		printLivePhases(out, phases)
		return phases, waitErr
	}
	replaySecs := caughtUp.Sub(first).Seconds()
	fmt.Fprintf(out, "replay:    %d ops in %.2fs from the first live write to the target having all = %.1f ops/s (caught up %.2fs after the last write)\n",
		written, replaySecs, measure.Div(float64(written), replaySecs), caughtUp.Sub(lastWrite).Seconds())
	return phases, nil
}

// loadSource loads the documents into the source, and measures reading
// them back when asked.
func loadSource(ctx context.Context, out io.Writer, sc *mongo.Client, o workload.Options, f benchLiveFlags, cpu measure.Sampler) ([]livePhase, error) {
	fmt.Fprintf(out, "\nLoading %d documents into the source %s.%s... ", f.records, measure.DB, measure.Collection)
	cpuLoad := cpu.Sample()
	ls, err := workload.Load(ctx, sc, o)
	if err != nil {
		fmt.Fprintln(out)
		return nil, fmt.Errorf("load the source: %w", err)
	}
	fmt.Fprintf(out, "%.1fs (%s docs/s)\n", ls.Elapsed.Seconds(), progress.Count(int64(ls.OpsPerSec)))
	phases := []livePhase{{name: "load", cpu: cpu.Sample().Sub(cpuLoad), seconds: ls.Elapsed.Seconds()}}
	if f.sourceReads {
		if err := measureSourceReads(ctx, out, sc.Database(measure.DB).Collection(measure.Collection), cpu); err != nil {
			return nil, err
		}
	}
	return phases, nil
}

// task is the measured task: fullAndIncremental from source to target,
// verified by hash.
func (f benchLiveFlags) task(source, target string) (*config.Task, error) {
	task := &config.Task{Name: "bench-live", Spec: config.Spec{
		Mode:    config.ModeFullAndIncremental,
		Source:  config.Endpoint{URI: source},
		Target:  config.Endpoint{URI: target},
		Threads: config.Threads{Readers: f.readers, Writers: f.copyWriters},
		Verify:  config.Verify{Mode: config.VerifyHash},
	}}
	task.SetDefaults()
	return task, task.Validate()
}

// print prints the start-up and copy figures.
func (ms *liveMilestones) print(out io.Writer, startupSeconds float64) {
	copySecs := ms.lastDoc.Sub(ms.firstDoc).Seconds()
	fmt.Fprintf(out, "start-up:  %.2fs from the task's start to its first copied document (engine status: %.2fs)\n",
		ms.firstDoc.Sub(ms.start).Seconds(), startupSeconds)
	fmt.Fprintf(out, "copy:      %d docs in %.2fs from the first to the last = %s docs/s; %.2fs from the task's start to streaming (the copy's own elapsed %.2fs)\n",
		ms.copyDocs, copySecs, progress.Count(int64(measure.Div(float64(ms.copyDocs), copySecs))), ms.streaming.Sub(ms.start).Seconds(), ms.copyElapsed)
}

// printVerify prints the verification's outcome; differences are an error.
func printVerify(out io.Writer, v *engine.VerifyStatus) error {
	switch {
	case v == nil:
		fmt.Fprintln(out, "verify:    not run")
	case !v.OK:
		return fmt.Errorf("verification found differences in %s", strings.Join(v.Differing, ", "))
	default:
		fmt.Fprintln(out, "verify:    the target equals the source (hash of every collection)")
	}
	return nil
}

// printSourceCommands prints what the source served during replay: its
// find and getMore commands, and the tailer's share of them.
func printSourceCommands(out io.Writer, cmds1, cmds0 map[string]int64, src1, src0 *engine.SourceStatus, d time.Duration) {
	fmt.Fprintf(out, "source:    %d find and %d getMore commands in %.0fs of replay\n", cmds1["find"]-cmds0["find"], cmds1["getMore"]-cmds0["getMore"], d.Seconds())
	if src1 == nil {
		return
	}
	var z engine.SourceStatus
	if src0 == nil {
		src0 = &z
	}
	fmt.Fprintf(out, "tailer:    %d oplog queries (%d cursor opens, %d newest-position queries), %d late entries\n",
		src1.OplogQueries-src0.OplogQueries, src1.Reopens-src0.Reopens, src1.NewestReads-src0.NewestReads, src1.LateEntries-src0.LateEntries)
}

// waitStreaming follows the task until it streams, noting when the first
// and the last copied document reached the target.
func waitStreaming(ctx context.Context, eng *engine.Engine, runDone <-chan error, ms *liveMilestones) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	var docs int64
	for {
		select {
		case err := <-runDone:
			return fmt.Errorf("the task ended before it streamed: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		st := eng.Status()
		now := time.Now()
		if n := st.Copy.Documents; n > docs {
			if docs == 0 {
				ms.firstDoc = now
			}
			docs, ms.lastDoc = n, now
		}
		if st.Phase == engine.PhaseStreaming {
			ms.streaming, ms.copyDocs, ms.copyElapsed = now, docs, st.Copy.ElapsedSeconds
			return nil
		}
	}
}

// waitCaughtUp returns when replay has applied everything the source wrote
// up to the last live write: its checkpoint is at or past a newest position
// read after that write, with nothing in flight.
func waitCaughtUp(ctx context.Context, eng *engine.Engine, runDone <-chan error, lastWrite time.Time, timeout time.Duration) (time.Time, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	deadline := time.After(timeout)
	for {
		select {
		case err := <-runDone:
			return time.Time{}, fmt.Errorf("the task ended before replay caught up: %w", err)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-deadline:
			return time.Time{}, fmt.Errorf("replay did not catch up within --timeout %s of the last live write", timeout)
		case <-t.C:
		}
		st := eng.Status()
		if st.Phase != engine.PhaseStreaming {
			return time.Now(), nil
		}
		if r := st.Replay; r != nil && r.CaughtUp() && int64(r.NewestTS.T) >= lastWrite.Unix() {
			return time.Now(), nil
		}
	}
}

// liveWrites makes f's inserts (new keys after the loaded ones), updates
// and deletes (distinct loaded documents) in a shuffled order from
// f.writers clients and returns how many it made.
func liveWrites(ctx context.Context, coll *mongo.Collection, o workload.Options, f benchLiveFlags) (int, error) {
	type op struct {
		kind byte
		n    int64
	}
	ops := make([]op, 0, f.inserts+f.updates+f.deletes)
	for i := range f.inserts {
		ops = append(ops, op{'i', f.records + int64(i)})
	}
	for i := range f.updates {
		ops = append(ops, op{'u', int64(i)})
	}
	for i := range f.deletes {
		ops = append(ops, op{'d', int64(f.updates + i)})
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	var tick <-chan time.Time
	if f.rate > 0 {
		tk := time.NewTicker(time.Duration(float64(time.Second) / f.rate))
		defer tk.Stop()
		tick = tk.C
	}
	next := make(chan op)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(next)
		for _, x := range ops {
			if tick != nil {
				select {
				case <-tick:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			select {
			case next <- x:
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		return nil
	})
	var mu sync.Mutex
	done := 0
	for range f.writers {
		g.Go(func() error {
			for x := range next {
				key := o.KeyType.Key(x.n)
				var err error
				switch x.kind {
				case 'i':
					_, err = coll.InsertOne(gctx, o.Document(x.n))
				case 'u':
					_, err = coll.UpdateOne(gctx, bson.D{{Key: "_id", Value: key}},
						bson.D{{Key: "$set", Value: bson.D{{Key: "field0", Value: "live-" + strconv.FormatInt(x.n, 10)}}}})
				case 'd':
					_, err = coll.DeleteOne(gctx, bson.D{{Key: "_id", Value: key}})
				}
				if err != nil {
					return fmt.Errorf("%c %v: %w", x.kind, key, err)
				}
				mu.Lock()
				done++
				mu.Unlock()
			}
			return nil
		})
	}
	err := g.Wait()
	return done, err
}

// livePhase is one phase's CPU seconds.
type livePhase struct {
	name    string
	seconds float64
	cpu     measure.CPU
}

func printLivePhases(out io.Writer, phases []livePhase) {
	fmt.Fprintln(out, "\nCPU seconds per phase (user+system)")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tseconds\tferry\tsource\ttarget\tother processes\t")
	for _, p := range phases {
		c := p.cpu
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", p.name, p.seconds, c.Ferry, c.Source, c.Target, c.Others())
	}
	_ = tw.Flush()
}

// loadAverage is the machine's load average line ("unknown" when there
// is no /proc).
func loadAverage() string {
	l, err := procstat.LoadAverage()
	if err != nil {
		return "unknown"
	}
	return "load average " + l
}
