package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/shard"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// The cut-over of a sharded source walks the steps of cutover.go with one
// subtask per shard. The task-wide step lives in the task record, as for
// a replica set; each shard's part (checkpoint.ShardCutover: caught up,
// drain position, drained) lives in its shard record, so that one
// process running every subtask (`ferry run`) and one worker per shard
// (the operator) take the same path:
//
//	CatchingUp      each subtask records CaughtUp once its lag is at most
//	                maxLagSeconds; the step moves on once every shard
//	                that is not retired has
//	BlockingWrites  setUserWriteBlockMode through mongos (the whole
//	                cluster on MongoDB 6.0+)
//	Draining        every shard's newest oplog position is read, after
//	                the block, and recorded as its drain position; each
//	                subtask stops once its saved checkpoint reached it
//	                with nothing in flight, and records Drained (a
//	                retired shard counts as drained)
//	Verifying, Finalizing, Complete as for a replica set (finishCutover)
//
// The worker that moves the task-wide step is the copy leader (every
// process in `ferry run`); it reads the drain positions of all shards at
// one moment, so a worker that sees Draining late cannot pick a later
// one. The other workers follow the cut-over's record (followCutover,
// every second while they stream, every half second once drained):
// once their shard is drained they wait for Complete and end as a
// completed task; a failure recorded after they started ends them with
// the failing worker's message and exit code (docs/cutover.md states the
// bound). Every step is recorded
// before it acts, so a worker restarted anywhere goes on from the
// records: a drained subtask is not started again, one that is not
// drained replays from its checkpoint up to its recorded drain position.
//
// Chunk migrations may go on during the cut-over (the balancer is not
// stopped): their fromMigrate entries are skipped as always. That stays
// safe: the documents a migration moves are already on the target from
// the user writes before it, and the drain positions are read after the
// user writes stopped, so every user write of every shard is at or below
// its shard's drain position. For the same reason a drained subtask
// holds nobody back on the shard board (shard.Position.Drained): what its
// shard logs after the drain position is migrations and no-ops.

// cutoverAttempt is the running cut-over's start time: it names the
// attempt that the shard records' parts belong to.
func (e *Engine) cutoverAttempt() time.Time { return e.cutoverRecord().StartedAt }

// shardedCutoverRunning reports whether a sharded cut-over drives this
// process's subtasks: a step before Verifying that is not Failed.
func (e *Engine) shardedCutoverRunning() bool {
	switch e.cutoverStep() {
	case workerapi.CutoverCatchingUp, workerapi.CutoverBlockingWrites, workerapi.CutoverDraining:
		return true
	}
	return false
}

// shardDrained reports whether a shard's record says its subtask drained
// in the running cut-over (so it is not started again).
func (e *Engine) shardDrained(rec checkpoint.ShardRecord) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return drainedIn(e.co, rec)
}

// startShardedCutover records a new cut-over before the subtasks run, so
// that the task record says one runs (the other workers follow it).
func (e *Engine) startShardedCutover(ctx context.Context) error {
	if !e.copyLeader() || e.cutoverStep() != workerapi.CutoverCatchingUp {
		return nil
	}
	return e.advanceCutover(ctx, func(*checkpoint.CutoverRecord) {})
}

// shardedCutoverTick takes the cut-over one look further; streamSharded
// calls it about every second. done reports that this process's subtasks
// are all drained (and, in the process that moves the step, every
// shard's), so streaming ends.
func (e *Engine) shardedCutoverTick(ctx context.Context) (done bool, err error) {
	if !e.copyLeader() {
		if err := e.followCutover(ctx); err != nil {
			return false, err
		}
		if e.cutoverStep() == workerapi.CutoverComplete {
			return true, nil
		}
	}
	if !e.shardedCutoverRunning() {
		return false, nil
	}
	recs, err := e.store.Shards(ctx)
	if err != nil {
		return false, err
	}
	mineDone, err := e.driveShards(ctx, recs)
	if err != nil {
		return false, err
	}
	if !e.copyLeader() {
		return mineDone, nil
	}
	return e.leadCutover(ctx, recs)
}

// driveShards takes this process's subtasks through their part: record
// CaughtUp, then, once the drain position is recorded, stop at it and
// record Drained. It reports whether all of them are drained or retired.
func (e *Engine) driveShards(ctx context.Context, recs map[string]checkpoint.ShardRecord) (bool, error) {
	attempt := e.cutoverAttempt()
	maxLag := e.task.Cutover.MaxLagSeconds
	all := true
	for _, st := range e.subtaskList() {
		name := st.shard.Name
		rec, ok := recs[name]
		if !e.mine(name) || !ok {
			continue
		}
		c := rec.CutoverOf(attempt)
		st.setCutover(c)
		if rec.Retired || c.Drained {
			continue
		}
		all = false
		r := st.replayer.Load()
		if r == nil {
			continue
		}
		switch {
		case !c.CaughtUp:
			if s := r.Status(); passes(lagGate(s, maxLag, true)) {
				c.CaughtUp = true
				if err := e.store.SetShardCutover(ctx, name, c); err != nil {
					return false, err
				}
				st.setCutover(c)
				e.log.Info("cut-over: the shard caught up", "shard", name, "lag", s.LagSeconds)
			}
		case c.DrainTS.IsZero():
			// The worker moving the step records it once every shard
			// caught up and writes stopped.
		case r.Checkpoint().Compare(c.DrainTS) >= 0 && r.Status().InFlight == 0:
			if err := e.stopDrained(ctx, st, c); err != nil {
				return false, err
			}
		}
	}
	return all, nil
}

// stopDrained stops a subtask that applied everything up to its drain
// position, checks the checkpoint it saved on the way out, and records
// the shard as drained, on its record and on the shard board.
func (e *Engine) stopDrained(ctx context.Context, st *subtask, c checkpoint.ShardCutover) error {
	name := st.shard.Name
	if st.cancel != nil {
		st.cancel()
		<-st.done
	}
	rec, err := e.store.ShardRecord(ctx, name)
	if err != nil {
		return err
	}
	if at := rec.ResumeTS(); at.Compare(c.DrainTS) < 0 {
		return fmt.Errorf("cut-over: shard %s stopped with its checkpoint %d,%d below its drain position %d,%d", name, at.T, at.I, c.DrainTS.T, c.DrainTS.I)
	}
	c.Drained = true
	if err := e.store.SetShardCutover(ctx, name, c); err != nil {
		return err
	}
	st.setCutover(c)
	e.log.Info("cut-over: the shard is drained; its subtask stopped", "shard", name, "drainTS", c.DrainTS, "checkpoint", rec.ResumeTS())
	return e.publishDrained(ctx, name, rec)
}

// publishDrained puts a drained shard on the board: it holds nobody back.
func (e *Engine) publishDrained(ctx context.Context, name string, rec checkpoint.ShardRecord) error {
	at := rec.ResumeTS()
	return e.board.Publish(ctx, shard.Position{Shard: name, Read: at, Applied: at, Drained: true})
}

// undrain takes off the board the Drained marks that no cut-over stands
// behind any more (one that failed, or was withdrawn, after shards
// drained), before subtasks replay again: a shard so marked holds nobody
// back although its subtask may replay writes again. It goes by the
// records, not by what this process follows.
func (e *Engine) undrain(ctx context.Context) error {
	ps, err := e.board.Positions(ctx)
	if err != nil || !slices.ContainsFunc(ps, func(p shard.Position) bool { return p.Drained }) {
		return err
	}
	task, err := e.store.Task(ctx)
	if err != nil {
		return err
	}
	recs, err := e.store.Shards(ctx)
	if err != nil {
		return err
	}
	for _, p := range ps {
		rec, ok := recs[p.Shard]
		if !p.Drained || !ok || drainedIn(task.Cutover, rec) {
			continue
		}
		at := rec.ResumeTS()
		if err := e.board.Publish(ctx, shard.Position{Shard: p.Shard, Read: at, Applied: at, Retired: rec.Retired}); err != nil {
			return err
		}
	}
	return nil
}

// drainedIn reports whether a shard's record says it drained in the
// cut-over c, which still stands (Draining or later, not Failed).
func drainedIn(c *checkpoint.CutoverRecord, rec checkpoint.ShardRecord) bool {
	if c == nil {
		return false
	}
	switch c.Step {
	case workerapi.CutoverDraining, workerapi.CutoverVerifying, workerapi.CutoverFinalizing, workerapi.CutoverComplete:
		return rec.CutoverOf(c.StartedAt).Drained
	}
	return false
}

// leadCutover moves the task-wide step (the copy leader's job): on once
// every shard caught up, writes blocked, the drain positions read and
// recorded, and done once every shard drained.
func (e *Engine) leadCutover(ctx context.Context, recs map[string]checkpoint.ShardRecord) (bool, error) {
	attempt := e.cutoverAttempt()
	var live []checkpoint.ShardRecord
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		if rec := recs[name]; rec.Started && !rec.Retired {
			live = append(live, rec)
		}
	}
	switch e.cutoverStep() {
	case workerapi.CutoverCatchingUp:
		var behind []string
		for _, rec := range live {
			if !rec.CutoverOf(attempt).CaughtUp {
				behind = append(behind, rec.Shard)
			}
		}
		if len(behind) > 0 {
			e.setCutoverMessage(fmt.Sprintf("shards %s: lag above %ds or not known yet; the cut-over goes on once every shard's is known and at most that", strings.Join(behind, ", "), e.task.Cutover.MaxLagSeconds))
			return false, nil
		}
		next := workerapi.CutoverDraining
		if e.task.Cutover.BlockSourceWrites {
			next = workerapi.CutoverBlockingWrites
		}
		return false, e.advanceCutover(ctx, func(c *checkpoint.CutoverRecord) { c.CaughtUp, c.Step, c.Message = true, next, "" })
	case workerapi.CutoverBlockingWrites:
		// Through mongos: the block applies to every shard of the cluster.
		if err := source.SetUserWriteBlock(ctx, e.source, true); err != nil {
			return false, e.failCutover(ctx, err)
		}
		return false, e.advanceCutover(ctx, func(c *checkpoint.CutoverRecord) { c.WritesBlocked, c.Step = true, workerapi.CutoverDraining })
	case workerapi.CutoverDraining:
		return e.leadDrain(ctx, attempt, live)
	}
	return false, nil
}

// leadDrain records the drain position of every shard without one, then
// waits for every shard to drain; the task's SourceTS becomes the highest
// drain position.
func (e *Engine) leadDrain(ctx context.Context, attempt time.Time, live []checkpoint.ShardRecord) (bool, error) {
	var high bson.Timestamp
	var waiting []string
	for _, rec := range live {
		c := rec.CutoverOf(attempt)
		if c.DrainTS.IsZero() {
			e.subMu.Lock()
			st := e.subtasks[rec.Shard]
			e.subMu.Unlock()
			if st == nil {
				return false, fmt.Errorf("cut-over: shard %s has a record but no connection", rec.Shard)
			}
			ts, err := source.NewestTS(ctx, st.client)
			if err != nil {
				return false, fmt.Errorf("cut-over: shard %s: %w", rec.Shard, err)
			}
			if ts.IsZero() {
				// An empty oplog: nothing to drain beyond what is applied.
				ts = rec.ResumeTS()
			}
			c.CaughtUp, c.DrainTS = true, ts
			if err := e.store.SetShardCutover(ctx, rec.Shard, c); err != nil {
				return false, err
			}
			e.log.Info("cut-over: recorded the shard's drain position", "shard", rec.Shard, "ts", ts)
		}
		if !c.Drained {
			waiting = append(waiting, rec.Shard)
		}
		if c.DrainTS.Compare(high) > 0 {
			high = c.DrainTS
		}
	}
	if len(waiting) > 0 {
		e.setCutoverMessage(fmt.Sprintf("replaying shards %s up to their newest positions", strings.Join(waiting, ", ")))
		return false, nil
	}
	if c := e.cutoverRecord(); c.SourceTS != high || high.IsZero() {
		if err := e.advanceCutover(ctx, func(c *checkpoint.CutoverRecord) { c.SourceTS = high }); err != nil {
			return false, err
		}
	}
	e.log.Info("every shard drained to its newest position", "ts", high)
	return true, nil
}

// checkShardsDrained is finishCutover's check for a sharded source: every
// shard that is not retired saved a checkpoint at or past its drain
// position.
func (e *Engine) checkShardsDrained(ctx context.Context) error {
	recs, err := e.store.Shards(ctx)
	if err != nil {
		return err
	}
	attempt := e.cutoverAttempt()
	for _, name := range slices.Sorted(maps.Keys(recs)) {
		rec := recs[name]
		if !rec.Started || rec.Retired {
			continue
		}
		c := rec.CutoverOf(attempt)
		if at := rec.ResumeTS(); !c.Drained || at.Compare(c.DrainTS) < 0 {
			return fmt.Errorf("cut-over: shard %s is not drained (checkpoint %d,%d, drain position %d,%d)", name, at.T, at.I, c.DrainTS.T, c.DrainTS.I)
		}
	}
	return nil
}

// followCutover is how a worker that does not move the step learns it:
// it reads the cut-over's record. A failure recorded there ends it with
// the failure (followedFailure), whether or not it saw the attempt's
// earlier steps (a worker may start, or read the record, after them),
// except the failure that stood when the worker started: that is an
// earlier attempt's, and the worker moving the step starts a new one for
// the request, as a run started over a failed cut-over does (loadCutover).
func (e *Engine) followCutover(ctx context.Context) error {
	rec, err := e.store.Task(ctx)
	if err != nil {
		return err
	}
	c := rec.Cutover
	if c == nil || (c.Step != workerapi.CutoverComplete && !e.task.Cutover.Requested) {
		return nil
	}
	e.mu.Lock()
	if c.Step == workerapi.CutoverFailed && c.StartedAt.Equal(e.staleFailure) {
		e.mu.Unlock()
		return nil
	}
	prev := e.co
	cp := *c
	e.co = &cp
	e.mu.Unlock()
	if prev == nil || prev.Step != c.Step || !prev.StartedAt.Equal(c.StartedAt) {
		e.log.Info("cut-over", "step", c.Step, "caughtUp", c.CaughtUp, "writesBlocked", c.WritesBlocked)
		if e.opts.OnCutoverStep != nil {
			e.opts.OnCutoverStep(c.Step)
		}
	}
	if c.Step == workerapi.CutoverFailed {
		return followedFailure(cp)
	}
	return nil
}

// noteStaleFailure remembers the failed attempt recorded when a worker
// following the cut-over starts (see followCutover). A task not recorded
// yet has none.
func (e *Engine) noteStaleFailure(ctx context.Context) {
	rec, err := e.store.Task(ctx)
	if err != nil || rec.Cutover == nil || rec.Cutover.Step != workerapi.CutoverFailed {
		return
	}
	e.mu.Lock()
	e.staleFailure = rec.Cutover.StartedAt
	e.mu.Unlock()
}

// followedFailure is the error a worker following the cut-over ends with
// once Failed is recorded: the message of the worker that moved the step
// (failCutover's: the step and why) and its exit code, so that every
// worker of the task ends alike: ErrCutoverFailed, with
// ErrVerificationFailed when the verification found differences.
func followedFailure(c checkpoint.CutoverRecord) error {
	f := &recordedFailure{msg: fmt.Sprintf("%v, step %s", ErrCutoverFailed, c.Message), errs: []error{ErrCutoverFailed}}
	if c.Verify != nil && !c.Verify.OK {
		f.errs = append(f.errs, ErrVerificationFailed)
	}
	return f
}

// recordedFailure is a failure read from the records: msg as recorded,
// errs the sentinels it stands for.
type recordedFailure struct {
	msg  string
	errs []error
}

func (f *recordedFailure) Error() string   { return f.msg }
func (f *recordedFailure) Unwrap() []error { return f.errs }

// awaitCutover keeps a worker whose shard is drained until the worker
// moving the step records Complete (nil) or a failure.
func (e *Engine) awaitCutover(ctx context.Context) error {
	e.setPhase(PhaseVerifying)
	e.log.Info("cut-over: this worker's shard is drained; waiting for the cut-over to complete", "shard", e.opts.Shard)
	for e.cutoverStep() != workerapi.CutoverComplete {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(cutoverPoll):
		}
		if err := e.followCutover(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (st *subtask) setCutover(c checkpoint.ShardCutover) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.co = &c
}

// passes is lagGate's verdict without its reason.
func passes(pass bool, _ string) bool { return pass }
