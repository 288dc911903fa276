// Package sharded is `ferry bench sharded`: a sharded source's full copy
// shard by shard (fullSync.shardedCopy perShard) against the copy through
// mongos (router), side by side in one run, on the cluster stand-in
// (ferretdb.Cluster) with 1 to N shards (bed.go), with the CPU of ferry
// and of every FerretDB process per copied document (table.go).
package sharded

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/exit"
	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// defaultDocuments is the default size of the benchmark: 60,000 YCSB
// documents of 1159 bytes (integer _id, the shard key), spread over the
// shards in 60 chunks.
const defaultDocuments = 60_000

// chunks is how many chunks of equal width the documents' keys are cut
// into, owned round-robin by the shards: 60 divides evenly by 1 to 6
// shards, and stays under the stand-in's 64 default chunks.
const chunks = 60

// flagSet are the flags of `ferry bench sharded`.
type flagSet struct {
	docs        int64
	fieldCount  int
	fieldLength int
	shards      []int
	rounds      int
	threads     int
	batchSize   int
	cpuProfile  string
	logLevel    string
}

const long = `sharded measures a sharded source's full copy two ways in one run, on the
same data and the same machine:

  perShard  fullSync.shardedCopy perShard (the default): each shard is read
            directly, with one group of copiers per shard (threads.readers
            each), in parallel, orphans left out by the chunk table;
  router    fullSync.shardedCopy router: everything read through mongos by
            one process.

The source is the sharded cluster stand-in (FerretDB processes: one per
shard and one as mongos, which holds config.* and a full copy of the data),
with --docs YCSB documents (integer _id, the shard key; 10 fields of 100
characters by default, 1159 bytes) in 60 chunks of equal width owned
round-robin by the shards. For each count in --shards a new cluster and a
new target are started and loaded with the same documents, so the total
stays the same and only the number of shards changes.

Each copy is a real task (mode fullAndIncremental, incremental.method oplog:
the per-shard copy applies only when replay reads the shards' oplogs;
verify none) run through engine.Open and Run; it is stopped once the copy
is done and the task streams. The copy's seconds are the engine's own
(Status().Copy.ElapsedSeconds: planning and every settling pass included);
"to streaming" runs from engine.Open to the streaming phase. Each copy's
target database is counted and dropped, and so is the checkpoint
database, so every copy finds the target empty. The two modes alternate
which goes first from one round and shard count to the next.

The CPU seconds of ferry (getrusage) and of each FerretDB process
(/proc/<pid>/stat: the router, the shards summed, the target) are reported
per copied document, and those of other processes on the machine.

What it leaves out: everything runs on one machine, so the shards, the
router, the target and ferry compete for the same cores (on two cores
three shards read in parallel cannot be three times as fast); one ferry
process copies every shard, where the operator runs one worker pod per
shard; no network; FerretDB, not MongoDB (FerretDB decodes every document
it reads and reads an _id range by scanning the whole collection, so
the copy reads each shard as one range, fullSync.split auto).

--cpuprofile writes a CPU profile of ferry during each copy
(FILE.<shards>.<mode>.<round>).`

// NewCommand returns `ferry bench sharded`.
func NewCommand() *cobra.Command {
	var f flagSet
	cmd := &cobra.Command{
		Use:   "sharded",
		Short: "A sharded source's full copy, shard by shard against through mongos, on 1 to 3 shards",
		Long:  long,
		Example: `  # Both modes on 1, 2 and 3 shards, 60,000 documents (a few minutes)
  ferry bench sharded

  # Only 3 shards, 100,000 documents, two rounds
  ferry bench sharded --shards 3 --docs 100000 --rounds 2

  # Profile ferry during each copy
  ferry bench sharded --shards 3 --cpuprofile /tmp/sharded.prof
  go tool pprof -top bin/ferry /tmp/sharded.prof.3.perShard.1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit.Bench(cmd.Context(), cmd.OutOrStdout(), run(cmd.Context(), cmd.OutOrStdout(), f))
		},
	}
	fl := cmd.Flags()
	fl.Int64Var(&f.docs, "docs", defaultDocuments, "documents in the sharded collection, whatever the number of shards")
	fl.IntVar(&f.fieldCount, "fieldcount", workload.DefaultFieldCount, "fields per document besides _id")
	fl.IntVar(&f.fieldLength, "fieldlength", workload.DefaultFieldLength, "characters per field")
	fl.IntSliceVar(&f.shards, "shards", []int{1, 2, 3}, "shard counts to measure, each on a cluster of its own")
	fl.IntVar(&f.rounds, "rounds", 1, "copies per mode and shard count; the medians are compared")
	fl.IntVar(&f.threads, "threads", config.DefaultReaders, "threads.readers and threads.writers of the copy (perShard: copiers per shard)")
	fl.IntVar(&f.batchSize, "batch-size", config.DefaultBatchSize, "cache.batchSize: documents per insert")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of ferry during each copy to FILE.<shards>.<mode>.<round>")
	fl.StringVar(&f.logLevel, "log-level", "warn", "the engine's log level on stderr: warn, or info to see each copy's planning, passes and ranges")
	return cmd
}

func (f flagSet) validate() error {
	switch {
	case f.docs < chunks:
		return fmt.Errorf("--docs must be at least %d (one per chunk), got %d", chunks, f.docs)
	case len(f.shards) == 0:
		return fmt.Errorf("--shards needs at least one shard count")
	case slices.ContainsFunc(f.shards, func(n int) bool { return n < 1 || n > chunks }):
		return fmt.Errorf("--shards: each count must be between 1 and %d, got %v", chunks, f.shards)
	case f.rounds < 1:
		return fmt.Errorf("--rounds must be at least 1, got %d", f.rounds)
	case f.threads < 1 || f.threads > 256:
		return fmt.Errorf("--threads must be between 1 and 256, got %d", f.threads)
	case f.logLevel != "warn" && f.logLevel != "info" && f.logLevel != "debug":
		return fmt.Errorf("--log-level must be warn, info or debug, got %q", f.logLevel)
	case f.batchSize < 1 || f.batchSize > 100_000:
		return fmt.Errorf("--batch-size must be between 1 and 100000, got %d", f.batchSize)
	}
	return nil
}

// workloadOptions are the documents' generator: integer _id (the
// stand-in shards on integer keys), fixed seed.
func (f flagSet) workloadOptions() workload.Options {
	return workload.Options{Database: measure.DB, Collection: measure.Collection, RecordCount: f.docs,
		FieldCount: f.fieldCount, FieldLength: f.fieldLength, KeyType: workload.KeyInt, Seed: 1}
}

// modes are the two ways of copying a sharded source, in the order the
// first round runs them.
var modes = []config.ShardedCopy{config.ShardedCopyPerShard, config.ShardedCopyRouter}

func run(ctx context.Context, out io.Writer, f flagSet) error {
	if err := f.validate(); err != nil {
		return err
	}
	o := f.workloadOptions()
	fmt.Fprintln(out, "ferry bench sharded: a sharded source's full copy, shard by shard (perShard) against through mongos (router)")
	measure.Header(out)
	printLoad(out, "at the start")
	fmt.Fprintf(out, "documents: %d x %d bytes (integer _id, the shard key; %d fields x %d characters) in %d chunks owned round-robin by the shards\n",
		f.docs, o.DocumentSize(), o.WithDefaults().FieldCount, o.WithDefaults().FieldLength, chunks)
	fmt.Fprintf(out, "copy:      mode fullAndIncremental (incremental.method oplog), verify none, %d readers and %d writers (perShard: %d copiers per shard), cache.batchSize %d, fullSync.split auto; %d round(s)\n",
		f.threads, f.threads, f.threads, f.batchSize, f.rounds)
	fmt.Fprintln(out, "leaves out: every process shares this machine's cores; one ferry copies every shard (the operator runs one worker pod per shard); no network; FerretDB, not MongoDB")

	var runs []copyRun
	others := measure.Others{}
	for _, n := range f.shards {
		rs, err := measureShards(ctx, out, f, n)
		for _, r := range rs {
			others.Add(measure.CPU{Machine: r.cpu.machine, Ferry: r.cpu.ours()}, secondsDuration(r.wall))
		}
		runs = append(runs, rs...)
		if err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	printRuns(out, runs)
	printGrowth(out, f.shards, runs)
	printLoad(out, "at the end")
	others.Print(out)
	fmt.Fprintf(out, "peak RSS of ferry: %s\n", progressBytes(procstat.SelfPeakRSS()))
	if f.cpuProfile != "" {
		fmt.Fprintf(out, "\nCPU profiles of ferry: %s.* (read with: go tool pprof -top %s %s.<shards>.<mode>.<round>)\n", f.cpuProfile, os.Args[0], f.cpuProfile)
	}
	return nil
}

// printLoad prints the machine's load averages.
func printLoad(out io.Writer, when string) {
	if l, err := procstat.LoadAverage(); err == nil {
		fmt.Fprintf(out, "load:      %s (1, 5, 15 min) %s\n", l, when)
	}
}
