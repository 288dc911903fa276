package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/cli/servers"
	"github.com/mongoferry/mongoferry/internal/ferretdb"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// runShardedDemo is `ferry demo --sharded`: a 3-shard cluster stand-in
// (see ferretdb.Cluster), a live load with chunk migrations, a
// fullAndIncremental task with one subtask per shard, verification.
func runShardedDemo(ctx context.Context, out io.Writer, log *slog.Logger, f demoFlags) error {
	const shards = 3
	records := f.records
	fmt.Fprintf(out, "Starting a sharded cluster stand-in: %d FerretDB shards, one FerretDB server as mongos, and a target...\n", shards)
	c, err := ferretdb.StartClusterProcess(ctx, shards)
	if err != nil {
		return err
	}
	defer c.Stop()
	dst, err := servers.StartTarget(ctx)
	if err != nil {
		return err
	}
	defer dst.Stop()
	// Chunks of 60 keys, spread round-robin over the shards.
	c.ChunkSize = 60
	for i, s := range c.Shards {
		fmt.Fprintf(out, "  %s %s\n", c.Names[i], s.Addr)
	}
	fmt.Fprintf(out, "  mongos %s\n  target %s\n\n", c.Router.Addr, dst.Addr)

	const ns, sessions = "app.sessions", 1500
	keys, err := loadShardedDemo(ctx, out, c, records, ns, sessions)
	if err != nil {
		return err
	}

	eng, err := openTask(ctx, "demo-sharded", c.Source(), dst, log)
	if err != nil {
		return err
	}
	defer eng.Close()

	rate := f.liveRate
	load := ferretdb.NewClusterLoad(c, ns, keys, sessions, rate)
	stopLoad := startLoad(ctx, rate, func(ctx context.Context) error {
		return load.Run(ctx, rand.New(rand.NewPCG(2, 2)))
	})
	defer func() { _ = stopLoad() }()
	fmt.Fprintf(out, "Copying shard by shard (each shard read directly, orphans left out) while a live load (~%g ops/s on %s) runs through the router;\n", rate, ns)
	fmt.Fprintln(out, "then one replay subtask per shard while the balancer moves chunks, stopping the load, catching up and verifying with hashes:")
	stop, runDone := start(ctx, eng, f.progress)

	migrations, runErr := migrateWhileStreaming(ctx, eng, runDone, c, load, ns, sessions, stopLoad)
	stop()
	st := eng.Status()
	printReport(out, eng)
	printShardedSummary(out, st, load, migrations, runErr)
	return runErr
}

func printShardedSummary(out io.Writer, st engine.Status, load *ferretdb.ClusterLoad, migrations []string, runErr error) {
	fmt.Fprintln(out, "Summary")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  full copy (shard by shard)\t%d documents in %.1fs\n", st.Copy.Documents, st.Copy.ElapsedSeconds)
	ins, upd, del := load.Counts()
	fmt.Fprintf(tw, "  live load through the router\t%d inserts, %d updates, %d deletes\n", ins, upd, del)
	for _, m := range migrations {
		fmt.Fprintf(tw, "  chunk migration\t%s\n", m)
	}
	_ = tw.Flush()
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  shard\tphase\tapplied ops\tfromMigrate skipped\tcheckpoint\n")
	for _, sh := range st.Shards {
		if sh.Replay == nil {
			fmt.Fprintf(tw, "  %s\t%s\t-\t-\t-\n", sh.Shard, sh.Phase)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\n", sh.Shard, sh.Phase, progress.Applied(sh.Replay), sh.Replay.Skipped["fromMigrate"], progress.CheckpointText(sh.Replay, time.TimeOnly))
	}
	_ = tw.Flush()
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  task seconds (copy + replay + verify)\t%.1f\n", st.ElapsedSeconds)
	fmt.Fprintf(tw, "  verification (hash)\t%s\n", verdict(st, runErr))
	_ = tw.Flush()
}

// loadSharded inserts n documents with keys 0..n-1 through the router.
func loadSharded(ctx context.Context, c *ferretdb.Cluster, ns string, n int64, gen func(int64) bson.D) ([]int64, error) {
	keys := make([]int64, 0, n)
	for start := int64(0); start < n; start += 1000 {
		batch := make([]bson.D, 0, 1000)
		for k := start; k < min(start+1000, n); k++ {
			batch = append(batch, gen(k))
			keys = append(keys, k)
		}
		if err := c.Insert(ctx, ns, batch...); err != nil {
			return nil, fmt.Errorf("load %s: %w", ns, err)
		}
	}
	return keys, nil
}

// loadShardedDemo loads the demo's documents through the router and
// empties the shards' oplogs. shop.orders is copied; ns, small because
// FerretDB finds a document by _id with a scan, takes the live load and
// the migrations. It returns ns's keys.
func loadShardedDemo(ctx context.Context, out io.Writer, c *ferretdb.Cluster, records int64, ns string, sessions int64) ([]int64, error) {
	loadStart := time.Now()
	if _, err := loadSharded(ctx, c, copiedNS, records, func(k int64) bson.D {
		return bson.D{{Key: "_id", Value: k}, {Key: "customer", Value: fmt.Sprintf("c%05d", k%9973)},
			{Key: "total", Value: float64(k%500) + 0.99}, {Key: "note", Value: strings.Repeat("x", int(k%40))}}
	}); err != nil {
		return nil, err
	}
	keys, err := loadSharded(ctx, c, ns, sessions, func(k int64) bson.D {
		return bson.D{{Key: "_id", Value: k}, {Key: "user", Value: fmt.Sprintf("u%04d", k)}, {Key: "v", Value: 0}}
	})
	if err != nil {
		return nil, err
	}
	if err := c.ResetOplogs(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "Loaded %d documents into shop.orders and %d into %s through the router in %.1fs (shard key _id, chunks of %d keys)\n\n",
		records, sessions, ns, time.Since(loadStart).Seconds(), c.ChunkSize)
	return keys, nil
}

// copiedNS is the demo's large collection: copied, not written.
const copiedNS = "shop.orders"

// migrateWhileStreaming waits for the task to stream, then moves a chunk
// of ns to another shard than its owner every few seconds under the live
// load (four in all), stops the load and waits for the task to end. It
// returns the migrations, described.
func migrateWhileStreaming(ctx context.Context, eng *engine.Engine, runDone <-chan error, c *ferretdb.Cluster, load *ferretdb.ClusterLoad, ns string, sessions int64, stopLoad func() error) ([]string, error) {
	var migrations []string
	rng := rand.New(rand.NewPCG(3, 3))
	for eng.Status().Phase != engine.PhaseStreaming {
		select {
		case err := <-runDone:
			return nil, fmt.Errorf("the task ended early: %w", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Streaming under load: a migration every few seconds, each a
	// chunk to another shard than its owner.
	for i := 0; i < 4; i++ {
		select {
		case err := <-runDone:
			return migrations, err
		case <-time.After(3 * time.Second):
		}
		chunk := rng.Int64N((sessions + c.ChunkSize - 1) / c.ChunkSize)
		lo, hi := chunk*c.ChunkSize, (chunk+1)*c.ChunkSize
		from := c.Owner(ns, lo)
		to := (from + 1 + rng.IntN(len(c.Shards)-1)) % len(c.Shards)
		n, err := load.Move(ctx, lo, hi, to)
		if err != nil {
			return migrations, err
		}
		migrations = append(migrations, fmt.Sprintf("[%d,%d) %s -> %s: %d documents", lo, hi, c.Names[from], c.Names[to], n))
	}
	time.Sleep(3 * time.Second)
	if err := stopLoad(); err != nil {
		return migrations, fmt.Errorf("live load: %w", err)
	}
	eng.FinishWhenCaughtUp()
	return migrations, <-runDone
}
