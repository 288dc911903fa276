// Package replay is `ferry bench replay`: oplog replay operations per
// second through the real pipeline into a discarding sink, or with --wire
// (wire.go) through the engine's tailer and replayer between two
// in-process wire-protocol servers.
package replay

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/replay/replaybench"
)

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
	shardKey   string
	rehome     float64
	wire       benchWireFlags
}

// replayLong is the help of `ferry bench replay`, before the wire options.
const replayLong = `replay measures how fast the replayer turns oplog entries into writes,
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
board), and every --migrate-every entries a chunk migration into one
shard in turn (its start marker, a fromMigrate entry and, a tenth of the
interval later, its end marker), during which that shard holds the
namespace's writes until the others have applied up to them (subtasks
publish every 200ms here). It reports the writes held and the time they were held.
With --shard-key FIELD the collections are sharded on {FIELD: 1, _id: 1}
(entries carry that document key, as a sharded source logs it, and
every write is filtered on it). --rehome PCT moves that percentage of
the entries' documents to another shard as applications do without a
transaction: the document's home shard logs an earlier document with
its _id and another shard-key value (inserted, then deleted) and the
next shard inserts it. The discarding sink never answers with a
duplicate key, so no write meets the other document here.

--cpuprofile writes a CPU profile of each shape's rounds (FILE.<shape> with
--shape both); read them with 'go tool pprof -top bin/ferry FILE*'.

`

// NewCommand returns `ferry bench replay`.
func NewCommand() *cobra.Command {
	var f benchReplayFlags
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Oplog replay operations/second through the real pipeline into a discarding sink",
		Long:  replayLong + benchWireHelp,
		Example: `  # Both shapes, 1M entries each, 3 rounds (about a minute)
  ferry bench replay

  # The DDT shape only, 8 writers, and its CPU profile
  ferry bench replay --shape ddt --writers 8 --cpuprofile /tmp/replay.prof
  go tool pprof -top bin/ferry /tmp/replay.prof

  # Three shards with chunk migrations: ops/s and writes held
  ferry bench replay --shards 3

  # With a shard key not led by _id: writes filtered on {sk, _id}
  ferry bench replay --shards 3 --shard-key sk

  # The same with 1% of the entries moving a document to another shard
  ferry bench replay --shards 3 --shard-key sk --rehome 1

  # The same through go test
  go test ./pkg/engine/replay/ -run '^$' -bench Replay -benchmem` + benchWireExamples,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.wire.enabled {
				f.wire.opsGiven = cmd.Flags().Changed("ops")
				return exit.Bench(cmd.Context(), cmd.OutOrStdout(), runBenchReplayWire(cmd.Context(), cmd.OutOrStdout(), f))
			}
			return exit.Bench(cmd.Context(), cmd.OutOrStdout(), runBenchReplay(cmd.Context(), cmd.OutOrStdout(), f))
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
	fl.Int64Var(&f.migrate, "migrate-every", replaybench.DefaultMigrateEvery, "with --shards: entries between chunk migrations (start marker, fromMigrate entry, end marker); 0 for none")
	fl.StringVar(&f.shardKey, "shard-key", "", "with --shards: shard the collections on {FIELD: 1, _id: 1}: documents get an int field FIELD and entries carry the document key {FIELD, _id}, on which every write is filtered")
	fl.Float64Var(&f.rehome, "rehome", 0, "with --shard-key: the percentage of entries (0 to 100) whose document the application moves to another shard (a delete, then an insert of its _id with another shard-key value)")
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
	case f.shardKey != "" && (f.shardKey == "_id" || strings.ContainsAny(f.shardKey, ".$")):
		return fmt.Errorf("--shard-key %q: give a field name other than _id, without '.' or '$' (e.g. sk)", f.shardKey)
	case f.rehome < 0 || f.rehome > 100:
		return fmt.Errorf("--rehome must be between 0 and 100, got %v", f.rehome)
	case f.rehome > 0 && f.shardKey == "":
		return fmt.Errorf("--rehome needs --shard-key (and --shards 2 or more)")
	case f.shardKey != "" && f.shards < 2:
		return fmt.Errorf("--shard-key needs --shards 2 or more")
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
	// others is what other processes used during the rounds.
	others measure.Others
}

func runBenchReplay(ctx context.Context, out io.Writer, f benchReplayFlags) error {
	if err := f.validate(); err != nil {
		return err
	}
	shapes, _ := f.shapes()
	fmt.Fprintln(out, "ferry bench replay: synthetic oplog -> replay pipeline -> encoding, discarding sink")
	measure.Header(out)
	fmt.Fprintf(out, "pipeline:  %d writers, batches of up to %d writes, reads of %d entries, cache.maxBytes %s, %d rounds per shape\n",
		f.writers, f.batch, f.readBatch, config.DefaultMaxBytes, f.rounds)
	if f.shards > 1 {
		fmt.Fprintf(out, "sharded:   %d shards, one replayer each (the pipeline figures are per replayer), a migration every %d entries\n", f.shards, f.migrate)
		if f.shardKey != "" {
			fmt.Fprintf(out, "shard key: {%s: 1, _id: 1}, %.2f%% of the entries moving a document to another shard\n", f.shardKey, f.rehome)
		}
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
	in, err := replaybench.GenerateKeyed(shape, f.pool, replaybench.Mix{}, 1, f.shardKey)
	if err != nil {
		return res, err
	}
	res.in = in
	c := in.Counts(f.ops)
	fmt.Fprintf(out, "\n%s: %d entries per round (%d inserts, %d $v:2 updates, %d deletes) over %d collection(s), documents of %d bytes, entries of %.0f bytes on average; pool of %d entries (%s) generated in %.1fs\n",
		shape, f.ops, c.Inserts, c.Updates, c.Deletes, in.Collections, in.DocBytes, in.EntryBytes(), len(in.Entries), progress.Bytes(in.Bytes), time.Since(start).Seconds())

	runtime.GC()
	debug.FreeOSMemory()
	rssReset := measure.ResetPeakRSS()
	if f.cpuProfile != "" {
		name := f.cpuProfile
		if several {
			name += "." + string(shape)
		}
		stop, err := measure.StartCPUProfile(name)
		if err != nil {
			return res, err
		}
		defer func() {
			stop()
			fmt.Fprintf(out, "CPU profile of the %s rounds: %s (read with: go tool pprof -top %s %s)\n", shape, name, os.Args[0], name)
		}()
	}
	cfg := replaybench.Config{Ops: f.ops, Writers: f.writers, BatchSize: f.batch, ReadBatch: f.readBatch}
	var rr replaybench.Result
	round := func(r int) (time.Duration, error) {
		var err error
		if f.shards > 1 {
			migrate := f.migrate
			if migrate == 0 {
				migrate = -1
			}
			var sr replaybench.ShardResult
			sr, err = replaybench.RunShards(ctx, in, replaybench.ShardConfig{Config: cfg, Shards: f.shards, MigrateEvery: migrate,
				Rehome: f.rehome / 100})
			rr = sr.Result
			res.held, res.migrations, res.holdSeconds = append(res.held, sr.HeldWrites), append(res.migrations, sr.Migrations), append(res.holdSeconds, sr.HoldSeconds)
			if err == nil {
				fmt.Fprintf(out, "round %d: %d shards, %d migrations, %d writes held (%.2f%% of the writes) for %.2fs in all, %d documents moved to another shard\n",
					r, f.shards, sr.Migrations, sr.HeldWrites, 100*measure.Div(float64(sr.HeldWrites), float64(rr.Ops)), sr.HoldSeconds, sr.Moves)
			}
		} else {
			rr, err = replaybench.Run(ctx, in, cfg)
		}
		if err != nil {
			return 0, fmt.Errorf("%s round %d: %w", shape, r, err)
		}
		return rr.Elapsed, nil
	}
	report := func(r int, cpu measure.CPU) {
		fmt.Fprintf(out, "round %d: %d ops in %.3fs = %s ops/s, %.0f ns/op, %.1f allocs/op, %.0f B/op, %d GCs; CPU: ferry %.2fs (%.2f cores), other processes %.2fs\n",
			r, rr.Ops, rr.Elapsed.Seconds(), progress.Count(int64(rr.OpsPerSecond())), rr.NsPerOp(), rr.AllocsPerOp(), rr.BytesPerOp(), rr.GCs,
			cpu.Ferry, measure.Div(cpu.Ferry, rr.Elapsed.Seconds()), cpu.Others())
		res.rounds = append(res.rounds, rr)
	}
	if res.others, err = measure.Rounds(f.rounds, round, report); err != nil {
		return res, err
	}
	if rssReset {
		res.peakRSS = procstat.SelfPeakRSS()
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
			s.in.EntryBytes(), measure.Median(rate), measure.Median(ns), measure.Median(allocs), measure.Median(bytesOp),
			measure.Div(float64(last.Writes), float64(last.Batches)), s.rounds[len(s.rounds)-1].WritesPerCommand(),
			progress.Bytes(s.peakRSS))
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
		fmt.Fprintf(out, "%s held writes (median per round): %.0f after %.0f migrations\n", s.in.Shape, measure.Median(held), measure.Median(migrations))
	}
	fmt.Fprintf(out, "(medians of the rounds; GOMAXPROCS %d on %d CPUs; peak RSS of ferry during the shape's rounds, its pool included)\n", runtime.GOMAXPROCS(0), runtime.NumCPU())
	var others measure.Others
	for _, s := range shapes {
		others.Merge(s.others)
	}
	others.Print(out)
	for _, s := range shapes {
		if s.in.Shape != replaybench.ShapeDDT {
			continue
		}
		var rate []float64
		for _, r := range s.rounds {
			rate = append(rate, r.OpsPerSecond())
		}
		verdict := measure.Verdict(measure.Median(rate) >= benchReplayTarget)
		fmt.Fprintf(out, "ddt ops/s (median): %.0f  target >= %d: %s; per core: %.0f ops/s (DDT published 400000 on about 11 cores, about 36000 per core)\n",
			measure.Median(rate), benchReplayTarget, verdict, measure.Median(rate)/float64(runtime.GOMAXPROCS(0)))
	}
}
