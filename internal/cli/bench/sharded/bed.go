package sharded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/cli/bench/measure"
	"github.com/mongoferry/mongoferry/internal/cli/progress"
	"github.com/mongoferry/mongoferry/internal/cli/servers"
	"github.com/mongoferry/mongoferry/internal/ferretdb"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// bed is one shard count's test bed: a cluster stand-in loaded with the
// documents, and a target.
type bed struct {
	c      *ferretdb.Cluster
	dst    *ferretdb.Server
	target *mongo.Client
	log    *slog.Logger
}

// copyRun is one measured copy.
type copyRun struct {
	shards int
	mode   config.ShardedCopy
	round  int
	docs   int64
	// seconds is the copy's own elapsed time (Status().Copy), planning
	// its part before the first collection's copying stage; streaming
	// runs from engine.Open to the streaming phase; wall to the end of
	// Run.
	seconds, planning, streaming, wall float64
	cpu                                procCPU
	// commands are the find and getMore commands the router and the
	// shards (summed) served during the copy.
	routerCmds, shardCmds map[string]int64
}

func (r copyRun) rate() float64 { return measure.Div(float64(r.docs), r.seconds) }

// startBed starts a cluster of n shards and a target and loads the
// documents through the router.
func startBed(ctx context.Context, out io.Writer, f flagSet, n int) (*bed, error) {
	c, err := ferretdb.StartClusterProcess(ctx, n)
	if err != nil {
		return nil, fmt.Errorf("start a cluster of %d shards: %w", n, err)
	}
	b := &bed{c: c, log: f.logger()}
	// Chunks of equal width over the keys 0..docs-1, round-robin.
	c.ChunkSize = (f.docs + chunks - 1) / chunks
	if b.dst, err = servers.StartTarget(ctx); err != nil {
		b.stop()
		return nil, err
	}
	if b.target, err = b.dst.Client(ctx); err != nil {
		b.stop()
		return nil, fmt.Errorf("connect to the target: %w", err)
	}
	addrs := make([]string, n)
	for i, s := range c.Shards {
		addrs[i] = c.Names[i] + " " + s.Addr
	}
	fmt.Fprintf(out, "\n%d shard(s): %s; mongos %s; target %s (%s, SQLite)\n", n, strings.Join(addrs, ", "), c.Router.Addr, b.dst.Addr, servers.Version(ctx))
	if err := b.load(ctx, out, f); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

// load inserts the documents through the router (to the router and to
// their shards) and empties the shards' oplogs.
func (b *bed) load(ctx context.Context, out io.Writer, f flagSet) error {
	o := f.workloadOptions()
	start := time.Now()
	ns := measure.DB + "." + measure.Collection
	batch := make([]bson.D, 0, 1000)
	for k := int64(0); k < f.docs; k++ {
		var d bson.D
		if err := bson.Unmarshal(o.Document(k), &d); err != nil {
			return fmt.Errorf("document %d: %w", k, err)
		}
		batch = append(batch, d)
		if len(batch) == cap(batch) || k == f.docs-1 {
			if err := b.c.Insert(ctx, ns, batch...); err != nil {
				return fmt.Errorf("load: %w", err)
			}
			batch = batch[:0]
		}
	}
	if err := b.c.ResetOplogs(ctx); err != nil {
		return err
	}
	per := make([]string, len(b.c.Shards))
	for i := range b.c.Shards {
		n, err := b.c.ShardClient(i).Database(measure.DB).Collection(measure.Collection).EstimatedDocumentCount(ctx)
		if err != nil {
			return fmt.Errorf("count %s on %s: %w", ns, b.c.Names[i], err)
		}
		per[i] = fmt.Sprintf("%s %d", b.c.Names[i], n)
	}
	el := time.Since(start).Seconds()
	fmt.Fprintf(out, "loaded %d documents through the router in %.1fs (%s docs/s): %s\n", f.docs, el, progress.Count(int64(measure.Div(float64(f.docs), el))), strings.Join(per, ", "))
	return nil
}

// logger is the engine's logger: measure.Logger, or the --log-level
// asked for on stderr.
func (f flagSet) logger() *slog.Logger {
	if f.logLevel == "warn" {
		return measure.Logger()
	}
	var l slog.Level
	_ = l.UnmarshalText([]byte(f.logLevel))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

func (b *bed) stop() {
	if b.target != nil {
		_ = b.target.Disconnect(context.Background())
	}
	if b.dst != nil {
		b.dst.Stop()
	}
	b.c.Stop()
}

// task is one copy of bench.usertable into db.
func (b *bed) task(f flagSet, mode config.ShardedCopy, name, db string) (*config.Task, error) {
	task := &config.Task{Name: name, Spec: config.Spec{
		Mode:        config.ModeFullAndIncremental,
		Source:      b.c.Source(),
		Target:      config.Endpoint{URI: b.dst.URI},
		Incremental: config.Incremental{Method: config.MethodOplog},
		Namespaces: config.Namespaces{
			Include: []string{regexp.QuoteMeta(measure.DB + "." + measure.Collection)},
			Rename:  []config.Rename{{From: measure.DB, To: db}},
		},
		Threads:  config.Threads{Readers: f.threads, Writers: f.threads},
		Cache:    config.Cache{BatchSize: f.batchSize},
		FullSync: config.FullSync{ShardedCopy: mode},
		Verify:   config.Verify{Mode: config.VerifyNone},
	}}
	task.SetDefaults()
	if err := task.Validate(); err != nil {
		return nil, fmt.Errorf("copy task %s: %w", name, err)
	}
	return task, nil
}

// measureShards starts a bed of n shards and runs every round of both
// modes on it, alternating which mode goes first.
func measureShards(ctx context.Context, out io.Writer, f flagSet, n int) ([]copyRun, error) {
	b, err := startBed(ctx, out, f, n)
	if err != nil {
		return nil, err
	}
	defer b.stop()
	var runs []copyRun
	for r := 1; r <= f.rounds; r++ {
		order := modes
		if (r+n)%2 == 1 {
			order = []config.ShardedCopy{modes[1], modes[0]}
		}
		for _, m := range order {
			run, err := b.copy(ctx, f, m, r)
			if err != nil {
				return runs, err
			}
			fmt.Fprintf(out, "%d shard(s), %-8s round %d: %d docs in %.2fs = %s docs/s (planning %.2fs; to streaming %.2fs); CPU per doc: ferry %.1f µs, shards %.1f µs, router %.1f µs, target %.1f µs\n",
				n, m, r, run.docs, run.seconds, progress.Count(int64(run.rate())), run.planning, run.streaming,
				run.perDoc(run.cpu.ferry), run.perDoc(run.cpu.shardSum()), run.perDoc(run.cpu.router), run.perDoc(run.cpu.target))
			runs = append(runs, run)
		}
	}
	return runs, nil
}

// copy runs one copy task until it streams, then stops it, checks the
// target and drops what the copy wrote.
func (b *bed) copy(ctx context.Context, f flagSet, mode config.ShardedCopy, round int) (copyRun, error) {
	n := len(b.c.Shards)
	res := copyRun{shards: n, mode: mode, round: round}
	db := fmt.Sprintf("bench_%s_%d_%d", strings.ToLower(string(mode)), n, round)
	task, err := b.task(f, mode, fmt.Sprintf("bench-sharded-%s-%d-%d-%d", mode, n, round, time.Now().Unix()), db)
	if err != nil {
		return res, err
	}
	if f.cpuProfile != "" {
		stop, err := measure.StartCPUProfile(fmt.Sprintf("%s.%d.%s.%d", f.cpuProfile, n, mode, round))
		if err != nil {
			return res, err
		}
		defer stop()
	}
	cmds0 := b.commands()
	cpu0 := b.sample()
	start := time.Now()
	if err := b.runUntilStreaming(ctx, task, &res); err != nil {
		return res, fmt.Errorf("%d shard(s), %s round %d: %w", n, mode, round, err)
	}
	res.wall = time.Since(start).Seconds()
	res.cpu = b.sample().sub(cpu0)
	cmds1 := b.commands()
	res.routerCmds, res.shardCmds = diffCommands(cmds1[0], cmds0[0]), map[string]int64{}
	for i := 1; i < len(cmds1); i++ {
		for k, v := range diffCommands(cmds1[i], cmds0[i]) {
			res.shardCmds[k] += v
		}
	}
	if res.docs != f.docs {
		return res, fmt.Errorf("%d shard(s), %s round %d: copied %d documents, want %d", n, mode, round, res.docs, f.docs)
	}
	if err := b.checkAndDrop(ctx, db, f.docs); err != nil {
		return res, err
	}
	if err := b.target.Database(task.Checkpoint.Database).Drop(ctx); err != nil {
		return res, fmt.Errorf("drop the checkpoint database: %w", err)
	}
	return res, nil
}

// runUntilStreaming opens and runs task, and stops it once it streams
// (its copy done); it fills in the copy's documents and seconds.
func (b *bed) runUntilStreaming(ctx context.Context, task *config.Task, res *copyRun) error {
	start := time.Now()
	e, err := engine.Open(ctx, task, engine.Options{Log: b.log})
	if err != nil {
		return err
	}
	defer e.Close()
	watch := sync.OnceValue(measure.WatchCopy(e))
	defer watch()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(rctx) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("the task ended before it streamed")
			}
			return err
		case <-tick.C:
		}
		if st := e.Status(); st.Phase == engine.PhaseStreaming {
			res.streaming = time.Since(start).Seconds()
			res.docs, res.seconds = st.Copy.Documents, st.Copy.ElapsedSeconds
			if at := watch().CopyingAt; !at.IsZero() {
				res.planning = at.Sub(st.Copy.StartedAt).Seconds()
			}
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
	}
}

// checkAndDrop checks that db.usertable holds want documents on the
// target (collStats: a count reads every document on FerretDB), then
// drops db.
func (b *bed) checkAndDrop(ctx context.Context, db string, want int64) error {
	var stats struct {
		Count int64 `bson:"count"`
	}
	if err := b.target.Database(db).RunCommand(ctx, bson.D{{Key: "collStats", Value: measure.Collection}}).Decode(&stats); err != nil {
		return fmt.Errorf("count %s.%s: %w", db, measure.Collection, err)
	}
	if stats.Count != want {
		return fmt.Errorf("%s.%s holds %d documents, want %d", db, measure.Collection, stats.Count, want)
	}
	if err := b.target.Database(db).Drop(ctx); err != nil {
		return fmt.Errorf("drop %s: %w", db, err)
	}
	return nil
}

// commands are the request counters of the router (first) and of each
// shard.
func (b *bed) commands() []map[string]int64 {
	out := []map[string]int64{measure.ServerCommands(b.c.Router.DebugAddr)}
	for _, s := range b.c.Shards {
		out = append(out, measure.ServerCommands(s.DebugAddr))
	}
	return out
}

// diffCommands is the commands served between two readings.
func diffCommands(now, before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range now {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
