package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// run is Run under the task's lease: the checks before anything is
// written, the run's record, then the phases from where the record says
// the task is (walkPhases). A worker of one shard that does not run the
// copy follows the one that does (shardedsource.Source.RunShardWorker).
func (e *Engine) run(ctx context.Context) error {
	// Checks that stop a task before anything is written: a resumed task
	// whose oplog position rolled away, a target that is not empty.
	prev, err := e.store.Task(ctx)
	exists := err == nil
	checks := e.preflight()
	if err := checks.checkOplogs(ctx); err != nil {
		return err
	}
	if err := checks.checkSameSelection(prev, exists); err != nil {
		return err
	}
	if e.streaming.Follows() {
		return e.shards.RunShardWorker(ctx)
	}
	start, err := e.checkBeforeWrites(ctx, prev, exists)
	if err != nil {
		return err
	}
	rec, err := e.recordRun(ctx, start)
	if err != nil {
		return err
	}
	e.cut.load(rec)
	first := e.firstPhase(rec)
	// A run of a task its record calls Completed (a full copy, verified)
	// only verifies again: a StatefulSet restarts a worker that exited, and
	// the operator stops it while it checks. The record stays Completed
	// unless this verification fails.
	recheck := first == PhaseVerifying && rec.Phase == string(PhaseCompleted)
	if recheck {
		e.log.Info("the task is complete; verifying again (the record stays Completed unless a difference is found)")
	}
	return e.walkPhases(ctx, first, recheck)
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
		// A resumed task stops here when the source's oplog (a shard's,
		// for a sharded source) no longer holds the position replay goes
		// on from.
		if err := e.streaming.CheckWindow(ctx, prev); err != nil {
			return start, err
		}
	}
	if err := e.preflight().checkSelection(ctx); err != nil {
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
	if err := e.lease.take(); err != nil {
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
		startTS, err := e.streaming.RecordStarts(ctx, start.ts, start.shards)
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
	switch step := e.cut.step(); {
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
// it, and goes to the next until Completed or an error. With recheck the
// task is already complete: Verifying is run but not recorded.
func (e *Engine) walkPhases(ctx context.Context, next Phase, recheck bool) error {
	withReplay := e.task.Mode != config.ModeFull
	for {
		e.state.setPhase(next)
		if next != PhaseCompleted && (!recheck || next != PhaseVerifying) {
			if err := e.store.SetPhase(ctx, string(next), false); err != nil {
				return err
			}
		}
		e.state.entered(next)
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
			if err := e.streaming.Stream(ctx); err != nil {
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
		if endTS, err = e.streaming.CopyEnd(ctx, e.task.Incremental.Method != config.MethodChangeStream); err != nil {
			return err
		}
	}
	return e.store.MarkCopyDone(ctx, endTS)
}

// verifyPhase is the Verifying phase: the cut-over's last steps, or the
// task's verification, then the options the sync deferred restored.
func (e *Engine) verifyPhase(ctx context.Context) error {
	spec := &e.task.Spec
	if e.cut.step() != "" {
		if err := e.cut.finishSteps(ctx); err != nil {
			return err
		}
	} else if spec.Verify.Mode != config.VerifyNone && e.streaming.Partial() {
		e.log.Info("verification skipped in a worker running one shard: other shards may still be replaying; run ferry verify once every worker caught up", "shard", e.opts.Shard)
	} else if spec.Verify.Mode != config.VerifyNone {
		if err := e.verification.verify(ctx); err != nil {
			return err
		}
	}
	if spec.Mode != config.ModeFull {
		return e.cut.restoreDeferred(ctx)
	}
	return nil
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
		ts, shards, err = e.preflight().givenStart(ctx, useOplog)
		return ts, false, shards, err
	}
	return e.streaming.NewestStart(ctx, useOplog)
}
