package engine

import (
	"context"
	"fmt"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
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
