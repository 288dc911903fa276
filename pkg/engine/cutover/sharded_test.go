package cutover

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestDrainedIn: a shard counts as drained (not replayed again, marked
// on the shard board) only for a cut-over that still stands, at Draining
// or later, and only with its part recorded in that cut-over.
func TestDrainedIn(t *testing.T) {
	at := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	drained := checkpoint.ShardRecord{Shard: "s", Cutover: &checkpoint.ShardCutover{StartedAt: at, CaughtUp: true, Drained: true}}
	co := func(step string, started time.Time) *checkpoint.CutoverRecord {
		return &checkpoint.CutoverRecord{Step: step, StartedAt: started}
	}
	tests := []struct {
		name string
		c    *checkpoint.CutoverRecord
		rec  checkpoint.ShardRecord
		want bool
	}{
		{"no cut-over", nil, drained, false},
		{"draining", co(workerapi.CutoverDraining, at), drained, true},
		{"verifying", co(workerapi.CutoverVerifying, at), drained, true},
		{"complete", co(workerapi.CutoverComplete, at), drained, true},
		{"not drained yet", co(workerapi.CutoverDraining, at), checkpoint.ShardRecord{Shard: "s"}, false},
		{"the cut-over failed", co(workerapi.CutoverFailed, at), drained, false},
		{"a new attempt", co(workerapi.CutoverCatchingUp, at.Add(time.Hour)), drained, false},
		{"a new attempt draining", co(workerapi.CutoverDraining, at.Add(time.Hour)), drained, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DrainedIn(tc.c, tc.rec); got != tc.want {
				t.Errorf("DrainedIn = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFollowedFailure: a worker following the cut-over ends with the
// message of the worker that failed it (Fail's) and the sentinels
// its exit code comes from: ErrFailed, and the verification's sentinel
// for a verification that found differences.
func TestFollowedFailure(t *testing.T) {
	why := errors.New("setUserWriteBlockMode: no such command")
	tests := []struct {
		name       string
		step       string
		verify     *checkpoint.CutoverVerify
		wantVerify bool
	}{
		{"write block refused", workerapi.CutoverBlockingWrites, nil, false},
		{"verification found differences", workerapi.CutoverVerifying, &checkpoint.CutoverVerify{Mode: "hash", Differing: []string{"app.w"}}, true},
		{"finalize failed after a verification that passed", workerapi.CutoverFinalizing, &checkpoint.CutoverVerify{Mode: "hash", OK: true}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// What Fail records and returns.
			leader := fmt.Errorf("%w, step %s: %w", ErrFailed, tc.step, why)
			rec := checkpoint.CutoverRecord{Step: workerapi.CutoverFailed, Verify: tc.verify, Message: fmt.Sprintf("%s: %v", tc.step, why)}
			got := (&Machine{errVerify: errVerificationFailed}).followedFailure(rec)
			if got.Error() != leader.Error() {
				t.Errorf("follower's error %q, leader's %q", got, leader)
			}
			if !errors.Is(got, ErrFailed) || errors.Is(got, errVerificationFailed) != tc.wantVerify {
				t.Errorf("%v: ErrFailed %v, errVerificationFailed %v, want true, %v", got,
					errors.Is(got, ErrFailed), errors.Is(got, errVerificationFailed), tc.wantVerify)
			}
		})
	}
}

// errVerificationFailed stands for the engine's ErrVerificationFailed.
var errVerificationFailed = errors.New("verification found differences")

// TestShardedLead: the worker moving the step waits for every shard to
// catch up, blocks writes, records each shard's newest entry as its
// drain position, lets each subtask stop there, and takes the highest
// drain position as the task's; a retired shard takes no part.
func TestShardedLead(t *testing.T) {
	store := &fakeStore{shards: map[string]checkpoint.ShardRecord{
		"s0": {Shard: "s0", Started: true}, "s1": {Shard: "s1", Started: true}, "s9": {Shard: "s9", Started: true, Retired: true},
	}}
	newest := map[string]bson.Timestamp{"s0": {T: 50, I: 1}, "s1": {T: 60, I: 2}}
	src := &fakeSource{shards: newest}
	subs := []*fakeSubtask{{name: "s0", at: newest["s0"], store: store}, {name: "s1", at: newest["s1"], store: store}}
	m := newMachine(config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyNone}, store)
	m.Load(checkpoint.TaskRecord{})
	if err := m.StartSharded(t.Context()); err != nil {
		t.Fatal(err)
	}
	done := false
	for range 10 {
		recs, _ := store.Shards(t.Context())
		var err error
		if _, err = m.DriveShards(t.Context(), recs, []Subtask{subs[0], subs[1]}); err != nil {
			t.Fatal(err)
		}
		if done, err = m.Lead(t.Context(), recs, src); err != nil {
			t.Fatal(err)
		}
		if done {
			break
		}
	}
	if !done {
		t.Fatalf("the cut-over did not drain; at %s: %s", m.Step(), m.Record().Message)
	}
	if want := []string{catchingUp, blocking, draining}; !slices.Equal(store.steps, want) {
		t.Errorf("steps %v, want %v", store.steps, want)
	}
	if c := m.Record(); c.SourceTS != newest["s1"] || !c.WritesBlocked {
		t.Errorf("record %+v: want SourceTS %v, writes blocked", c, newest["s1"])
	}
	for _, st := range subs {
		if !st.stopped || !st.shown.Drained || st.shown.DrainTS != newest[st.name] {
			t.Errorf("shard %s: stopped %v, shows %+v", st.name, st.stopped, st.shown)
		}
	}
	recs, _ := store.Shards(t.Context())
	if recs["s9"].Cutover != nil {
		t.Errorf("the retired shard took part: %+v", recs["s9"].Cutover)
	}
	if err := CheckShardsDrained(recs, m.Attempt()); err != nil {
		t.Error(err)
	}
	if err := m.Finish(t.Context(), &fakeTarget{}); err != nil || m.Step() != complete {
		t.Errorf("finish: %v, at %s", err, m.Step())
	}
}

// TestFollow: a worker following the cut-over ends when the worker
// moving the step records Failed, with its error, and when it records
// Complete, without one; a failure that stood when it started is an
// earlier attempt's and does not end it.
func TestFollow(t *testing.T) {
	opts := config.Cutover{Requested: true, BlockSourceWrites: true}
	t.Run("the leader fails", func(t *testing.T) {
		store := &fakeStore{}
		leader, follower := newMachine(opts, store), newMachine(opts, store)
		leader.Load(checkpoint.TaskRecord{})
		if err := leader.StartSharded(t.Context()); err != nil {
			t.Fatal(err)
		}
		follower.NoteStaleFailure(t.Context())
		if err := follower.Follow(t.Context()); err != nil || follower.Step() != catchingUp {
			t.Fatalf("follow: %v, at %s", err, follower.Step())
		}
		lerr := leader.Fail(t.Context(), errors.New("boom"))
		ferr := follower.Await(t.Context())
		if !errors.Is(ferr, ErrFailed) || ferr.Error() != lerr.Error() {
			t.Errorf("follower ended with %v, leader with %v", ferr, lerr)
		}
	})
	t.Run("the leader completes", func(t *testing.T) {
		store := &fakeStore{}
		leader, follower := newMachine(opts, store), newMachine(opts, store)
		leader.Load(checkpoint.TaskRecord{Cutover: &checkpoint.CutoverRecord{Step: finalizing}})
		if err := leader.Finish(t.Context(), &fakeTarget{}); err != nil {
			t.Fatal(err)
		}
		if err := follower.Await(t.Context()); err != nil || follower.Step() != complete {
			t.Errorf("await: %v, at %s", err, follower.Step())
		}
	})
	t.Run("an earlier attempt's failure", func(t *testing.T) {
		store := &fakeStore{task: checkpoint.TaskRecord{Cutover: &checkpoint.CutoverRecord{Step: failed, StartedAt: time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC), Message: "Verifying: old"}}}
		follower := newMachine(opts, store)
		follower.NoteStaleFailure(t.Context())
		if err := follower.Follow(t.Context()); err != nil || follower.Running() {
			t.Errorf("follow: %v, at %q; want nothing followed", err, follower.Step())
		}
	})
}
