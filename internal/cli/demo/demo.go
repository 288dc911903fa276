// Package demo is `ferry demo`: a sync end to end on throwaway servers
// (copy under a live load, replay, verify), from a replica set or, with
// --sharded, from a 3-shard cluster stand-in (sharded.go).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/cli/servers"
	"github.com/mongoferry/mongoferry/internal/ferretdb"
	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// demoOplogMiB is the source's oplog size in the demo. The live load's
// changes take about 10 KiB/s, so it holds well over an hour of them, and
// a slow copy on a busy machine stays far inside the window; only what it
// holds is scanned, so a large cap costs nothing.
const demoOplogMiB = 64

// demoFlags are the flags of `ferry demo`.
type demoFlags struct {
	records  int64
	progress string
	keep     bool
	liveRate float64
	oplogMiB int64
	sharded  bool
	filter   bool
}

// The --filter demo's split: the live collection's documents whose
// field0 sorts before "a" (its upper-case letters, digits, '-' and '_':
// about 60%), which the live load's updates move in and out.
const (
	filterNS    = "app.sessions"
	filterQuery = `{"field0": {"$lt": "a"}}`
)

// NewCommand returns `ferry demo`.
func NewCommand() *cobra.Command {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a sync end to end on two embedded servers: copy, live replay, verify",
		Long: `demo starts two throwaway FerretDB servers (built by 'make ferretdb' into
bin/ferretdb), loads YCSB-style documents into the source over several
collections (one with mixed _id types, one with a unique secondary index,
one capped), copies them to the target with a progress bar while a live
load (inserts, updates, deletes) runs on the source, replays the oplog,
stops the load, catches up, verifies with hashes and prints a summary.
Everything is removed afterwards.

With --sharded the source is a 3-shard cluster stand-in: three FerretDB
servers as shards (each with its own oplog), one as mongos holding the
union of their documents, a router placing documents by _id range, and a
balancer moving chunks between shards during the live load. The copy reads
through the mongos stand-in; one replay subtask per shard tails its oplog
and skips the migrations' fromMigrate entries.`,
		Example: `  make demo
  ferry demo --records 20000
  ferry demo --sharded
  ferry demo --filter`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDemo(cmd.Context(), cmd.OutOrStdout(), f) },
	}
	cmd.Flags().Int64Var(&f.records, "records", 100_000, "documents to load into the source")
	cmd.Flags().StringVar(&f.progress, "progress", "auto", "progress output: auto, bar, log or none")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "keep the servers running until Ctrl-C, to look around")
	cmd.Flags().Float64Var(&f.liveRate, "live-rate", 30, "operations per second of the live load on the source (0: none)")
	cmd.Flags().Int64Var(&f.oplogMiB, "oplog-size", demoOplogMiB, "capped size of the source's oplog in MiB: it must hold every change the live load makes while the copy runs")
	cmd.Flags().BoolVar(&f.sharded, "sharded", false, "a sharded source: 3 shards, chunk migrations during the live load")
	cmd.Flags().BoolVar(&f.filter, "filter", false, "split part of the live collection out (namespaces.filters: "+filterNS+" documents with "+filterQuery+"), and show that no other document reached the target")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer, f demoFlags) error {
	if f.records < 100 {
		return fmt.Errorf("--records must be at least 100, got %d", f.records)
	}
	if f.oplogMiB < 1 {
		return fmt.Errorf("--oplog-size must be at least 1 (MiB), got %d", f.oplogMiB)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if f.sharded && f.filter {
		return errors.New("--filter runs on the replica-set demo only: leave out --sharded")
	}
	if f.sharded {
		return runShardedDemo(ctx, out, log, f)
	}
	fmt.Fprintln(out, "Starting two FerretDB servers (source and target)...")
	// The source's oplog is created after the initial load, as on a
	// deployment whose oplog holds recent changes only.
	pair, err := servers.StartPair(ctx, -1)
	if err != nil {
		return err
	}
	defer pair.Stop()
	src, dst := pair.Source, pair.Target
	fmt.Fprintf(out, "  source %s\n  target %s\n\n", src.Addr, dst.Addr)

	sc, err := src.Client(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = sc.Disconnect(context.Background()) }()
	live, err := prepareSource(ctx, out, src, sc, f)
	if err != nil {
		return err
	}

	eng, err := openTask(ctx, "demo", config.Endpoint{URI: src.URI}, dst, log, demoFilters(out, f)...)
	if err != nil {
		return err
	}
	defer eng.Close()

	// Live inserts, updates and deletes while the copy runs and after it.
	var liveStats workload.Stats
	stopLoad := startLoad(ctx, f.liveRate, func(ctx context.Context) error {
		run := live
		run.Workload, run.Distribution, run.Threads, run.Rate = workload.WorkloadMixed, workload.Uniform, 2, f.liveRate
		run.InsertProportion, run.UpdateProportion, run.DeleteProportion = 0.4, 0.4, 0.2
		liveStats, _ = workload.Run(ctx, sc, run)
		return nil
	})
	defer func() { _ = stopLoad() }()
	if f.liveRate > 0 {
		fmt.Fprintf(out, "Copying source -> target while a live load (~%g ops/s: inserts, updates, deletes) runs on app.sessions;\n", f.liveRate)
		fmt.Fprintln(out, "then replaying the oplog, stopping the load, catching up and verifying with hashes:")
	} else {
		fmt.Fprintln(out, "Copying source -> target with no live load (--live-rate 0), then replaying the oplog until caught up")
		fmt.Fprintln(out, "and verifying with hashes:")
	}
	stop, runDone := start(ctx, eng, f.progress)

	timing, runErr := awaitDemo(eng, runDone, func() workload.Stats {
		_ = stopLoad()
		return liveStats
	})
	stop()
	st := eng.Status()
	printReport(out, eng)
	printSummary(out, st, timing, runErr)
	if f.filter && runErr == nil {
		if runErr = reportFilter(ctx, out, sc, dst); runErr != nil {
			return runErr
		}
	}
	if errors.Is(runErr, source.ErrOplogWindowLost) {
		fmt.Fprintf(out, "\nThe source's oplog (%d MiB) no longer held the changes made during the copy: run the demo again with a larger --oplog-size.\n", f.oplogMiB)
	}
	if f.keep && runErr == nil {
		fmt.Fprintf(out, "\nServers still running: source %s, target %s. Ctrl-C to stop.\n", src.URI, dst.URI)
		<-ctx.Done()
	}
	return runErr
}

// demoTiming records the demo's replay milestones.
type demoTiming struct {
	streamingAt, loadStoppedAt, caughtUpAt time.Time
	load                                   workload.Stats
	replay                                 *replay.Status
}

// loadDemoData fills the source: shop.orders (YCSB documents), shop.customers
// (unique email index), app.mixed (mixed _id types) and logs.events
// (capped).
func loadDemoData(ctx context.Context, out io.Writer, c *mongo.Client, records int64) (int64, error) {
	orders := records * 55 / 100
	customers := records * 20 / 100
	mixed := records * 15 / 100
	events := records - orders - customers - mixed

	fmt.Fprintf(out, "Loading %d documents into the source:\n", records)
	fmt.Fprintf(out, "  shop.orders     %7d  YCSB records, 10 fields of 50 bytes\n", orders)
	if _, err := workload.Load(ctx, c, workload.Options{Database: "shop", Collection: "orders", RecordCount: orders,
		FieldCount: 10, FieldLength: 50, Threads: 2, BatchSize: 1000, Seed: 1}); err != nil {
		return 0, err
	}

	fmt.Fprintf(out, "  shop.customers  %7d  unique secondary index on email\n", customers)
	cust := c.Database("shop").Collection("customers")
	if _, err := cust.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "email", Value: 1}},
		Options: options.Index().SetName("email_unique").SetUnique(true)}); err != nil {
		return 0, err
	}
	if err := insertGenerated(ctx, cust, customers, func(i int64) bson.D {
		return bson.D{{Key: "_id", Value: i}, {Key: "email", Value: "customer" + strconv.FormatInt(i, 10) + "@example.com"},
			{Key: "name", Value: "Customer " + strconv.FormatInt(i, 10)}, {Key: "tier", Value: []string{"gold", "silver", "bronze"}[i%3]}}
	}); err != nil {
		return 0, err
	}

	fmt.Fprintf(out, "  app.mixed       %7d  _ids of mixed types: int, long, double, string, ObjectId, document\n", mixed)
	if err := insertGenerated(ctx, c.Database("app").Collection("mixed"), mixed, func(i int64) bson.D {
		var id any
		switch i % 6 {
		case 0:
			id = int32(i)
		case 1:
			id = i * 1_000_003
		case 2:
			id = float64(i) + 0.5
		case 3:
			id = fmt.Sprintf("key-%08d", i)
		case 4:
			id = bson.NewObjectID()
		default:
			id = bson.D{{Key: "region", Value: fmt.Sprintf("r%02d", i%11)}, {Key: "seq", Value: i}}
		}
		return bson.D{{Key: "_id", Value: id}, {Key: "n", Value: i}, {Key: "note", Value: strings.Repeat("m", int(i%64))}}
	}); err != nil {
		return 0, err
	}

	fmt.Fprintf(out, "  logs.events     %7d  capped collection (64MiB)\n", events)
	if err := c.Database("logs").RunCommand(ctx, bson.D{{Key: "create", Value: "events"}, {Key: "capped", Value: true},
		{Key: "size", Value: int64(64 << 20)}}).Err(); err != nil {
		return 0, err
	}
	if err := insertGenerated(ctx, c.Database("logs").Collection("events"), events, func(i int64) bson.D {
		return bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "level", Value: []string{"info", "warn", "error"}[i%3]},
			{Key: "at", Value: time.Unix(1_700_000_000+i, 0).UTC()}, {Key: "msg", Value: "event number " + strconv.FormatInt(i, 10)}}
	}); err != nil {
		return 0, err
	}
	return records, nil
}

func insertGenerated(ctx context.Context, coll *mongo.Collection, n int64, gen func(int64) bson.D) error {
	const batch = 1000
	for start := int64(0); start < n; start += batch {
		docs := make([]any, 0, batch)
		for i := start; i < min(start+batch, n); i++ {
			docs = append(docs, gen(i))
		}
		if _, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
			return fmt.Errorf("insert into %s: %w", coll.Name(), err)
		}
	}
	return nil
}

func printSummary(out io.Writer, st engine.Status, timing demoTiming, runErr error) {
	c := st.Copy
	secs := c.ElapsedSeconds
	rate := 0.0
	if secs > 0 {
		rate = float64(c.CopiedThisRun) / secs
	}
	fmt.Fprintln(out, "Summary")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  namespace\ttarget\tdocuments copied\tbytes\n")
	for _, n := range c.Namespaces {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", n.NS, n.Target, n.Documents, progress.Bytes(n.Bytes))
	}
	_ = tw.Flush()
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  full copy\t%d documents, %s in %.1fs: %.0f docs/s\n", c.Documents, progress.Bytes(c.Bytes), secs, rate)
	if r := timing.replay; r != nil && !timing.loadStoppedAt.IsZero() {
		applied := progress.Applied(r)
		streamSecs := timing.caughtUpAt.Sub(timing.streamingAt).Seconds()
		fmt.Fprintf(tw, "  live load on the source\t%d ops (%d inserts, %d updates, %d deletes) at %.0f ops/s\n",
			timing.load.Inserts+timing.load.Updates+timing.load.Deletes, timing.load.Inserts, timing.load.Updates, timing.load.Deletes, timing.load.OpsPerSec)
		fmt.Fprintf(tw, "  replay\t%d ops applied in %.1fs of streaming: %.0f ops/s (%d overlap conflicts stepped over)\n",
			applied, streamSecs, float64(applied)/max(streamSecs, 0.001), r.ToleratedConflicts)
		fmt.Fprintf(tw, "  catch-up after the load stopped\t%.1fs (lag now %s)\n", timing.caughtUpAt.Sub(timing.loadStoppedAt).Seconds(), r.LagText())
	}
	fmt.Fprintf(tw, "  task seconds (copy + replay + verify)\t%.1f\n", st.ElapsedSeconds)
	fmt.Fprintf(tw, "  peak buffered bytes (cache.maxBytes %s, %s of it for queued documents)\t%s\n",
		progress.Bytes(c.MaxBytes), progress.Bytes(c.QueueBudgetBytes), progress.Bytes(c.PeakBufferedBytes))
	fmt.Fprintf(tw, "  peak memory (RSS of this process)\t%s\n", progress.Bytes(procstat.SelfPeakRSS()))
	fmt.Fprintf(tw, "  verification (hash)\t%s\n", verdict(st, runErr))
	_ = tw.Flush()
}

// awaitDemo waits for the task to stream, lets it replay under the live
// load for 10 seconds, stops the load (stopLoad returns what it did), and
// waits for the task to catch up, verify and end.
func awaitDemo(eng *engine.Engine, runDone <-chan error, stopLoad func() workload.Stats) (demoTiming, error) {
	var timing demoTiming
	for {
		select {
		case err := <-runDone:
			return timing, fmt.Errorf("the task ended early: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
		if eng.Status().Phase == engine.PhaseStreaming {
			break
		}
	}
	timing.streamingAt = time.Now()
	select { // replay under load for a while
	case err := <-runDone:
		return timing, err
	case <-time.After(10 * time.Second):
	}
	timing.load = stopLoad()
	timing.loadStoppedAt = time.Now()
	eng.FinishWhenCaughtUp()
	for {
		select {
		case err := <-runDone:
			return timing, err
		case <-time.After(100 * time.Millisecond):
		}
		if timing.caughtUpAt.IsZero() && eng.Status().Phase == engine.PhaseVerifying {
			timing.caughtUpAt = time.Now()
			timing.replay = eng.Status().Replay
		}
	}
}

// prepareSource loads the demo's documents and the live collection into
// the source, then creates its oplog, as on a deployment whose oplog
// holds recent changes only. It returns the live load's options.
func prepareSource(ctx context.Context, out io.Writer, src *ferretdb.Server, sc *mongo.Client, f demoFlags) (workload.Options, error) {
	loadStart := time.Now()
	loaded, err := loadDemoData(ctx, out, sc, f.records)
	if err != nil {
		return workload.Options{}, fmt.Errorf("load demo data: %w", err)
	}
	fmt.Fprintf(out, "Loaded %d documents in %.1fs\n\n", loaded, time.Since(loadStart).Seconds())

	// A small collection takes the live load: FerretDB finds a document by
	// _id with a scan, so replay keeps up on small collections only.
	live := workload.Options{Database: "app", Collection: "sessions", RecordCount: 2000, FieldCount: 4, FieldLength: 40, Seed: 2}
	if _, err := workload.Load(ctx, sc, live); err != nil {
		return workload.Options{}, fmt.Errorf("load app.sessions: %w", err)
	}

	if err := src.CreateOplog(ctx, f.oplogMiB<<20); err != nil {
		return workload.Options{}, err
	}
	return live, nil
}

// demoFilters returns the task's filters: the --filter demo's split, said
// on out, or none.
func demoFilters(out io.Writer, f demoFlags) []config.Filter {
	if !f.filter {
		return nil
	}
	fmt.Fprintf(out, "Only the documents of %s matching %s are copied and kept in sync (namespaces.filters);\nthe other namespaces are copied whole.\n\n", filterNS, filterQuery)
	return []config.Filter{{Namespace: filterNS, Query: config.Query(filterQuery)}}
}

// reportFilter shows what the --filter demo's target holds of the split
// collection: every source document the filter selects, and none of the
// others. It fails when the target holds one the filter leaves out.
func reportFilter(ctx context.Context, out io.Writer, sc *mongo.Client, dst *ferretdb.Server) error {
	dc, err := dst.Client(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = dc.Disconnect(context.Background()) }()
	var query bson.D
	if err := bson.UnmarshalExtJSON([]byte(filterQuery), false, &query); err != nil {
		return err
	}
	not := bson.D{{Key: "$nor", Value: bson.A{query}}}
	db, coll, _ := strings.Cut(filterNS, ".")
	count := func(c *mongo.Client, f bson.D) (int64, error) {
		return c.Database(db).Collection(coll).CountDocuments(ctx, f)
	}
	kept, err := count(sc, query)
	if err != nil {
		return err
	}
	left, err := count(sc, not)
	if err != nil {
		return err
	}
	onTarget, err := count(dc, query)
	if err != nil {
		return err
	}
	others, err := count(dc, not)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nFilter %s on %s\n", filterQuery, filterNS)
	fmt.Fprintf(out, "  source: %d documents match, %d do not\n", kept, left)
	fmt.Fprintf(out, "  target: %d documents, all matching; %d of the others\n", onTarget, others)
	if others != 0 || onTarget != kept {
		return fmt.Errorf("the target's %s holds %d documents the filter leaves out and %d of the %d it selects", filterNS, others, onTarget, kept)
	}
	return nil
}
