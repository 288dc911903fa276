package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/cutover"
	"github.com/mongoferry/mongoferry/pkg/engine/holdback"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// The cut-over's steps are package cutover's state machine; this file
// gives it the engine's parts (the source, the target, the subtasks)
// through cutoverDriver.

// ErrCutoverNotSupported is returned for a cut-over this build cannot
// run.
var ErrCutoverNotSupported = cutover.ErrNotSupported

// ErrCutoverFailed wraps the error a cut-over step failed on, once the
// failure is recorded: running the same request again fails again until
// something changes (the request's options, the deployment).
var ErrCutoverFailed = cutover.ErrFailed

// cutoverDriver runs the task's cut-over: it owns package cutover's
// Machine and gives it what the steps after the drain need
// (cutoverTarget), and restores on the target the options the sync
// deferred. The streamers drive the steps that need replay running with
// the machine itself. The run's streamer and verification, made after the
// machine (they are given it), are attached once Open made them.
type cutoverDriver struct {
	task    *config.Task
	log     *slog.Logger
	target  *mongo.Client
	machine *cutover.Machine
	// finish is told when a cut-over began (finishRequest.began).
	finish *finishRequest
	// onStep is Options.OnCutoverStep (SetCutoverHook).
	onStep func(step string)
	// streaming and verification are the run's (attach).
	streaming    streamer
	verification *verification
}

// newCutoverDriver makes the engine's cut-over machine, once the store is
// open.
func newCutoverDriver(task *config.Task, store *checkpoint.Store, target *mongo.Client, log *slog.Logger, finish *finishRequest, onStep func(string)) *cutoverDriver {
	d := &cutoverDriver{task: task, log: log, target: target, finish: finish, onStep: onStep}
	d.machine = cutover.New(cutover.Config{
		Options: &task.Cutover, Store: store, Log: log, ErrVerify: ErrVerificationFailed,
		OnStep: func(step string) {
			if d.onStep != nil {
				d.onStep(step)
			}
		},
	})
	return d
}

// attach gives the driver the run's streamer and verification.
func (d *cutoverDriver) attach(s streamer, v *verification) { d.streaming, d.verification = s, v }

// check refuses, before anything is written, a cut-over this build
// cannot run.
func (d *cutoverDriver) check() error { return cutover.Check(d.task) }

// load sets the cut-over's state from the task record at the start of a
// run (cutover.Machine.Load).
func (d *cutoverDriver) load(rec checkpoint.TaskRecord) {
	if !d.machine.Load(rec) {
		return
	}
	// The newest position a cut-over trusts is one read after it began.
	d.finish.began()
}

// SetCutoverHook sets Options.OnCutoverStep on an opened engine, before
// Run (tests that stop the run from the hook need the engine first).
func (e *Engine) SetCutoverHook(f func(step string)) { e.cut.onStep = f }

// step returns the cut-over's current step, "" when none runs.
func (d *cutoverDriver) step() string { return d.machine.Step() }

// finishSteps runs the steps after the drain: Verifying, Finalizing and
// Complete, skipping those a previous run finished.
func (d *cutoverDriver) finishSteps(ctx context.Context) error {
	return d.machine.Finish(ctx, cutoverTarget{task: d.task, streaming: d.streaming, verification: d.verification,
		finalize: d.finalizeTarget, position: d.targetPosition})
}

// status is the cut-over as /status reports it, with p the progress of
// the verification that runs. Called with runState.mu held.
func (d *cutoverDriver) status(p verifyProgress) *workerapi.Cutover {
	if d == nil {
		return nil
	}
	return d.machine.Status(cutover.Progress{NS: p.NS, Done: p.Done, Total: p.Total})
}

// running reports whether a cut-over runs: its verification is then the
// one /status reports.
func (d *cutoverDriver) running() bool { return d != nil && d.machine.Running() }

// cutoverSource is a replica set as the cut-over acts on it (a sharded
// source's is shardCutoverSource).
type cutoverSource struct{ source *mongo.Client }

// BlockWrites blocks the source's user writes.
func (s cutoverSource) BlockWrites(ctx context.Context) error {
	return source.SetUserWriteBlock(ctx, s.source, true)
}

// NewestTS reads the newest oplog position of the source; a replica set
// has no shard connections.
func (s cutoverSource) NewestTS(ctx context.Context, shard string) (bson.Timestamp, error) {
	if shard == "" {
		return source.NewestTS(ctx, s.source)
	}
	return bson.Timestamp{}, errors.New("it has a record but no connection")
}

// cutoverTarget is the target and the records as the steps after the
// drain see them.
type cutoverTarget struct {
	task         *config.Task
	streaming    streamer
	verification *verification
	// finalize restores the options the sync deferred (finalizeTarget);
	// position is the target's newest oplog position (targetPosition).
	finalize func(ctx context.Context) error
	position func(ctx context.Context) (bson.Timestamp, error)
}

// CheckDrained fails unless replay saved its checkpoint at or past the
// drain position (every shard's, for a sharded source). Replay saved its
// last checkpoint when it stopped; one that had nothing to apply resumes
// from its start position.
func (t cutoverTarget) CheckDrained(ctx context.Context, c checkpoint.CutoverRecord) error {
	return t.streaming.CheckDrained(ctx, c)
}

// Verify compares the target with the source and names the namespaces
// that differ.
func (t cutoverTarget) Verify(ctx context.Context, mode config.VerifyMode) ([]string, error) {
	rep, err := t.verification.verifyWith(ctx, mode)
	if err != nil {
		return nil, err
	}
	var differing []string
	for _, n := range rep.Namespaces {
		if !n.OK {
			differing = append(differing, n.Source.String())
		}
	}
	return differing, nil
}

// WritesAfterDrain says why a verification after the drain may have
// failed when source writes were not blocked: a source oplog's newest
// entry is past its drain position (each shard's, for a sharded source),
// so the application kept writing. "" when writes were blocked, nothing
// was written after the drain, or the newest entries cannot be read.
func (t cutoverTarget) WritesAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) string {
	if t.task.Cutover.BlockSourceWrites {
		return ""
	}
	if where, drained, newest, ok := t.streaming.NewestAfterDrain(ctx, c); ok {
		return fmt.Sprintf("the source took writes after the drain position%s %d,%d (its newest entry is %d,%d), which the target does not have yet; "+
			"nothing is lost: stop the application's writes to the source (or block them with blockSourceWrites: true on MongoDB 6.0 or later), "+
			"then request the cut-over again, and replay goes on from where it stopped", where, drained.T, drained.I, newest.T, newest.I)
	}
	return ""
}

// Finalize restores on the target the options the sync deferred.
func (t cutoverTarget) Finalize(ctx context.Context) error { return t.finalize(ctx) }

// restoreDeferred puts back on the target the options the sync deferred
// (TTL expiries, capped limits, late unique indexes: package holdback,
// which records each as a holdback.Held) once a replaying run ends caught
// up. A worker that runs one shard's subtask leaves it to the cut-over,
// which runs once every shard caught up. What the target cannot take
// back is logged with its manual fix and stays listed by
// holdback.Pending. Not to be confused with the writes replay holds
// after a chunk migration (package replay, the shard board).
func (d *cutoverDriver) restoreDeferred(ctx context.Context) error {
	if d.streaming.Partial() {
		return nil
	}
	return d.finalizeTarget(ctx)
}

// finalizeTarget restores on the target the options the sync deferred so
// that the target's data would not change under replay (package
// holdback). The cut-over runs it once the target is drained and
// verified, and again after a restart in the Finalizing step:
// holdback.Restore is idempotent.
func (d *cutoverDriver) finalizeTarget(ctx context.Context) error {
	rep, err := holdback.Restore(ctx, d.target, d.task.Checkpoint.Database, d.task.Name)
	if err != nil {
		return err
	}
	for _, h := range rep.Restored {
		d.log.InfoContext(ctx, "restored what the sync held back", "ns", h.NS, "held", h.String())
	}
	for _, h := range rep.Gone {
		d.log.InfoContext(ctx, "held-back option of a collection or index the target no longer has", "ns", h.NS, "held", h.String())
	}
	for _, m := range rep.Manual {
		d.log.WarnContext(ctx, "the target cannot take back what the sync held back; restore it by hand", "ns", m.Held.NS, "held", m.Held.String(), "fix", m.Note)
	}
	return nil
}

// Position is the target's newest oplog position (targetPosition).
func (t cutoverTarget) Position(ctx context.Context) (bson.Timestamp, error) {
	return t.position(ctx)
}

// targetPosition is the target's newest oplog position (its current time
// when its oplog is empty): a reverse sync replays the target's oplog
// after it.
func (d *cutoverDriver) targetPosition(ctx context.Context) (bson.Timestamp, error) {
	ts, _, err := source.StartPosition(ctx, d.target)
	if err != nil {
		d.log.Warn("the target's oplog position is unknown: a reverse sync cannot start from the cut-over", "err", err)
		return bson.Timestamp{}, nil
	}
	return ts, nil
}

// ErrTargetWritesBlocked is returned when the target refuses writes
// because its user writes are blocked (setUserWriteBlockMode), as a
// cut-over with blockSourceWrites leaves the old source that a reverse
// sync then writes to.
var ErrTargetWritesBlocked = errors.New("the target's user writes are blocked")

// explainBlockedWrites says what to do about a write the target refused
// because its user writes are blocked: nothing it refused was written.
func explainBlockedWrites(err error) error {
	if err == nil || !sink.HasCode(err, sink.CodeUserWritesBlocked) {
		return err
	}
	return fmt.Errorf("%w (setUserWriteBlockMode; a cut-over with blockSourceWrites leaves the old source so, and a reverse sync writes to it): "+
		"the refused writes were not applied and the task stopped; give the target's user a role with the bypassWriteBlockingMode privilege "+
		"(its writes then go through while the application's stay blocked), or unblock the target's writes with "+
		"db.adminCommand({setUserWriteBlockMode: 1, global: false}), then run the task again: %w", ErrTargetWritesBlocked, err)
}
