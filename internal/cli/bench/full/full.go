// Package full is `ferry bench full`: a full copy's documents per second
// against a raw insertMany loader and a one-cursor raw copy on the same
// target server (rounds.go), with the CPU each process spent (table.go).
package full

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/cli/flags"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// benchTargetRatio is the copy/baseline throughput ratio `ferry bench
// full` aims for: a full copy should write within 10% of a plain loader.
const benchTargetRatio = 0.9

// benchFullRecords is the default size of `ferry bench full`: above
// fullSync.rangeDocuments (50000), so a copy that splits (--split always,
// or a MongoDB source) plans two ranges like any larger collection, and
// small enough that three rounds take
// about a minute and a half on two cores (100000 took nearly six minutes).
const benchFullRecords = 60_000

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

// NewCommand returns `ferry bench full`.
func NewCommand() *cobra.Command {
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
			return exit.Bench(cmd.Context(), cmd.OutOrStdout(), runBenchFull(cmd.Context(), cmd.OutOrStdout(), f))
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
		return flags.WorkloadError(err)
	}
	return nil
}

func (f benchFullFlags) workloadOptions() workload.Options {
	return workload.Options{Database: measure.DB, Collection: measure.Collection, RecordCount: f.records,
		FieldCount: f.fieldCount, FieldLength: f.fieldLength, KeyType: workload.KeyString,
		Threads: f.threads, BatchSize: f.batchSize, Seed: 1}
}

func runBenchFull(ctx context.Context, out io.Writer, f benchFullFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	o := f.workloadOptions()
	fmt.Fprintln(out, "ferry bench full: full copy vs raw insertMany, same target server")
	measure.Header(out)
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
	fmt.Fprintf(out, "\nLoading %d documents into the source %s.%s... ", f.records, measure.DB, measure.Collection)
	ls, err := workload.Load(ctx, sc, o)
	if err != nil {
		fmt.Fprintln(out)
		return fmt.Errorf("load the source: %w", err)
	}
	fmt.Fprintf(out, "%.1fs (%s docs/s)\n\n", ls.Elapsed.Seconds(), progress.Count(int64(ls.OpsPerSec)))

	rounds := make([]benchRound, 0, f.rounds)
	for r := 1; r <= f.rounds; r++ {
		var round benchRound
		if round.baseline, err = env.baselineRound(ctx, o, r); err != nil {
			return err
		}
		fmt.Fprintf(out, "round %d baseline: %d docs in %.2fs = %s docs/s\n", r, round.baseline.docs, round.baseline.seconds, progress.Count(int64(round.baseline.rate())))
		if round.rawCopy, err = env.rawCopyRound(ctx, sc, f, r); err != nil {
			return err
		}
		fmt.Fprintf(out, "round %d raw copy: %d docs in %.2fs = %s docs/s\n", r, round.rawCopy.docs, round.rawCopy.seconds, progress.Count(int64(round.rawCopy.rate())))
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
			r, c.docs, c.seconds, progress.Count(int64(c.rate())), c.planning, c.copying, progress.Count(int64(measure.Div(float64(c.docs), c.copying))), c.wall)
		if c.elapsedDrift > 0.05 {
			fmt.Fprintf(out, "WARNING: Status().Copy.ElapsedSeconds went on counting after the copy ended (+%.2fs)\n", c.elapsedDrift)
		}
		rounds = append(rounds, round)
	}
	fmt.Fprintln(out)
	printBenchFullTable(out, rounds, max(env.peakRSS, procstat.SelfPeakRSS()))
	if f.cpuProfile != "" {
		files := f.cpuProfile
		if f.rounds > 1 {
			files += ".*"
		}
		fmt.Fprintf(out, "\nCPU profiles of the copy rounds: %s (read with: go tool pprof -top %s %s)\n", files, os.Args[0], files)
	}
	return nil
}
