package engine

import (
	"context"
	"fmt"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/holdback"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
)

// verify runs the task's own verification (verify.mode) in the Verifying
// phase, and fails with ErrVerificationFailed on a difference.
func (e *Engine) verify(ctx context.Context) error {
	rep, err := e.verifyWith(ctx, e.task.Verify.Mode)
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("%w: see the verification report", ErrVerificationFailed)
	}
	return nil
}

// verifyWith compares the target with the source in mode and keeps the
// report for VerifyReport.
func (e *Engine) verifyWith(ctx context.Context, mode config.VerifyMode) (*verify.Report, error) {
	spec := &e.task.Spec
	colls, err := catalog.List(ctx, e.source, e.mapper)
	if err != nil {
		return nil, err
	}
	rep, err := verify.Run(ctx, e.source, e.target, colls, verify.Options{
		Mode: mode, SampleSize: spec.Verify.SampleSize,
		Progress: func(ns, _ string, done, total int64) {
			e.mu.Lock()
			e.verifyProg = verifyProgress{NS: ns, Done: done, Total: total}
			e.mu.Unlock()
		},
	})
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	e.mu.Lock()
	e.verifyRes = rep
	e.mu.Unlock()
	return rep, nil
}

// VerifyReport returns the last verification report, or nil.
func (e *Engine) VerifyReport() *verify.Report {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.verifyRes
}

// restoreDeferred puts back on the target the options the sync deferred
// (TTL expiries, capped limits, late unique indexes: package holdback,
// which records each as a holdback.Held) once a replaying run ends caught
// up. A worker that runs one shard's subtask leaves it to the cut-over,
// which runs once every shard caught up. What the target cannot take
// back is logged with its manual fix and stays listed by
// holdback.Pending. Not to be confused with the writes replay holds
// after a chunk migration (package replay, the shard board).
func (e *Engine) restoreDeferred(ctx context.Context) error {
	if e.streaming.partial() {
		return nil
	}
	return e.finalizeTarget(ctx)
}

// finalizeTarget restores on the target the options the sync deferred so
// that the target's data would not change under replay (package
// holdback). The cut-over runs it once the target is drained and
// verified, and again after a restart in the Finalizing step:
// holdback.Restore is idempotent.
func (e *Engine) finalizeTarget(ctx context.Context) error {
	rep, err := holdback.Restore(ctx, e.target, e.task.Checkpoint.Database, e.task.Name)
	if err != nil {
		return err
	}
	for _, h := range rep.Restored {
		e.log.InfoContext(ctx, "restored what the sync held back", "ns", h.NS, "held", h.String())
	}
	for _, h := range rep.Gone {
		e.log.InfoContext(ctx, "held-back option of a collection or index the target no longer has", "ns", h.NS, "held", h.String())
	}
	for _, m := range rep.Manual {
		e.log.WarnContext(ctx, "the target cannot take back what the sync held back; restore it by hand", "ns", m.Held.NS, "held", m.Held.String(), "fix", m.Note)
	}
	return nil
}
