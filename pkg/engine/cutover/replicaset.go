package cutover

import (
	"context"
	"fmt"
	"time"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// Drive runs the cut-over's steps that need replay running: CatchingUp,
// BlockingWrites and Draining, for a replica-set source. fresh reports
// whether the newest position replay's lag is measured from was read
// after the cut-over was asked for. It returns nil once replay has
// applied everything up to the drain position and may stop.
func (m *Machine) Drive(ctx context.Context, r Replay, src Source, fresh func() bool) error {
	if m.Step() == workerapi.CutoverCatchingUp {
		// Recorded first, so that the task record says a cut-over runs.
		if err := m.Advance(ctx, func(*checkpoint.CutoverRecord) {}); err != nil {
			return err
		}
	}
	tick := time.NewTicker(Poll)
	defer tick.Stop()
	for {
		done, err := m.driveOnce(ctx, r, src, fresh)
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// driveOnce takes the steps Drive runs as far as they go now: done once
// the drain is over (or the step is past it).
func (m *Machine) driveOnce(ctx context.Context, r Replay, src Source, fresh func() bool) (done bool, err error) {
	for {
		c := m.Record()
		switch c.Step {
		case workerapi.CutoverCatchingUp:
			pass, why := LagGate(r.Status(), m.opts.MaxLagSeconds, fresh())
			if !pass {
				m.SetMessage(why)
				return false, nil
			}
			if err := m.Advance(ctx, func(c *checkpoint.CutoverRecord) { c.CaughtUp, c.Step, c.Message = true, m.afterCatchUp(), "" }); err != nil {
				return false, err
			}
		case workerapi.CutoverBlockingWrites:
			if err := src.BlockWrites(ctx); err != nil {
				return false, m.Fail(ctx, err)
			}
			if err := m.Advance(ctx, func(c *checkpoint.CutoverRecord) { c.WritesBlocked, c.Step = true, workerapi.CutoverDraining }); err != nil {
				return false, err
			}
		case workerapi.CutoverDraining:
			if c.SourceTS.IsZero() {
				ts, err := src.NewestTS(ctx, "")
				if err != nil {
					return false, err
				}
				if ts.IsZero() {
					// An empty oplog: nothing to drain beyond what is applied.
					ts = r.Checkpoint()
				}
				if err := m.Advance(ctx, func(c *checkpoint.CutoverRecord) { c.SourceTS = ts }); err != nil {
					return false, err
				}
				continue
			}
			if r.Checkpoint().Compare(c.SourceTS) >= 0 && r.Status().InFlight == 0 {
				m.log.Info("drained to the source's newest position", "ts", c.SourceTS)
				return true, nil
			}
			m.SetMessage(fmt.Sprintf("replaying up to the source's newest position %d,%d", c.SourceTS.T, c.SourceTS.I))
			return false, nil
		default:
			return true, nil
		}
	}
}

// afterCatchUp is the step after CatchingUp.
func (m *Machine) afterCatchUp() string {
	if m.opts.BlockSourceWrites {
		return workerapi.CutoverBlockingWrites
	}
	return workerapi.CutoverDraining
}

// Finish runs the steps after the drain: Verifying, Finalizing and
// Complete, skipping those a previous run finished.
func (m *Machine) Finish(ctx context.Context, t Target) error {
	if m.Step() == workerapi.CutoverDraining {
		if err := t.CheckDrained(ctx, m.Record()); err != nil {
			return err
		}
		if err := m.Advance(ctx, func(c *checkpoint.CutoverRecord) { c.Step, c.Message = workerapi.CutoverVerifying, "" }); err != nil {
			return err
		}
	}
	if m.Step() == workerapi.CutoverVerifying {
		if err := m.verify(ctx, t); err != nil {
			return err
		}
		if err := m.Advance(ctx, func(c *checkpoint.CutoverRecord) { c.Step = workerapi.CutoverFinalizing }); err != nil {
			return err
		}
	}
	if m.Step() == workerapi.CutoverFinalizing {
		if err := t.Finalize(ctx); err != nil {
			return m.Fail(ctx, fmt.Errorf("finalize the target: %w", err))
		}
		targetTS, err := t.Position(ctx)
		if err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Millisecond)
		if err := m.Advance(ctx, func(c *checkpoint.CutoverRecord) {
			c.Step, c.TargetTS, c.FinishedAt, c.Message = workerapi.CutoverComplete, targetTS, now, ""
		}); err != nil {
			return err
		}
	}
	return nil
}

// verify runs the Verifying step's comparison, records its outcome and
// fails the cut-over on a difference.
func (m *Machine) verify(ctx context.Context, t Target) error {
	mode := m.opts.Verify
	if mode == config.VerifyNone {
		return nil
	}
	differing, err := t.Verify(ctx, mode)
	if err != nil {
		return err
	}
	v := &checkpoint.CutoverVerify{Mode: string(mode), OK: len(differing) == 0, Differing: differing}
	if err := m.Advance(ctx, func(c *checkpoint.CutoverRecord) { c.Verify = v }); err != nil {
		return err
	}
	if v.OK {
		return nil
	}
	if late := t.WritesAfterDrain(ctx, m.Record()); late != "" {
		return m.Fail(ctx, fmt.Errorf("%w: %v differ: %s", m.errVerify, v.Differing, late))
	}
	return m.Fail(ctx, fmt.Errorf("%w: %v differ; the source stays as it is: fix or re-copy them, then request the cut-over again", m.errVerify, v.Differing))
}
