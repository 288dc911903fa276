package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
)

// verification compares the target with the source: the task's own
// verification (verify.mode) in the Verifying phase, the cut-over's, and
// the streaming verifier's passes while replay runs (streamverify.go). It
// keeps, behind its own mutex, the last report, the progress of the
// comparison that runs, and the streaming verifier with the context of
// the replay a pass may run under. What it knows of the run is given when
// Open makes it: whether this process replays one shard only, the
// replay's status and the positions the streaming verifier asks about.
type verification struct {
	task *config.Task
	// endpoints: the source, the target and the mapper.
	endpoints
	log *slog.Logger
	// partial says that this process replays one shard only
	// (streamer.partial): the other shards' positions are not its to judge.
	partial bool
	// replayStatus returns the replay's status, nil while replay does not
	// run.
	replayStatus func() *replay.Status
	// positions answer the streaming verifier (replayPositions).
	positions verify.Positions

	// mu may be taken with runState.mu held (Status); nothing is called
	// with it held that takes runState.mu.
	mu         sync.Mutex
	verifyRes  *verify.Report
	verifyProg verifyProgress
	// sv is the streaming verifier (made on first use), svCtx the
	// context of the replay it may run under (nil while not streaming).
	sv    *verify.Streamer
	svCtx context.Context //nolint:containedctx // the running replay's, for passes started over HTTP
}

type verifyProgress struct {
	NS          string
	Done, Total int64
}

// verify runs the task's own verification (verify.mode) in the Verifying
// phase, and fails with ErrVerificationFailed on a difference.
func (v *verification) verify(ctx context.Context) error {
	rep, err := v.verifyWith(ctx, v.task.Verify.Mode)
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
func (v *verification) verifyWith(ctx context.Context, mode config.VerifyMode) (*verify.Report, error) {
	spec := &v.task.Spec
	colls, err := catalog.List(ctx, v.source, v.mapper)
	if err != nil {
		return nil, err
	}
	rep, err := verify.Run(ctx, v.source, v.target, colls, verify.Options{
		Mode: mode, SampleSize: spec.Verify.SampleSize,
		Progress: func(ns, _ string, done, total int64) {
			v.mu.Lock()
			v.verifyProg = verifyProgress{NS: ns, Done: done, Total: total}
			v.mu.Unlock()
		},
	})
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	v.mu.Lock()
	v.verifyRes = rep
	v.mu.Unlock()
	return rep, nil
}

// last returns the last verification report, or nil, and the progress
// of the comparison that runs.
func (v *verification) last() (*verify.Report, verifyProgress) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.verifyRes, v.verifyProg
}

// VerifyReport returns the last verification report, or nil.
func (e *Engine) VerifyReport() *verify.Report {
	rep, _ := e.verification.last()
	return rep
}
