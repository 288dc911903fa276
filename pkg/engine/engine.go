// Package engine runs one sync task: Engine connects to both deployments,
// then walks the task's phases (Pending, FullSync, Streaming, Verifying,
// Completed or Failed) in one state machine (phases.go), composing the
// full copy (fullsync), oplog replay (replay) and verification (verify),
// the first two through the Copier and Replayer interfaces (engine.go),
// and reading the source's changes through a streamer (streamer.go),
// replica set (stream.go) or sharded; a sharded source runs one subtask
// per shard, all in one process or one per worker (package
// shardedsource). The
// cut-over is package cutover's state machine, given the engine's parts
// in cutover.go (a sharded source's in shardedsource). Status is a value
// snapshot for /status, metrics and progress output. It never imports
// Kubernetes packages.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/shardedsource"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// Phase is where a task is; the names are the worker contract's
// (workerapi) and the SyncTask status phases.
type Phase = workerapi.Phase

// Phases.
const (
	PhasePending   = workerapi.PhasePending
	PhaseFullSync  = workerapi.PhaseFullSync
	PhaseStreaming = workerapi.PhaseStreaming
	PhaseVerifying = workerapi.PhaseVerifying
	PhaseCompleted = workerapi.PhaseCompleted
	PhaseFailed    = workerapi.PhaseFailed
)

// ErrVerificationFailed is returned when the target differs from the
// source after the copy.
var ErrVerificationFailed = errors.New("verification found differences")

// ErrModeNotSupported is returned for modes this build cannot run yet.
var ErrModeNotSupported = errors.New("mode not supported")

// Options tune an Engine.
type Options struct {
	Log *slog.Logger
	// ObserveWrite is told the duration of every write batch.
	ObserveWrite func(time.Duration)
	// CopyHook is called after each copy batch (tests).
	CopyHook func(docs int64)
	// ObserveReplay is told each replay write batch's duration by kind.
	ObserveReplay func(op string, d time.Duration)
	// UntilCaughtUp ends replay once everything the source wrote is
	// applied, then verifies and completes; without it replay runs until
	// the context ends.
	UntilCaughtUp bool
	// Reader, when set, replaces the oplog tailer (tests feed scripted
	// entries through it); from is the position to read after.
	Reader func(from bson.Timestamp) source.OplogReader
	// CheckpointInterval overrides how often replay saves its checkpoint.
	CheckpointInterval time.Duration
	// Shard, for a sharded source, runs only this shard's replay subtask
	// (a worker of the operator; MONGOFERRY_SHARD or --shard in the CLI).
	// The worker of the shard whose name sorts first also records the
	// start positions and leads the full copy; every worker copies its
	// shard's part of it and helps with the rest (shardedsource's
	// pershard.go, copyonly.go), the others then wait for it to end.
	// Empty runs every shard's subtask in this process.
	Shard string
	// TopologyInterval is how often config.shards is re-read while a
	// sharded source streams; 10s when zero.
	TopologyInterval time.Duration
	// ShardReader, when set, replaces each shard's oplog tailer (tests).
	ShardReader func(shard string, from bson.Timestamp) source.OplogReader
	// CopyOnly runs a copy-only worker of a replica-set source's full
	// copy (fullSync.workers above 1; ferry run --copy-only, the
	// operator's <name>-copy pods): it copies ranges of the task's plan
	// claimed through leases until the task's run records the copy done,
	// and writes nothing else (copyonly.go).
	CopyOnly bool
	// OnCutoverStep, when set, is told each cut-over step once it is
	// recorded (tests stop their writes at Draining, as an application
	// does).
	OnCutoverStep func(step string)
}

// Engine runs one task. Open connects (endpoints) and makes its parts:
// the copier, the streamer, the cut-over driver and the verification.
// Run walks the phases over them (phases.go), under the task's lease;
// Status reports the run's state (runstate.go) with theirs.
type Engine struct {
	task *config.Task
	opts Options
	log  *slog.Logger
	// endpoints are the clients, profiles, checkpoint store and mapper
	// Open finds once.
	endpoints
	// lease is the task's lease, held while the run writes (lease.go).
	lease  *lease
	copier Copier
	// targetSharding shards a sharded target's collections before the
	// copy writes to them (nil for a target that is not sharded).
	targetSharding *targetSharding
	recorded       atomic.Bool // the run is recorded in the checkpoint database
	// finish says when replay ends once caught up (Options.UntilCaughtUp,
	// FinishWhenCaughtUp, a cut-over); the streamer reads it.
	finish *finishRequest

	// shards supervises a sharded source read shard by shard (package
	// shardedsource); nil for a source read as one (a replica set, or
	// through mongos).
	shards *shardedsource.Source
	// cut runs the cut-over's state machine (package cutover), made in
	// Open once the store is (cutover.go).
	cut *cutoverDriver
	// streaming is how this run reads the source's changes (streamer.go),
	// picked in Open once openShards found which kind of source it is.
	streaming streamer

	// verification compares the target with the source, at the end and
	// while replay runs (verifyrun.go, streamverify.go).
	verification *verification

	// state is what the run reports: its phase, error, times and the
	// source oplogs' windows (runstate.go).
	state runState
}

// endpoints are what Open connects to and finds once, shared by the
// engine's parts: the source and target clients, the profiles of their
// servers, the task's checkpoint store on the target and the mapper of
// its namespaces.
type endpoints struct {
	source, target *mongo.Client
	// profiles of the source and target servers, found once in Open.
	srcProfile, dstProfile conn.Profile
	store                  *checkpoint.Store
	mapper                 *catalog.Mapper
}

// Open connects to the task's source and target and checks that they are
// two different deployments. Nothing is written anywhere.
func Open(ctx context.Context, task *config.Task, opts Options) (*Engine, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{task: task, opts: opts, log: log.With("task", task.Name), state: runState{phase: PhasePending}, finish: newFinishRequest(opts.UntilCaughtUp)}
	var err error
	if e.source, err = conn.Open(ctx, "source", task.Source, conn.Options{AppName: "mongoferry"}); err != nil {
		return nil, err
	}
	if e.target, err = conn.Open(ctx, "target", task.Target, conn.Options{AppName: "mongoferry"}); err != nil {
		e.Close()
		return nil, err
	}
	if err := conn.CheckDistinct(ctx, e.source, e.target); err != nil {
		e.Close()
		return nil, err
	}
	if e.srcProfile, err = conn.ProbeProfile(ctx, e.source); err != nil {
		e.Close()
		return nil, fmt.Errorf("source: %w", err)
	}
	if e.dstProfile, err = conn.ProbeProfile(ctx, e.target); err != nil {
		e.Close()
		return nil, fmt.Errorf("target: %w", err)
	}
	e.log.Info("servers", "source", e.srcProfile.Flavor, "sourceVersion", e.srcProfile.Version,
		"target", e.dstProfile.Flavor, "targetVersion", e.dstProfile.Version, "sourceUpdates", e.srcProfile.UpdateShape.String())
	e.store = checkpoint.NewStore(e.target, task.Checkpoint.Database, task.Name)
	e.lease = &lease{store: e.store, key: opts.Shard, log: e.log}
	e.cut = newCutoverDriver(task, e.store, e.target, e.log, e.finish, opts.OnCutoverStep)
	if e.mapper, err = catalog.NewMapper(task.Namespaces, task.Checkpoint.Database); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.openShards(ctx); err != nil {
		e.Close()
		return nil, err
	}
	e.streaming = e.pickStreamer()
	replayStatus := func() *replay.Status { return e.Status().Replay }
	e.verification = &verification{task: task, endpoints: e.endpoints, log: e.log,
		partial: e.streaming.Partial(), replayStatus: replayStatus,
		positions: &replayPositions{source: e.source, replayStatus: replayStatus, tailer: e.streaming.OplogTailer, scripted: opts.Reader != nil}}
	e.cut.attach(e.streaming, e.verification)
	if e.targetSharding, err = openTargetSharding(ctx, task, e.source, e.target, e.dstProfile, e.log); err != nil {
		e.Close()
		return nil, err
	}
	copyOpts := fullsync.Options{
		Task: task.Name, Spec: &task.Spec, Source: e.source, Target: e.target, Store: e.store,
		SourceProfile: e.srcProfile, TargetProfile: e.dstProfile, Log: log, ObserveWrite: opts.ObserveWrite, Hook: opts.CopyHook,
	}
	copyOpts.ShardTarget = e.targetSharding.shardTarget()
	if e.shards != nil {
		if copyOpts.PerShard, err = e.shards.PerShardCopy(); err != nil {
			e.Close()
			return nil, err
		}
	}
	if copyOpts.Leaser, copyOpts.Processes, err = copyLeaser(task, opts, e.shards, e.target); err != nil {
		e.Close()
		return nil, err
	}
	// The operator sums its shard workers' figures: each counts its own.
	copyOpts.OthersReport = e.shards != nil && e.opts.Shard != ""
	if e.shards != nil {
		e.shards.ShareCopy(copyOpts.Leaser != nil)
	}
	e.copier, err = fullsync.New(copyOpts)
	if err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// Close disconnects from both deployments (and every shard).
func (e *Engine) Close() {
	clients := []*mongo.Client{e.source, e.target}
	if e.shards != nil {
		clients = append(clients, e.shards.Clients()...)
	}
	for _, c := range clients {
		if c != nil {
			_ = c.Disconnect(context.Background())
		}
	}
}

// Source and Target return the connected clients.
func (e *Engine) Source() *mongo.Client { return e.source }

// Target returns the target client.
func (e *Engine) Target() *mongo.Client { return e.target }

// Run walks the task's phases until it completes, fails or ctx ends. A
// restarted task resumes from its checkpoint: the same path as a first
// start.
func (e *Engine) Run(ctx context.Context) error {
	e.state.start()
	var err error
	if e.opts.CopyOnly {
		err = runCopyOnly(ctx, e.log, e.store, e.copier, &e.state)
	} else if err = e.cut.check(); err == nil {
		if err = e.preflight().checkGivenStart(ctx); err == nil {
			err = e.lease.run(ctx, e.runWatched)
		}
	}
	err = explainBlockedWrites(err)
	e.state.end(err, err != nil && ctx.Err() == nil)
	// A failure before the run was recorded (bad input, OplogWindowLost)
	// leaves the target untouched.
	if err != nil && ctx.Err() == nil && e.recorded.Load() {
		_ = e.store.SetPhase(context.Background(), string(PhaseFailed), false)
	}
	return err
}

// runWatched runs the task's phases while watchWindows reads the source
// oplogs' windows.
func (e *Engine) runWatched(ctx context.Context) error {
	wctx, stopWindows := context.WithCancel(ctx)
	if watchesWindows(e.task, e.opts) {
		go e.state.watchWindows(wctx, e.streaming)
	}
	err := e.run(ctx)
	stopWindows()
	return err
}

// baseLog is the logger without the task key, for parts that add it
// themselves (the replayer), so that a line names the task once.
func (e *Engine) baseLog() *slog.Logger {
	if e.opts.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.opts.Log
}

// Copier is the full copy as the engine drives it in its FullSync phase
// (fullsync.Copier). Its checkpoint is the ranges it marks done in the
// task's checkpoint store, from which a later Run resumes.
type Copier interface {
	// Preflight checks, before anything is written, that the copy can
	// start (a target that is not empty stops it here).
	Preflight(ctx context.Context) error
	// Run copies every namespace, skipping the ranges the checkpoint store
	// marks done; it returns when the copy is done or fails, or when ctx
	// ends (how the engine stops it).
	Run(ctx context.Context) error
	// Status is a value snapshot of the copy.
	Status() fullsync.Status
	// Copied counts documents this process wrote for a per-shard copy
	// another worker leads (its shard's part).
	Copied(ns, target string, docs, bytes int64)
	// HelpCopy copies, in a copy-only worker, the ranges of the task's
	// plan it can claim, and returns how many are not done yet.
	HelpCopy(ctx context.Context) (int, error)
	// HelpDone ends a helper's copy once it is recorded done, counting
	// the ranges finished since it last looked.
	HelpDone(ctx context.Context) error
}

// Replayer is oplog replay as the engine drives it in its Streaming phase
// (replay.Replayer): started from the task's resume position, it saves its
// Checkpoint in the checkpoint store as it applies entries.
type Replayer interface {
	// Run applies entries until ctx ends (how the engine stops it, also
	// once replay caught up) or a fatal error.
	Run(ctx context.Context) error
	// Status is a value snapshot of replay.
	Status() replay.Status
	// Checkpoint is the position at and below which every entry is
	// applied.
	Checkpoint() bson.Timestamp
}

// The engine's parts.
var (
	_ Copier   = (*fullsync.Copier)(nil)
	_ Replayer = (*replay.Replayer)(nil)
)

// newReplayer makes the replayer of a replica-set source's Streaming
// phase.
func newReplayer(o replay.Options) Replayer { return replay.New(o) }
