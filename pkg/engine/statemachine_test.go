package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// What the fakes do when the engine runs them.
type act int

const (
	// actDone: the copy finishes; replay catches up and runs until the
	// engine stops it.
	actDone act = iota + 1
	// actFail: an error that stops the task (the copy's or a fatal replay
	// error).
	actFail
	// actWindowLost: replay finds its position gone from the source's
	// oplog (the tailer's source.ErrOplogWindowLost).
	actWindowLost
	// actSuspend: the worker is stopped here, as the operator does when a
	// task is suspended (its context ends); nothing fails.
	actSuspend
	// actOld: replay saves a checkpoint older than anything in the
	// source's oplog, then the worker is stopped.
	actOld
)

var (
	errCopy  = errors.New("copy shop.orders: insert: the target refused the write (fatal)")
	errApply = errors.New("apply app.items: fatal: document failed validation")
)

// fakeCopier stands in for fullsync.Copier.
type fakeCopier struct {
	act     act
	suspend context.CancelFunc
	runs    int
}

func (c *fakeCopier) Preflight(context.Context) error { return nil }

func (c *fakeCopier) Copied(string, string, int64, int64) {}

func (c *fakeCopier) HelpCopy(context.Context) (int, error) { return 0, nil }
func (c *fakeCopier) HelpDone(context.Context) error        { return nil }

func (c *fakeCopier) Run(ctx context.Context) error {
	c.runs++
	switch c.act {
	case actFail:
		return errCopy
	case actSuspend:
		c.suspend()
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (c *fakeCopier) Status() fullsync.Status { return fullsync.Status{Stage: "done"} }

// fakeReplayer stands in for replay.Replayer: it saves a checkpoint as
// the real one does, in the store it is given, one step past where it
// starts (or, with actOld, before the source's oplog).
type fakeReplayer struct {
	act     act
	suspend context.CancelFunc
	opts    replay.Options

	mu      sync.Mutex
	applied bson.Timestamp
}

func (r *fakeReplayer) Run(ctx context.Context) error {
	to := bson.Timestamp{T: r.opts.From.T, I: r.opts.From.I + 1}
	if r.act == actOld {
		to = bson.Timestamp{T: 1, I: 1}
	}
	if err := r.opts.Store.SaveApplied(ctx, to); err != nil {
		return err
	}
	r.mu.Lock()
	r.applied = to
	r.mu.Unlock()
	switch r.act {
	case actFail:
		return errApply
	case actWindowLost:
		return fmt.Errorf("tail the oplog after %d,%d: %w", to.T, to.I, source.ErrOplogWindowLost)
	case actSuspend, actOld:
		r.suspend()
	}
	<-ctx.Done()
	return ctx.Err()
}

func (r *fakeReplayer) Status() replay.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return replay.Status{AppliedTS: r.applied, NewestTS: r.applied, NewestKnown: !r.applied.IsZero()}
}

func (r *fakeReplayer) Checkpoint() bson.Timestamp {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

// smRun is one run of a task (a process start): what the fakes do, and
// what the user sees afterwards.
type smRun struct {
	copier, replayer act
	// differ: the source holds a document the copy leaves out, so
	// verification finds a difference.
	differ bool

	phases []Phase
	err    error // errors.Is; nil: Run returns nil; context.Canceled: stopped
	// The checkpoint record: phase, copy done, and where replay resumes
	// ("start": the recorded start position; "step": one past where this
	// run's replay started; "old": before the oplog; "": none).
	phase    Phase
	copyDone bool
	applied  string
	// from is where this run's replay started: "start" or "previous" (the
	// checkpoint the previous run saved); "" when it did not stream.
	from string
	// stopIn stops the worker as soon as the task enters this phase (and
	// its record is written), as the operator's scale-down does.
	stopIn Phase
}

// TestStateMachine walks the engine's phases with a fake copier and a
// fake replayer over real servers: a FerretDB source (with an oplog) and
// target hold the task's checkpoint, the replay start position, the
// catalog, the oplog window check and the verification, as in production;
// the fakes stand in for the copy and the oplog replay, so that each can
// finish, fail or be stopped on cue. A case is one or more runs of the
// same task, each a process start resuming from what the previous one
// left; after each run it checks the phases the task went through, Run's
// error and the checkpoint record a user (or the operator) reads.
func TestStateMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	if _, err := testserver.Binary(); err != nil {
		t.Skip(err)
	}
	src, dst := testserver.Start(t), testserver.Start(t, testserver.Options{OplogBytes: -1})
	sc := src.MustClient(t)
	// Oplog entries outside every task's namespaces: the oplog is not
	// empty, so a start position is an entry's ts and a checkpoint before
	// the oldest entry is out of the window.
	if _, err := sc.Database("other").Collection("x").InsertOne(t.Context(), bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}

	const (
		pending   = PhasePending
		fullSync  = PhaseFullSync
		streaming = PhaseStreaming
		verifying = PhaseVerifying
		completed = PhaseCompleted
		failed    = PhaseFailed
	)
	tests := []struct {
		name string
		mode config.Mode
		runs []smRun
	}{
		{"full: copy, verify, complete", config.ModeFull, []smRun{
			{copier: actDone, phases: []Phase{pending, fullSync, verifying, completed}, phase: completed, copyDone: true},
		}},
		{"full: complete, then a restarted worker stopped while it verifies again: the record stays Completed", config.ModeFull, []smRun{
			{copier: actDone, phases: []Phase{pending, fullSync, verifying, completed}, phase: completed, copyDone: true},
			{stopIn: verifying, phases: []Phase{pending, verifying}, err: context.Canceled, phase: completed, copyDone: true},
			{phases: []Phase{pending, verifying, completed}, phase: completed, copyDone: true},
		}},
		{"full: verification finds a difference", config.ModeFull, []smRun{
			{copier: actDone, differ: true, phases: []Phase{pending, fullSync, verifying, failed}, err: ErrVerificationFailed,
				phase: failed, copyDone: true},
		}},
		{"copy, stream until caught up, verify, complete", config.ModeFullAndIncremental, []smRun{
			{copier: actDone, replayer: actDone, phases: []Phase{pending, fullSync, streaming, verifying, completed},
				phase: completed, copyDone: true, applied: "step", from: "start"},
		}},
		{"incremental: no copy", config.ModeIncremental, []smRun{
			{replayer: actDone, phases: []Phase{pending, streaming, verifying, completed}, phase: completed, copyDone: true, applied: "step", from: "start"},
		}},
		{"the copy fails", config.ModeFullAndIncremental, []smRun{
			{copier: actFail, phases: []Phase{pending, fullSync, failed}, err: errCopy, phase: failed},
		}},
		{"a fatal replay error", config.ModeFullAndIncremental, []smRun{
			{copier: actDone, replayer: actFail, phases: []Phase{pending, fullSync, streaming, failed}, err: errApply,
				phase: failed, copyDone: true, applied: "step", from: "start"},
		}},
		{"OplogWindowLost while streaming", config.ModeFullAndIncremental, []smRun{
			{copier: actDone, replayer: actWindowLost, phases: []Phase{pending, fullSync, streaming, failed}, err: source.ErrOplogWindowLost,
				phase: failed, copyDone: true, applied: "step", from: "start"},
		}},
		{"suspended during the copy, resumed: the same start position", config.ModeFullAndIncremental, []smRun{
			{copier: actSuspend, phases: []Phase{pending, fullSync}, err: context.Canceled, phase: fullSync},
			{copier: actDone, replayer: actDone, phases: []Phase{pending, fullSync, streaming, verifying, completed},
				phase: completed, copyDone: true, applied: "step", from: "start"},
		}},
		{"suspended while streaming, resumed from the replay checkpoint without copying again", config.ModeFullAndIncremental, []smRun{
			{copier: actDone, replayer: actSuspend, phases: []Phase{pending, fullSync, streaming}, err: context.Canceled,
				phase: streaming, copyDone: true, applied: "step", from: "start"},
			{replayer: actDone, phases: []Phase{pending, streaming, verifying, completed},
				phase: completed, copyDone: true, applied: "step", from: "previous"},
		}},
		{"a failed task run again resumes where it failed", config.ModeFullAndIncremental, []smRun{
			{copier: actDone, replayer: actFail, phases: []Phase{pending, fullSync, streaming, failed}, err: errApply,
				phase: failed, copyDone: true, applied: "step", from: "start"},
			{replayer: actDone, phases: []Phase{pending, streaming, verifying, completed},
				phase: completed, copyDone: true, applied: "step", from: "previous"},
		}},
		{"resumed past the oplog window: OplogWindowLost before anything is written", config.ModeFullAndIncremental, []smRun{
			{copier: actDone, replayer: actOld, phases: []Phase{pending, fullSync, streaming}, err: context.Canceled,
				phase: streaming, copyDone: true, applied: "old", from: "start"},
			{phases: []Phase{pending, failed}, err: source.ErrOplogWindowLost, phase: streaming, copyDone: true, applied: "old"},
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := fmt.Sprintf("sm%d", i)
			task := &config.Task{Name: fmt.Sprintf("state-machine-%d", i), Spec: config.Spec{
				Mode:       tt.mode,
				Source:     config.Endpoint{URI: src.URI},
				Target:     config.Endpoint{URI: dst.URI},
				Namespaces: config.Namespaces{Include: []string{db + `\..*`}},
				Verify:     config.Verify{Mode: config.VerifyHash},
			}}
			task.SetDefaults()
			if err := task.Validate(); err != nil {
				t.Fatal(err)
			}
			// The task selects a collection (one selecting none fails).
			if err := sc.Database(db).CreateCollection(t.Context(), "items"); err != nil {
				t.Fatal(err)
			}
			store := checkpoint.NewStore(dst.MustClient(t), task.Checkpoint.Database, task.Name)
			var prev checkpoint.TaskRecord
			for n, want := range tt.runs {
				if want.differ {
					if _, err := sc.Database(db).Collection("items").InsertOne(t.Context(), bson.D{{Key: "_id", Value: n}}); err != nil {
						t.Fatal(err)
					}
				}
				got := runOnce(t, task, want)
				rec, err := store.Task(t.Context())
				if err != nil {
					t.Fatalf("run %d: %v", n+1, err)
				}
				checkRun(t, n+1, want, got, rec, prev)
				prev = rec
			}
		})
	}
}

// smResult is what one run did.
type smResult struct {
	phases  []Phase
	err     error
	copies  int
	from    bson.Timestamp
	streams bool
}

// runOnce opens the task, gives it the run's fakes and runs it.
func runOnce(t *testing.T, task *config.Task, want smRun) smResult {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	e, err := Open(ctx, task, Options{UntilCaughtUp: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	copier := &fakeCopier{act: want.copier, suspend: cancel}
	var res smResult
	e.copier = copier
	e.streaming.(*replicaSetStreamer).newReplayer = func(o replay.Options) Replayer {
		res.from, res.streams = o.From, true
		return &fakeReplayer{act: want.replayer, suspend: cancel, opts: o}
	}
	res.phases = []Phase{e.Status().Phase}
	e.state.onPhase = func(p Phase) {
		res.phases = append(res.phases, p)
		if p == want.stopIn {
			cancel()
		}
	}
	res.err = e.Run(ctx)
	if last := e.Status().Phase; last != res.phases[len(res.phases)-1] {
		res.phases = append(res.phases, last)
	}
	res.copies = copier.runs
	return res
}

// checkRun compares a run with what the case wants; prev is the record
// the previous run left.
func checkRun(t *testing.T, n int, want smRun, got smResult, rec, prev checkpoint.TaskRecord) {
	t.Helper()
	if !slices.Equal(got.phases, want.phases) {
		t.Errorf("run %d: phases %v, want %v", n, got.phases, want.phases)
	}
	switch {
	case want.err == nil && got.err != nil:
		t.Errorf("run %d: Run = %v, want nil", n, got.err)
	case want.err != nil && !errors.Is(got.err, want.err):
		t.Errorf("run %d: Run = %v, want %v", n, got.err, want.err)
	}
	if copied := slices.Contains(want.phases, PhaseFullSync); (got.copies > 0) != copied {
		t.Errorf("run %d: the copier ran %d times, want it to run: %v", n, got.copies, copied)
	}
	if Phase(rec.Phase) != want.phase || rec.CopyDone != want.copyDone {
		t.Errorf("run %d: checkpoint phase %s copyDone %v, want %s %v", n, rec.Phase, rec.CopyDone, want.phase, want.copyDone)
	}
	if want.from == "start" && !rec.HasStart() {
		t.Errorf("run %d: no replay start position recorded", n)
	}
	if !prev.StartTS.IsZero() && rec.StartTS != prev.StartTS {
		t.Errorf("run %d: start position %v, the previous run recorded %v: a resume keeps it", n, rec.StartTS, prev.StartTS)
	}
	var wantFrom bson.Timestamp
	switch want.from {
	case "start":
		wantFrom = rec.StartTS
	case "previous":
		wantFrom = prev.AppliedTS
	}
	if got.streams != (want.from != "") || got.from != wantFrom {
		t.Errorf("run %d: replay started %v from %v, want %q (%v)", n, got.streams, got.from, want.from, wantFrom)
	}
	var wantApplied bson.Timestamp
	switch want.applied {
	case "step":
		wantApplied = bson.Timestamp{T: got.from.T, I: got.from.I + 1}
	case "old":
		wantApplied = bson.Timestamp{T: 1, I: 1}
	}
	if rec.AppliedTS != wantApplied {
		t.Errorf("run %d: replay checkpoint %v, want %v (%s)", n, rec.AppliedTS, wantApplied, want.applied)
	}
}
