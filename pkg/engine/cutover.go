package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// The cut-over (cutover.requested in the task) walks these steps, each
// recorded in the checkpoint database (checkpoint.CutoversCollection)
// before it starts so that a restarted run goes on from the step it
// reached:
//
//	CatchingUp      replay runs until the lag is at most maxLagSeconds
//	BlockingWrites  setUserWriteBlockMode on the source (blockSourceWrites)
//	Draining        the source's newest position is read and recorded;
//	                replay stops once everything up to it is applied
//	Verifying       cutover.verify compares the target with the source
//	Finalizing      finalizeTarget restores what the sync held back
//	Complete        the target's newest oplog position is recorded
//
// The first three run while replay streams (driveCutover), the others
// after it stopped (finishCutover). Writes stay blocked after a cut-over
// with blockSourceWrites, so the application cannot write to the old
// deployment by mistake. A sharded source runs the first three shard by
// shard (cutover_sharded.go), the others as here.

// ErrCutoverNotSupported is returned for a cut-over this build cannot
// run.
var ErrCutoverNotSupported = errors.New("cut-over not supported")

// ErrCutoverFailed wraps the error a cut-over step failed on, once the
// failure is recorded: running the same request again fails again until
// something changes (the request's options, the deployment).
var ErrCutoverFailed = errors.New("cut-over failed")

// cutoverPoll is how often the cut-over looks at replay's progress.
const cutoverPoll = 500 * time.Millisecond

// checkCutover refuses, before anything is written, a cut-over this build
// cannot run.
func (e *Engine) checkCutover() error {
	if !e.task.Cutover.Requested {
		return nil
	}
	switch {
	case e.task.Mode == config.ModeFull:
		return fmt.Errorf("cutover.requested: %w for mode full (there is no replay to drain); use mode incremental or fullAndIncremental", ErrCutoverNotSupported)
	case e.task.Incremental.Method == config.MethodChangeStream:
		return fmt.Errorf("cutover.requested: %w with incremental.method changeStream yet; use method oplog", ErrCutoverNotSupported)
	}
	return nil
}

// loadCutover sets the cut-over's state from the task record at the start
// of a run: the step it reached, or CatchingUp for a new request or one
// that failed before (it starts over).
func (e *Engine) loadCutover(rec checkpoint.TaskRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case rec.Cutover != nil && rec.Cutover.Step == workerapi.CutoverComplete:
		c := *rec.Cutover
		e.co = &c
	case !e.task.Cutover.Requested:
		return
	case rec.Cutover != nil && rec.Cutover.Step != workerapi.CutoverFailed:
		c := *rec.Cutover
		e.co = &c
	default:
		e.co = &checkpoint.CutoverRecord{Step: workerapi.CutoverCatchingUp, StartedAt: time.Now().UTC().Truncate(time.Millisecond)}
		if rec.Cutover != nil && rec.Cutover.WritesBlocked {
			e.co.WritesBlocked = true
		}
	}
	// The newest position a cut-over trusts is one read after it began.
	e.finishAsked.CompareAndSwap(0, time.Now().UnixNano())
}

// SetCutoverHook sets Options.OnCutoverStep on an opened engine, before
// Run (tests that stop the run from the hook need the engine first).
func (e *Engine) SetCutoverHook(f func(step string)) { e.opts.OnCutoverStep = f }

// cutoverStep returns the cut-over's current step, "" when none runs.
func (e *Engine) cutoverStep() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.co == nil {
		return ""
	}
	return e.co.Step
}

func (e *Engine) cutoverRecord() checkpoint.CutoverRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	return *e.co
}

// advanceCutover changes the cut-over's state with set and records it.
func (e *Engine) advanceCutover(ctx context.Context, set func(*checkpoint.CutoverRecord)) error {
	e.mu.Lock()
	c := *e.co
	set(&c)
	e.co = &c
	e.mu.Unlock()
	if err := e.store.SetCutover(ctx, c); err != nil {
		return err
	}
	e.log.Info("cut-over", "step", c.Step, "caughtUp", c.CaughtUp, "writesBlocked", c.WritesBlocked, "sourceTS", c.SourceTS)
	if e.opts.OnCutoverStep != nil {
		e.opts.OnCutoverStep(c.Step)
	}
	return nil
}

// failCutover records that the cut-over failed at its step, with why; the
// next run starts it over. A step cut short because the run is stopping
// (ctx ended: a signal, a lost lease) is not a failure: it stays recorded
// as it is, and the next run goes on from it.
func (e *Engine) failCutover(ctx context.Context, err error) error {
	step := e.cutoverStep()
	if ctx.Err() != nil {
		return fmt.Errorf("cut-over, step %s: %w", step, err)
	}
	_ = e.advanceCutover(context.Background(), func(c *checkpoint.CutoverRecord) {
		c.Step, c.Message = workerapi.CutoverFailed, fmt.Sprintf("%s: %v", step, err)
	})
	return fmt.Errorf("%w, step %s: %w", ErrCutoverFailed, step, err)
}

// lagGate reports whether replay is close enough to the source for the
// cut-over to leave CatchingUp (lag at most maxLag seconds, measured from
// a fresh read of the source's newest position), and otherwise what it
// waits for. A lag not known yet never passes: it is not a small one.
func lagGate(s replay.Status, maxLag int, fresh bool) (bool, string) {
	switch {
	case !s.LagKnown():
		return false, fmt.Sprintf("lag unknown (%s); the cut-over goes on once it is at most %ds", s.LagUnknown, maxLag)
	case s.LagSeconds > float64(maxLag):
		return false, fmt.Sprintf("lag %s; the cut-over goes on once it is at most %ds", s.LagText(), maxLag)
	case !fresh:
		return false, fmt.Sprintf("lag %s by a read of the source's newest position made before the cut-over was asked for; waiting for a newer one", s.LagText())
	}
	return true, ""
}

// driveCutover runs the cut-over's steps that need replay running:
// CatchingUp, BlockingWrites and Draining. It returns nil once replay has
// applied everything up to the drain position and may stop.
func (e *Engine) driveCutover(ctx context.Context, r Replayer) error {
	if e.cutoverStep() == workerapi.CutoverCatchingUp {
		// Recorded first, so that the task record says a cut-over runs.
		if err := e.advanceCutover(ctx, func(*checkpoint.CutoverRecord) {}); err != nil {
			return err
		}
	}
	tick := time.NewTicker(cutoverPoll)
	defer tick.Stop()
	for {
		c := e.cutoverRecord()
		switch c.Step {
		case workerapi.CutoverCatchingUp:
			pass, why := lagGate(r.Status(), e.task.Cutover.MaxLagSeconds, e.freshNewest(e.tailer.Load()))
			if pass {
				next := workerapi.CutoverDraining
				if e.task.Cutover.BlockSourceWrites {
					next = workerapi.CutoverBlockingWrites
				}
				if err := e.advanceCutover(ctx, func(c *checkpoint.CutoverRecord) { c.CaughtUp, c.Step, c.Message = true, next, "" }); err != nil {
					return err
				}
				continue
			}
			e.setCutoverMessage(why)
		case workerapi.CutoverBlockingWrites:
			if err := source.SetUserWriteBlock(ctx, e.source, true); err != nil {
				return e.failCutover(ctx, err)
			}
			if err := e.advanceCutover(ctx, func(c *checkpoint.CutoverRecord) { c.WritesBlocked, c.Step = true, workerapi.CutoverDraining }); err != nil {
				return err
			}
			continue
		case workerapi.CutoverDraining:
			if c.SourceTS.IsZero() {
				ts, err := source.NewestTS(ctx, e.source)
				if err != nil {
					return err
				}
				if ts.IsZero() {
					// An empty oplog: nothing to drain beyond what is applied.
					ts = r.Checkpoint()
				}
				if err := e.advanceCutover(ctx, func(c *checkpoint.CutoverRecord) { c.SourceTS = ts }); err != nil {
					return err
				}
				continue
			}
			if r.Checkpoint().Compare(c.SourceTS) >= 0 && r.Status().InFlight == 0 {
				e.log.Info("drained to the source's newest position", "ts", c.SourceTS)
				return nil
			}
			e.setCutoverMessage(fmt.Sprintf("replaying up to the source's newest position %d,%d", c.SourceTS.T, c.SourceTS.I))
		default:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func (e *Engine) setCutoverMessage(m string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.co != nil {
		e.co.Message = m
	}
}

// finishCutover runs the steps after the drain: Verifying, Finalizing and
// Complete, skipping those a previous run finished.
func (e *Engine) finishCutover(ctx context.Context) error {
	if e.cutoverStep() == workerapi.CutoverDraining {
		rec, err := e.store.Task(ctx)
		if err != nil {
			return err
		}
		// Replay saved its last checkpoint when it stopped; one that had
		// nothing to apply resumes from its start position.
		if e.sharded {
			if err := e.checkShardsDrained(ctx); err != nil {
				return err
			}
		} else if c, at := e.cutoverRecord(), rec.ResumeTS(); c.SourceTS.IsZero() || at.Compare(c.SourceTS) < 0 {
			return fmt.Errorf("cut-over: the checkpoint %d,%d is below the drain position %d,%d", at.T, at.I, c.SourceTS.T, c.SourceTS.I)
		}
		if err := e.advanceCutover(ctx, func(c *checkpoint.CutoverRecord) { c.Step, c.Message = workerapi.CutoverVerifying, "" }); err != nil {
			return err
		}
	}
	if e.cutoverStep() == workerapi.CutoverVerifying {
		mode := e.task.Cutover.Verify
		if mode != config.VerifyNone {
			rep, err := e.verifyWith(ctx, mode)
			if err != nil {
				return err
			}
			v := &checkpoint.CutoverVerify{Mode: string(mode), OK: rep.OK()}
			for _, n := range rep.Namespaces {
				if !n.OK {
					v.Differing = append(v.Differing, n.Source.String())
				}
			}
			if err := e.advanceCutover(ctx, func(c *checkpoint.CutoverRecord) { c.Verify = v }); err != nil {
				return err
			}
			if !v.OK {
				if late := e.writesAfterDrain(ctx); late != "" {
					return e.failCutover(ctx, fmt.Errorf("%w: %v differ: %s", ErrVerificationFailed, v.Differing, late))
				}
				return e.failCutover(ctx, fmt.Errorf("%w: %v differ; the source stays as it is: fix or re-copy them, then request the cut-over again", ErrVerificationFailed, v.Differing))
			}
		}
		if err := e.advanceCutover(ctx, func(c *checkpoint.CutoverRecord) { c.Step = workerapi.CutoverFinalizing }); err != nil {
			return err
		}
	}
	if e.cutoverStep() == workerapi.CutoverFinalizing {
		if err := e.finalizeTarget(ctx); err != nil {
			return e.failCutover(ctx, fmt.Errorf("finalize the target: %w", err))
		}
		targetTS, err := e.targetPosition(ctx)
		if err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Millisecond)
		if err := e.advanceCutover(ctx, func(c *checkpoint.CutoverRecord) {
			c.Step, c.TargetTS, c.FinishedAt, c.Message = workerapi.CutoverComplete, targetTS, now, ""
		}); err != nil {
			return err
		}
	}
	return nil
}

// writesAfterDrain says why a verification after the drain may have
// failed when source writes were not blocked: a source oplog's newest
// entry is past its drain position (each shard's, for a sharded source),
// so the application kept writing. "" when writes were blocked, nothing
// was written after the drain, or the newest entries cannot be read.
func (e *Engine) writesAfterDrain(ctx context.Context) string {
	if e.task.Cutover.BlockSourceWrites {
		return ""
	}
	late := func(where string, drained, newest bson.Timestamp) string {
		return fmt.Sprintf("the source took writes after the drain position%s %d,%d (its newest entry is %d,%d), which the target does not have yet; "+
			"nothing is lost: stop the application's writes to the source (or block them with blockSourceWrites: true on MongoDB 6.0 or later), "+
			"then request the cut-over again, and replay goes on from where it stopped", where, drained.T, drained.I, newest.T, newest.I)
	}
	if !e.sharded {
		drained := e.cutoverRecord().SourceTS
		if newest, err := source.NewestTS(ctx, e.source); err == nil && newest.Compare(drained) > 0 {
			return late("", drained, newest)
		}
		return ""
	}
	recs, err := e.store.Shards(ctx)
	if err != nil {
		return ""
	}
	for _, st := range e.subtaskList() {
		drained := recs[st.shard.Name].CutoverOf(e.cutoverAttempt()).DrainTS
		if drained.IsZero() {
			continue
		}
		if newest, err := source.NewestTS(ctx, st.client); err == nil && newest.Compare(drained) > 0 {
			return late(" of shard "+st.shard.Name, drained, newest)
		}
	}
	return ""
}

// targetPosition is the target's newest oplog position (its current time
// when its oplog is empty): a reverse sync replays the target's oplog
// after it.
func (e *Engine) targetPosition(ctx context.Context) (bson.Timestamp, error) {
	ts, _, err := source.StartPosition(ctx, e.target)
	if err != nil {
		e.log.Warn("the target's oplog position is unknown: a reverse sync cannot start from the cut-over", "err", err)
		return bson.Timestamp{}, nil
	}
	return ts, nil
}

// cutoverStatus is the cut-over as /status reports it. Called with e.mu
// held.
func (e *Engine) cutoverStatus() *workerapi.Cutover {
	if e.co == nil {
		return nil
	}
	c := e.co
	s := &workerapi.Cutover{Step: c.Step, CaughtUp: c.CaughtUp, WritesBlocked: c.WritesBlocked, StartedAt: c.StartedAt, Message: c.Message}
	if !c.SourceTS.IsZero() {
		s.SourcePosition = &workerapi.Timestamp{T: c.SourceTS.T, I: c.SourceTS.I}
	}
	if !c.TargetTS.IsZero() {
		s.TargetPosition = &workerapi.Timestamp{T: c.TargetTS.T, I: c.TargetTS.I}
	}
	if !c.FinishedAt.IsZero() {
		at := c.FinishedAt
		s.FinishedAt = &at
	}
	switch {
	case c.Verify != nil:
		s.Verify = &workerapi.Verify{Mode: c.Verify.Mode, OK: c.Verify.OK, Differing: c.Verify.Differing}
	case c.Step == workerapi.CutoverVerifying:
		s.Verify = &workerapi.Verify{Mode: string(e.task.Cutover.Verify), Running: true,
			CurrentNS: e.verifyProg.NS, Done: e.verifyProg.Done, Total: e.verifyProg.Total}
	}
	return s
}
