package cutover

import (
	"errors"
	"fmt"
	"testing"
	"time"

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
