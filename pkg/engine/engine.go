// Package engine runs one sync task: Engine connects to both deployments,
// then walks the task's phases (Pending, FullSync, Streaming, Verifying,
// Completed or Failed) in one state machine, composing the full copy
// (fullsync), oplog replay (replay) and verification (verify), the first
// two through the Copier and Replayer interfaces (engine.go); Status is
// a value snapshot for /status, metrics and progress output. It never
// imports Kubernetes packages.
package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/cutover"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/shard"
	"github.com/mongoferry/mongoferry/pkg/engine/sharding"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
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
	// start positions and runs the full copy; the others wait for it.
	// Empty runs every shard's subtask in this process.
	Shard string
	// TopologyInterval is how often config.shards is re-read while a
	// sharded source streams; 10s when zero.
	TopologyInterval time.Duration
	// ShardReader, when set, replaces each shard's oplog tailer (tests).
	ShardReader func(shard string, from bson.Timestamp) source.OplogReader
	// OnCutoverStep, when set, is told each cut-over step once it is
	// recorded (tests stop their writes at Draining, as an application
	// does).
	OnCutoverStep func(step string)
}

// Engine runs one task.
type Engine struct {
	// leaseTaker takes the task's lease (set by runLeased; see takeLease).
	leaseTaker     func() error
	task           *config.Task
	opts           Options
	log            *slog.Logger
	source, target *mongo.Client
	// profiles of the source and target servers, found once in Open.
	srcProfile, dstProfile conn.Profile
	store                  *checkpoint.Store
	copier                 Copier
	// newReplayer makes the Streaming phase's replayer (newReplayer;
	// tests give fakes).
	newReplayer func(replay.Options) Replayer
	// targetSharding shards a sharded target's collections before the
	// copy writes to them (nil for a target that is not sharded).
	targetSharding *sharding.Preparer
	mapper         *catalog.Mapper
	replayer       atomic.Pointer[Replayer]
	tailer         atomic.Pointer[source.Tailer]
	recorded       atomic.Bool // the run is recorded in the checkpoint database
	untilCaughtUp  atomic.Bool
	// finishAsked is when FinishWhenCaughtUp was called (UnixNano; 0 when
	// not, or with UntilCaughtUp from the start): a cut-over trusts only
	// newest positions read after it.
	finishAsked atomic.Int64

	// A sharded source read shard by shard (see sharded.go); only
	// pickStreamer and the sharded implementation read sharded.
	sharded    bool
	subMu      sync.Mutex
	subtasks   map[string]*subtask
	shardOrder []string // shard names, sorted
	// board is where the subtasks publish their positions (replay holds
	// writes after chunk migrations on it): in memory when this process
	// runs every subtask, in the target's checkpoint database otherwise.
	board shard.Board
	// cut is the cut-over's state machine (package cutover), made in
	// Open once the store is.
	cut *cutover.Machine
	// streaming is how this run reads the source's changes (streamer.go),
	// picked in Open once openShards found which kind of source it is.
	streaming streamer

	mu         sync.Mutex
	phase      Phase
	err        error
	verifyRes  *verify.Report
	verifyProg verifyProgress
	// sv is the streaming verifier (made on first use), svCtx the
	// context of the replay it may run under (nil while not streaming).
	sv       *verify.Streamer
	svCtx    context.Context //nolint:containedctx // the running replay's, for passes started over HTTP
	started  time.Time
	finished time.Time
	// windows are the source oplogs' windows, read by watchWindows.
	windows []OplogWindow
	// streamAt is when replay started in this run.
	streamAt time.Time
	// onPhase, when set, is told every phase the task enters, once the
	// checkpoint records it (tests).
	onPhase func(Phase)
}

type verifyProgress struct {
	NS          string
	Done, Total int64
}

// Open connects to the task's source and target and checks that they are
// two different deployments. Nothing is written anywhere.
func Open(ctx context.Context, task *config.Task, opts Options) (*Engine, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{task: task, opts: opts, log: log.With("task", task.Name), phase: PhasePending, newReplayer: newReplayer}
	e.untilCaughtUp.Store(opts.UntilCaughtUp)
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
	if err := e.openShards(ctx); err != nil {
		e.Close()
		return nil, err
	}
	e.streaming = e.pickStreamer()
	e.store = checkpoint.NewStore(e.target, task.Checkpoint.Database, task.Name)
	e.cut = e.newCutover()
	if e.mapper, err = catalog.NewMapper(task.Namespaces, task.Checkpoint.Database); err != nil {
		e.Close()
		return nil, err
	}
	if e.targetSharding, err = e.openTargetSharding(ctx); err != nil {
		e.Close()
		return nil, err
	}
	copyOpts := fullsync.Options{
		Task: task.Name, Spec: &task.Spec, Source: e.source, Target: e.target, Store: e.store,
		SourceProfile: e.srcProfile, TargetProfile: e.dstProfile, Log: log, ObserveWrite: opts.ObserveWrite, Hook: opts.CopyHook,
	}
	if e.targetSharding != nil {
		copyOpts.ShardTarget = e.shardTarget(e.targetSharding)
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
	for _, st := range e.subtaskList() {
		clients = append(clients, st.client)
	}
	for _, c := range clients {
		if c != nil {
			_ = c.Disconnect(context.Background())
		}
	}
}

// copyEndByClock is the copy's end position on a source where reading
// the newest oplog entry reads the whole oplog (conn.Profile's
// OplogQueriesScan; seconds on FerretDB with a busy oplog): the start of
// the next second by the server's clock, above every entry written
// before the call. The copy's end only bounds the copy/replay overlap
// (replay.Options.OverlapUntil: how long a duplicate key on a unique
// secondary index is tolerated), never where replay starts, so an upper
// bound serves; it tolerates such a duplicate at most a second longer.
// The start position on such a source is the start of a second too, read
// within milliseconds of it (source.StartPositionByClock).
func copyEndByClock(ctx context.Context, c *mongo.Client) (bson.Timestamp, error) {
	ts, err := source.ServerTime(ctx, c)
	if err != nil {
		return bson.Timestamp{}, err
	}
	return bson.Timestamp{T: ts.T + 1}, nil
}

// Source and Target return the connected clients.
func (e *Engine) Source() *mongo.Client { return e.source }

// Target returns the target client.
func (e *Engine) Target() *mongo.Client { return e.target }

// Run walks the task's phases until it completes, fails or ctx ends. A
// restarted task resumes from its checkpoint: the same path as a first
// start.
func (e *Engine) Run(ctx context.Context) error {
	e.mu.Lock()
	e.started = time.Now()
	e.mu.Unlock()
	err := e.checkCutover()
	if err == nil {
		err = e.checkGivenStart(ctx)
	}
	if err == nil {
		err = e.runLeased(ctx)
	}
	err = explainBlockedWrites(err)
	e.mu.Lock()
	e.finished = time.Now()
	if err != nil && ctx.Err() == nil {
		e.phase, e.err = PhaseFailed, err
	}
	e.mu.Unlock()
	// A failure before the run was recorded (bad input, OplogWindowLost)
	// leaves the target untouched.
	if err != nil && ctx.Err() == nil && e.recorded.Load() {
		_ = e.store.SetPhase(context.Background(), string(PhaseFailed), false)
	}
	return err
}

func (e *Engine) run(ctx context.Context) error {
	// Checks that stop a task before anything is written: a resumed task
	// whose oplog position rolled away, a target that is not empty.
	prev, err := e.store.Task(ctx)
	exists := err == nil
	if err := e.checkOplogs(ctx); err != nil {
		return err
	}
	if err := e.checkSameSelection(prev, exists); err != nil {
		return err
	}
	if e.streaming.follows() {
		return e.runShardWorker(ctx)
	}
	start, err := e.checkBeforeWrites(ctx, prev, exists)
	if err != nil {
		return err
	}
	rec, err := e.recordRun(ctx, start)
	if err != nil {
		return err
	}
	e.loadCutover(rec)
	return e.walkPhases(ctx, e.firstPhase(rec))
}

// runStart is a first run's replay start, read before anything is
// written: the task's position, whether the oplog was empty, and each
// shard's for a sharded source.
type runStart struct {
	ts     bson.Timestamp
	empty  bool
	shards map[string]bson.Timestamp
}

// checkBeforeWrites runs the checks that need the source before anything
// is written (the resume window, the selection, replayable collections,
// the copy's preflight) and reads a first run's replay start.
func (e *Engine) checkBeforeWrites(ctx context.Context, prev checkpoint.TaskRecord, exists bool) (runStart, error) {
	spec := &e.task.Spec
	withReplay := spec.Mode != config.ModeFull
	useOplog := spec.Incremental.Method != config.MethodChangeStream
	var start runStart
	if withReplay && useOplog && exists && prev.HasStart() {
		if err := e.checkResumeWindow(ctx, prev); err != nil {
			return start, err
		}
	}
	if err := e.checkSelection(ctx); err != nil {
		return start, err
	}
	colls, err := catalog.List(ctx, e.source, e.mapper)
	if err != nil {
		return start, err
	}
	if withReplay {
		if err := replay.CheckReplayable(colls, spec.Mode != config.ModeIncremental); err != nil {
			return start, err
		}
	}
	if spec.Mode != config.ModeIncremental && !prev.CopyDone {
		if err := e.copier.Preflight(ctx); err != nil {
			return start, err
		}
	}
	if withReplay && (!exists || !prev.HasStart()) {
		if start.ts, start.empty, start.shards, err = e.replayStart(ctx, useOplog); err != nil {
			return start, err
		}
	}
	return start, nil
}

// recordRun takes the task's lease and records the run: its selection
// and, on a first run that replays, its start positions.
func (e *Engine) recordRun(ctx context.Context, start runStart) (checkpoint.TaskRecord, error) {
	if err := e.takeLease(); err != nil {
		return checkpoint.TaskRecord{}, err
	}
	rec, err := e.store.Start(ctx)
	if err != nil {
		return rec, err
	}
	e.recorded.Store(true)
	if err := e.store.SetSelection(ctx, e.task.Namespaces); err != nil {
		return rec, err
	}
	if e.task.Mode != config.ModeFull && !rec.HasStart() {
		startTS, err := e.streaming.recordStarts(ctx, start.ts, start.shards)
		if err != nil {
			return rec, err
		}
		if rec, err = e.store.SetStartTS(ctx, startTS, start.empty); err != nil {
			return rec, err
		}
		e.log.Info("recorded the replay start position", "ts", startTS, "emptyOplog", start.empty)
	}
	return rec, nil
}

// firstPhase is where a run goes on from its record: a cut-over's step,
// or the copy's state.
func (e *Engine) firstPhase(rec checkpoint.TaskRecord) Phase {
	withReplay := e.task.Mode != config.ModeFull
	switch step := e.cutoverStep(); {
	case step == workerapi.CutoverComplete:
		e.log.Info("the cut-over is complete; nothing left to do", "sourceTS", rec.Cutover.SourceTS, "targetTS", rec.Cutover.TargetTS)
		return PhaseCompleted
	case step == workerapi.CutoverVerifying, step == workerapi.CutoverFinalizing:
		return PhaseVerifying
	case e.task.Mode == config.ModeIncremental, rec.CopyDone && withReplay:
		return PhaseStreaming
	case rec.CopyDone:
		return PhaseVerifying
	}
	return PhaseFullSync
}

// walkPhases is the task's state machine: it records each phase, runs
// it, and goes to the next until Completed or an error.
func (e *Engine) walkPhases(ctx context.Context, next Phase) error {
	withReplay := e.task.Mode != config.ModeFull
	for {
		e.setPhase(next)
		if next != PhaseCompleted {
			if err := e.store.SetPhase(ctx, string(next), false); err != nil {
				return err
			}
		}
		if e.onPhase != nil {
			e.onPhase(next)
		}
		e.log.Info("phase", "phase", next)
		switch next {
		case PhaseFullSync:
			if err := e.fullSync(ctx); err != nil {
				return err
			}
			next = PhaseVerifying
			if withReplay {
				next = PhaseStreaming
			}
		case PhaseStreaming:
			if err := e.streaming.stream(ctx); err != nil {
				return err
			}
			next = PhaseVerifying
		case PhaseVerifying:
			if err := e.verifyPhase(ctx); err != nil {
				return err
			}
			next = PhaseCompleted
		case PhaseCompleted:
			return e.store.SetPhase(ctx, string(PhaseCompleted), true)
		default:
			return fmt.Errorf("engine: no transition from phase %s", next)
		}
	}
}

// fullSync is the FullSync phase: the copy, then the source's position
// at its end recorded with it.
func (e *Engine) fullSync(ctx context.Context) error {
	if err := e.copier.Run(ctx); err != nil {
		return err
	}
	var endTS bson.Timestamp
	if e.task.Mode != config.ModeFull {
		var err error
		if endTS, err = e.streaming.copyEnd(ctx, e.task.Incremental.Method != config.MethodChangeStream); err != nil {
			return err
		}
	}
	return e.store.MarkCopyDone(ctx, endTS)
}

// verifyPhase is the Verifying phase: the cut-over's last steps, or the
// task's verification, then the options the sync deferred restored.
func (e *Engine) verifyPhase(ctx context.Context) error {
	spec := &e.task.Spec
	if e.cutoverStep() != "" {
		if err := e.finishCutover(ctx); err != nil {
			return err
		}
	} else if spec.Verify.Mode != config.VerifyNone && e.streaming.partial() {
		e.log.Info("verification skipped in a worker running one shard: other shards may still be replaying; run ferry verify once every worker caught up", "shard", e.opts.Shard)
	} else if spec.Verify.Mode != config.VerifyNone {
		if err := e.verify(ctx); err != nil {
			return err
		}
	}
	if spec.Mode != config.ModeFull {
		return e.restoreDeferred(ctx)
	}
	return nil
}

// checkResumeWindow stops a resumed task, before anything is written, when
// the source's oplog (a shard's, for a sharded source) no longer holds the
// position replay goes on from.
func (e *Engine) checkResumeWindow(ctx context.Context, prev checkpoint.TaskRecord) error {
	return e.streaming.checkWindow(ctx, prev)
}

// replayStart returns the replay start position of a task's first run,
// taken before anything is copied (and before anything is written, since
// it may fail), so that every write the source takes during the copy is
// replayed: spec.incremental.startAt when given, else every shard's newest
// position for a sharded source, else the source's newest position. On an
// empty oplog it is the source's current time (empty true): a real point
// in time, checked as such against the oplog's window later.
func (e *Engine) replayStart(ctx context.Context, useOplog bool) (ts bson.Timestamp, empty bool, shards map[string]bson.Timestamp, err error) {
	if e.task.Incremental.StartAt != "" {
		ts, shards, err = e.givenStart(ctx, useOplog)
		return ts, false, shards, err
	}
	return e.streaming.newestStart(ctx, useOplog)
}

// positionOf returns how the source's current position is read: its
// newest oplog entry, or its clock where reading the newest entry would
// read the whole oplog, or its cluster time for change streams.
func (e *Engine) positionOf(useOplog bool) func(context.Context, *mongo.Client) (bson.Timestamp, bool, error) {
	switch {
	case !useOplog:
		return func(ctx context.Context, c *mongo.Client) (bson.Timestamp, bool, error) {
			ts, err := source.ClusterTime(ctx, c)
			return ts, false, err
		}
	case e.srcProfile.OplogQueriesScan:
		// Reading the newest entry would read the whole oplog.
		return source.StartPositionByClock
	}
	return source.StartPosition
}

func (e *Engine) setPhase(p Phase) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.phase = p
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
