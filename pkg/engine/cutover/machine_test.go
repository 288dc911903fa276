package cutover

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

const (
	catchingUp = workerapi.CutoverCatchingUp
	blocking   = workerapi.CutoverBlockingWrites
	draining   = workerapi.CutoverDraining
	verifying  = workerapi.CutoverVerifying
	finalizing = workerapi.CutoverFinalizing
	complete   = workerapi.CutoverComplete
	failed     = workerapi.CutoverFailed
)

func newMachine(opts config.Cutover, store *fakeStore) *Machine {
	return New(Config{Options: &opts, Store: store, ErrVerify: errVerificationFailed})
}

// run walks a replica set's cut-over from what the store holds: Load,
// Drive with a replay caught up to the source's newest entry, Finish.
func run(ctx context.Context, m *Machine, store *fakeStore, src *fakeSource, tgt *fakeTarget) error {
	rec, _ := store.Task(ctx)
	m.Load(rec)
	if err := m.Drive(ctx, fakeReplay{at: src.newest}, src, func() bool { return true }); err != nil {
		return err
	}
	return m.Finish(ctx, tgt)
}

// TestStepOrder: a replica set's cut-over records every step, in order,
// before it acts, blocks the source's writes only when asked, drains to
// the source's newest entry and ends Complete with both positions.
func TestStepOrder(t *testing.T) {
	newest := bson.Timestamp{T: 100, I: 5}
	tests := []struct {
		name  string
		opts  config.Cutover
		steps []string
		calls []string
	}{
		{"writes left open, no verification", config.Cutover{Requested: true, Verify: config.VerifyNone},
			[]string{catchingUp, draining, verifying, finalizing, complete}, []string{"check", "finalize", "position"}},
		{"writes blocked, verified", config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyCount},
			[]string{catchingUp, blocking, draining, verifying, finalizing, complete}, []string{"check", "verify", "finalize", "position"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store, src, tgt := &fakeStore{}, &fakeSource{newest: newest}, &fakeTarget{}
			m := newMachine(tc.opts, store)
			if err := run(t.Context(), m, store, src, tgt); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(store.steps, tc.steps) {
				t.Errorf("steps %v, want %v", store.steps, tc.steps)
			}
			if !slices.Equal(tgt.calls, tc.calls) {
				t.Errorf("target calls %v, want %v", tgt.calls, tc.calls)
			}
			c := store.task.Cutover
			if c.Step != complete || c.SourceTS != newest || c.TargetTS.IsZero() || c.FinishedAt.IsZero() || !c.CaughtUp {
				t.Errorf("final record %+v", c)
			}
			if c.WritesBlocked != tc.opts.BlockSourceWrites || (src.blocked == 1) != tc.opts.BlockSourceWrites {
				t.Errorf("writes blocked %v (%d blocks), want %v", c.WritesBlocked, src.blocked, tc.opts.BlockSourceWrites)
			}
		})
	}
}

// TestFailedStep: a step that fails ends the cut-over Failed, recorded
// with the step named and why, and the error says the same and wraps
// ErrFailed (and the verification's sentinel for differences). A step
// cut short because the run stops is not a failure.
func TestFailedStep(t *testing.T) {
	boom := errors.New("no such command")
	verified := config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyCount}
	tests := []struct {
		name       string
		src        fakeSource
		tgt        fakeTarget
		wantMsg    string
		wantVerify bool
	}{
		{"write block refused", fakeSource{blockErr: boom}, fakeTarget{}, "BlockingWrites: no such command", false},
		{"verification found differences", fakeSource{}, fakeTarget{differing: []string{"app.w"}},
			"Verifying: verification found differences: [app.w] differ; the source stays as it is", true},
		{"differences after late writes", fakeSource{}, fakeTarget{differing: []string{"app.w"}, late: "the source took writes after the drain position"},
			"Verifying: verification found differences: [app.w] differ: the source took writes after the drain position", true},
		{"finalize refused", fakeSource{}, fakeTarget{finalizeErr: boom}, "Finalizing: finalize the target: no such command", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := &fakeStore{}
			src, tgt := tc.src, tc.tgt
			src.newest = bson.Timestamp{T: 100}
			err := run(t.Context(), newMachine(verified, store), store, &src, &tgt)
			if !errors.Is(err, ErrFailed) || errors.Is(err, errVerificationFailed) != tc.wantVerify {
				t.Fatalf("error %v: ErrFailed %v, verification %v; want true, %v", err, errors.Is(err, ErrFailed), errors.Is(err, errVerificationFailed), tc.wantVerify)
			}
			c := store.task.Cutover
			if c.Step != failed || !strings.HasPrefix(c.Message, tc.wantMsg) {
				t.Errorf("recorded %s %q, want Failed %q...", c.Step, c.Message, tc.wantMsg)
			}
			if want := "cut-over failed, step " + c.Message; err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
			if slices.Contains(tgt.calls, "position") {
				t.Errorf("the cut-over went on after the failure: %v", tgt.calls)
			}
		})
	}
	t.Run("the run stops", func(t *testing.T) {
		store := &fakeStore{}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		m := newMachine(verified, store)
		m.Load(checkpoint.TaskRecord{Cutover: &checkpoint.CutoverRecord{Step: blocking, CaughtUp: true}})
		err := m.Drive(ctx, fakeReplay{}, &fakeSource{blockErr: context.Canceled}, func() bool { return true })
		if err == nil || errors.Is(err, ErrFailed) || m.Step() != blocking || store.task.Cutover != nil {
			t.Errorf("error %v, step %s, recorded %+v: want the step kept, nothing recorded", err, m.Step(), store.task.Cutover)
		}
	})
}

// TestResume: a run started over a recorded cut-over goes on from the
// step it reached and does not redo the steps before it; one started
// over a failed cut-over starts a new attempt.
func TestResume(t *testing.T) {
	old := time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)
	drainAt := bson.Timestamp{T: 100, I: 5}
	rec := func(step string) *checkpoint.CutoverRecord {
		return &checkpoint.CutoverRecord{Step: step, StartedAt: old, CaughtUp: true, WritesBlocked: step != catchingUp && step != blocking, SourceTS: drainAt}
	}
	tests := []struct {
		name      string
		rec       *checkpoint.CutoverRecord
		steps     []string
		calls     []string
		blocks    int
		newestRds int
	}{
		{"at BlockingWrites", rec(blocking), []string{draining, verifying, finalizing, complete}, []string{"check", "verify", "finalize", "position"}, 1, 0},
		{"at Draining with the drain position", rec(draining), []string{verifying, finalizing, complete}, []string{"check", "verify", "finalize", "position"}, 0, 0},
		{"at Verifying", rec(verifying), []string{verifying, finalizing, complete}, []string{"verify", "finalize", "position"}, 0, 0},
		{"at Finalizing", rec(finalizing), []string{complete}, []string{"finalize", "position"}, 0, 0},
		{"complete", rec(complete), nil, nil, 0, 0},
		{"after a failure", rec(failed), []string{catchingUp, blocking, draining, verifying, finalizing, complete}, []string{"check", "verify", "finalize", "position"}, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := &fakeStore{task: checkpoint.TaskRecord{Cutover: tc.rec}}
			src, tgt := &fakeSource{newest: drainAt}, &fakeTarget{}
			m := newMachine(config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyCount}, store)
			if err := run(t.Context(), m, store, src, tgt); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(store.steps, tc.steps) || !slices.Equal(tgt.calls, tc.calls) {
				t.Errorf("steps %v, target calls %v; want %v, %v", store.steps, tgt.calls, tc.steps, tc.calls)
			}
			if src.blocked != tc.blocks || src.reads != tc.newestRds {
				t.Errorf("%d write blocks, %d reads of the newest entry; want %d, %d", src.blocked, src.reads, tc.blocks, tc.newestRds)
			}
			if m.Step() != complete {
				t.Errorf("ended at %s", m.Step())
			}
			if newAttempt := !m.Record().StartedAt.Equal(old); newAttempt != (tc.rec.Step == failed) {
				t.Errorf("a new attempt %v, want %v", newAttempt, tc.rec.Step == failed)
			}
		})
	}
	t.Run("not requested", func(t *testing.T) {
		m := newMachine(config.Cutover{}, &fakeStore{})
		if m.Load(checkpoint.TaskRecord{}) || m.Running() || m.Status(Progress{}) != nil {
			t.Errorf("a cut-over runs without a request: step %q", m.Step())
		}
	})
}

// TestWriteBlockAfterFailure: a failure after the write block does not
// lift it (the source stays as it is, docs/cutover.md); the record says
// writes are blocked, in the failed attempt and in the next one.
func TestWriteBlockAfterFailure(t *testing.T) {
	store := &fakeStore{}
	opts := config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyCount}
	src := &fakeSource{newest: bson.Timestamp{T: 100}}
	if err := run(t.Context(), newMachine(opts, store), store, src, &fakeTarget{differing: []string{"app.w"}}); !errors.Is(err, ErrFailed) {
		t.Fatalf("error %v, want ErrFailed", err)
	}
	if c := store.task.Cutover; c.Step != failed || !c.WritesBlocked {
		t.Errorf("failed record %+v: want Failed with writes blocked", c)
	}
	next := newMachine(opts, store)
	next.Load(store.task)
	if c := next.Record(); c.Step != catchingUp || !c.WritesBlocked {
		t.Errorf("next attempt %+v: want CatchingUp with writes blocked", c)
	}
}
