package main

import (
	"context"
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

	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

type demoFlags struct {
	records  int64
	progress string
	keep     bool
}

func init() {
	var f demoFlags
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a full sync end to end on two embedded servers",
		Long: `demo starts two throwaway FerretDB servers (built by 'make ferretdb' into
bin/ferretdb), loads YCSB-style documents into the source over several
collections (one with mixed _id types, one with a unique secondary index,
one capped), copies them to the target with a progress bar, verifies the
copy with hashes and prints a summary. Everything is removed afterwards.`,
		Example: `  make demo
  ferry demo --records 20000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDemo(cmd.Context(), cmd.OutOrStdout(), f) },
	}
	cmd.Flags().Int64Var(&f.records, "records", 100_000, "documents to load into the source")
	cmd.Flags().StringVar(&f.progress, "progress", "auto", "progress output: auto, bar, log or none")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "keep the servers running until Ctrl-C, to look around")
	commands = append(commands, cmd)
}

func runDemo(ctx context.Context, out io.Writer, f demoFlags) error {
	if f.records < 100 {
		return fmt.Errorf("--records must be at least 100, got %d", f.records)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fmt.Fprintln(out, "Starting two FerretDB servers (source and target)...")
	src, err := testserver.StartProcess(ctx, testserver.Options{})
	if err != nil {
		return err
	}
	defer src.Stop()
	dst, err := testserver.StartProcess(ctx, testserver.Options{})
	if err != nil {
		return err
	}
	defer dst.Stop()
	fmt.Fprintf(out, "  source %s\n  target %s\n\n", src.Addr, dst.Addr)

	sc, err := src.Client(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = sc.Disconnect(context.Background()) }()
	loadStart := time.Now()
	loaded, err := loadDemoData(ctx, out, sc, f.records)
	if err != nil {
		return fmt.Errorf("load demo data: %w", err)
	}
	fmt.Fprintf(out, "Loaded %d documents in %.1fs\n\n", loaded, time.Since(loadStart).Seconds())

	task := &config.Task{Name: "demo", Spec: config.Spec{
		Mode:   config.ModeFull,
		Source: config.Endpoint{URI: src.URI},
		Target: config.Endpoint{URI: dst.URI},
		Verify: config.Verify{Mode: config.VerifyHash},
	}}
	task.SetDefaults()
	if err := task.Validate(); err != nil {
		return err
	}
	eng, err := engine.Open(ctx, task, engine.Options{Log: log})
	if err != nil {
		return err
	}
	defer eng.Close()
	fmt.Fprintln(out, "Copying source -> target, then verifying with hashes:")
	stop := showProgress(ctx, progressMode(f.progress), os.Stderr, slog.New(slog.NewTextHandler(os.Stderr, nil)), 5*time.Second, eng.Status)
	runErr := eng.Run(ctx)
	stop()
	st := eng.Status()
	fmt.Fprintln(out)
	if rep := eng.VerifyReport(); rep != nil {
		_ = rep.WriteTable(out)
		fmt.Fprintln(out)
	}
	printSummary(out, st, runErr)
	if f.keep && runErr == nil {
		fmt.Fprintf(out, "\nServers still running: source %s, target %s. Ctrl-C to stop.\n", src.URI, dst.URI)
		<-ctx.Done()
	}
	if runErr != nil {
		return runErr
	}
	return nil
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

func printSummary(out io.Writer, st engine.Status, runErr error) {
	c := st.Copy
	secs := c.ElapsedSeconds
	rate := 0.0
	if secs > 0 {
		rate = float64(c.CopiedThisRun) / secs
	}
	result := "OK"
	switch {
	case runErr != nil && st.Verify != nil && !st.Verify.OK:
		result = "DIFFERENCES in " + strings.Join(st.Verify.Differing, ", ")
	case runErr != nil:
		result = "FAILED: " + runErr.Error()
	case st.Verify == nil:
		result = "not run"
	}
	fmt.Fprintln(out, "Summary")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  namespace\ttarget\tdocuments\tbytes\n")
	for _, n := range c.Namespaces {
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\n", n.NS, n.Target, n.Documents, bytesHuman(n.Bytes))
	}
	_ = tw.Flush()
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  documents copied\t%d\n", c.Documents)
	fmt.Fprintf(tw, "  bytes copied\t%s\n", bytesHuman(c.Bytes))
	fmt.Fprintf(tw, "  copy seconds\t%.1f\n", secs)
	fmt.Fprintf(tw, "  docs/s\t%.0f\n", rate)
	fmt.Fprintf(tw, "  task seconds (copy + indexes + verify)\t%.1f\n", st.ElapsedSeconds)
	fmt.Fprintf(tw, "  peak buffered bytes (cache.maxBytes %s)\t%s\n", bytesHuman(c.MaxBytes), bytesHuman(c.PeakBufferedBytes))
	fmt.Fprintf(tw, "  peak memory (RSS of this process)\t%s\n", bytesHuman(peakRSS()))
	fmt.Fprintf(tw, "  verification (hash)\t%s\n", result)
	_ = tw.Flush()
}

// peakRSS is this process's peak resident set size (0 where there is no
// /proc).
func peakRSS() int64 {
	n, _ := procstat.PeakRSS("self")
	return n
}
