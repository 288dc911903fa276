package wirebench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/wiresim"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/replay/replaybench"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// Config is one round.
type Config struct {
	// Ops is the number of oplog entries; the pool's size when zero.
	Ops int64
	// Writers is threads.writers; BatchSize is cache.batchSize; both take
	// the task defaults when zero.
	Writers, BatchSize int
	// ReadBatch is the tailer's entries per read (its cursor's batch
	// size); the tailer's default when zero.
	ReadBatch int
	// Delay is how long the target waits before acknowledging each write
	// command.
	Delay time.Duration
	// MaxWireVersion is what both servers report; wiresim's default (8.0)
	// when zero.
	MaxWireVersion int32
	// Log receives the engine's logs; discarded when nil.
	Log *slog.Logger
}

// Result is what one round measured.
type Result struct {
	// Ops are the entries replayed; Elapsed runs from the start of the
	// replayer until the target acknowledged the last write.
	Ops     int64
	Elapsed time.Duration
	// Target are the writes the target acknowledged in the replayed
	// database (checkpoint saves left out).
	Target wiresim.Counts
	// Source is what the source served: finds, getMores, entries.
	Source wiresim.Stats
	// CPU is this process's CPU time (user and system) during the round:
	// the engine, the driver and both servers.
	CPU time.Duration
	// Mallocs and AllocBytes are the process's heap allocations during
	// the round; GCs its collections.
	Mallocs, AllocBytes uint64
	GCs                 uint32
	// Writers and BatchSize are the values used.
	Writers, BatchSize int
}

// OpsPerSecond is the replay rate.
func (r Result) OpsPerSecond() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }

// WritesPerCommand is the writes the target received per write command.
func (r Result) WritesPerCommand() float64 {
	if r.Target.Commands == 0 {
		return 0
	}
	return float64(r.Target.Writes) / float64(r.Target.Commands)
}

// WaitPerCommand is the mean time a write command spent in the target's
// delay, as measured.
func (r Result) WaitPerCommand() time.Duration {
	return r.Target.Waited / time.Duration(max(r.Target.Commands, 1))
}

// CPUPerOp is the CPU time per entry, servers included.
func (r Result) CPUPerOp() time.Duration { return r.CPU / time.Duration(max(r.Ops, 1)) }

// AllocsPerOp is the heap allocations per entry, servers included.
func (r Result) AllocsPerOp() float64 { return float64(r.Mallocs) / float64(max(r.Ops, 1)) }

// Run starts a source server serving c.Ops entries of in as its oplog and
// a target server, connects to both as the engine does (ping, distinct
// deployments, buildInfo), and replays the oplog with a source.Tailer and
// a replay.Replayer that checkpoints to the target. It ends once the
// target acknowledged every write, then checks the counts and that the
// checkpoint reached the last entry.
func Run(ctx context.Context, in *replaybench.Input, c Config) (Result, error) {
	spec := config.Spec{Threads: config.Threads{Writers: c.Writers}, Cache: config.Cache{BatchSize: c.BatchSize}}
	spec.SetDefaults()
	ops := c.Ops
	if ops <= 0 {
		ops = int64(len(in.Entries))
	}
	res := Result{Ops: ops, Writers: spec.Threads.Writers, BatchSize: spec.Cache.BatchSize}
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		return res, err
	}
	db, err := database(in)
	if err != nil {
		return res, err
	}
	o, err := wiresim.GeneratedOplog(in, ops)
	if err != nil {
		return res, err
	}
	src, err := wiresim.Start(wiresim.Options{Oplog: o, SetName: "source", MaxWireVersion: c.MaxWireVersion, Log: c.Log})
	if err != nil {
		return res, err
	}
	defer func() { _ = src.Close() }()
	dst, err := wiresim.Start(wiresim.Options{WriteDelay: c.Delay, SetName: "target", MaxWireVersion: c.MaxWireVersion, Log: c.Log})
	if err != nil {
		return res, err
	}
	defer func() { _ = dst.Close() }()

	r, disconnect, err := newReplayer(ctx, &spec, mapper, in, c, src, dst)
	if err != nil {
		return res, err
	}
	defer disconnect()

	want := in.Counts(ops)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpu0 := processCPU()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- r.Run(rctx) }()
	waitc := make(chan error, 1)
	go func() { waitc <- dst.WaitWrites(rctx, db, want.Writes()) }()
	select {
	case err := <-waitc:
		if err != nil {
			return res, err
		}
		res.Elapsed = time.Since(start)
		res.CPU = processCPU() - cpu0
	case err := <-errc:
		if err == nil {
			err = errors.New("the replayer stopped")
		}
		return res, fmt.Errorf("replay ended before every write was acknowledged (%d of %d): %w", dst.Stats().ByDB[db].Writes, want.Writes(), err)
	}
	runtime.ReadMemStats(&after)
	res.Mallocs, res.AllocBytes = after.Mallocs-before.Mallocs, after.TotalAlloc-before.TotalAlloc
	res.GCs = after.NumGC - before.NumGC
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return res, fmt.Errorf("replay: %w", err)
	}
	res.Target, res.Source = dst.Stats().ByDB[db], src.Stats()
	return res, checkRun(res, want, in, ops, r.Checkpoint())
}

// checkRun checks what the target acknowledged, what the source served
// and where the checkpoint ended against what the entries hold.
func checkRun(res Result, want replaybench.Counts, in *replaybench.Input, ops int64, cp bson.Timestamp) error {
	t := res.Target
	switch {
	case t.Writes != want.Writes():
		return fmt.Errorf("the target acknowledged %d writes, want %d", t.Writes, want.Writes())
	case t.Deletes != want.Deletes || t.Inserts+t.Updates != want.Inserts+want.Updates:
		return fmt.Errorf("the target acknowledged %d inserts, %d updates and %d deletes; want %d inserts and updates together and %d deletes",
			t.Inserts, t.Updates, t.Deletes, want.Inserts+want.Updates, want.Deletes)
	case res.Source.Entries < ops: // more: the replayer reads the newest entry for its lag
		return fmt.Errorf("the source served %d entries, want at least %d", res.Source.Entries, ops)
	}
	if last := in.TS(ops - 1); cp != last {
		return fmt.Errorf("the checkpoint is %d.%d after the run, want the last entry's %d.%d", cp.T, cp.I, last.T, last.I)
	}
	return nil
}

// database is the one database the shape's entries write to.
func database(in *replaybench.Input) (string, error) {
	dbs := map[string]bool{}
	for _, e := range in.Entries {
		ns, _ := bson.Raw(e).Lookup("ns").StringValueOK()
		if ns == "admin.$cmd" { // applyOps: the namespace of its first operation
			ns, _ = bson.Raw(e).Lookup("o", "applyOps", "0", "ns").StringValueOK()
		}
		db, _, _ := strings.Cut(ns, ".")
		dbs[db] = true
	}
	if len(dbs) != 1 {
		return "", fmt.Errorf("the %s shape writes to %d databases, want one", in.Shape, len(dbs))
	}
	for db := range dbs {
		return db, nil
	}
	return "", nil
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// newReplayer connects to both servers, probes them as the engine does,
// and returns a replayer tailing the source's oplog from in.From into the
// target, and a function that disconnects both.
func newReplayer(ctx context.Context, spec *config.Spec, mapper *catalog.Mapper, in *replaybench.Input, c Config, src, dst *wiresim.Server) (*replay.Replayer, func(), error) {
	copts := conn.Options{AppName: "mongoferry", MaxPoolSize: uint64(max(100, spec.Threads.Writers+8))}
	sc, err := conn.Open(ctx, "source", config.Endpoint{URI: src.URI()}, copts)
	if err != nil {
		return nil, nil, err
	}
	tc, err := conn.Open(ctx, "target", config.Endpoint{URI: dst.URI()}, copts)
	if err != nil {
		_ = sc.Disconnect(context.WithoutCancel(ctx))
		return nil, nil, err
	}
	disconnect := func() {
		_ = sc.Disconnect(context.WithoutCancel(ctx))
		_ = tc.Disconnect(context.WithoutCancel(ctx))
	}
	if err := conn.CheckDistinct(ctx, sc, tc); err != nil {
		disconnect()
		return nil, nil, err
	}
	srcProfile, err := conn.ProbeProfile(ctx, sc)
	if err != nil {
		disconnect()
		return nil, nil, fmt.Errorf("source: %w", err)
	}
	dstProfile, err := conn.ProbeProfile(ctx, tc)
	if err != nil {
		disconnect()
		return nil, nil, fmt.Errorf("target: %w", err)
	}
	tailer := source.NewTailer(sc, in.From)
	tailer.SkipDatabases = []string{"local", "config", spec.Checkpoint.Database}
	if c.ReadBatch > 0 {
		tailer.BatchEntries = c.ReadBatch
	}
	return replay.New(replay.Options{
		Task: "bench-wire", Spec: spec, Reader: tailer, Source: sc, Target: tc,
		Store: checkpoint.NewStore(tc, spec.Checkpoint.Database, "bench-wire"), Mapper: mapper, Log: c.Log, From: in.From,
		MaxWriteBatch: dstProfile.MaxWriteBatch, BulkWrite: dstProfile.BulkWriteCommand, WriteConcern: conn.WriteConcern(dst.URI()),
		Translator: oplog.Translator{
			WholeDocumentUpdates: srcProfile.UpdateShape == conn.UpdatesAsWholeDocument,
			PipelineUpdates:      dstProfile.PipelineUpdates,
		},
	}), disconnect, nil
}
