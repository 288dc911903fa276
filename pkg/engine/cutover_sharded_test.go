package engine

import (
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
			if got := drainedIn(tc.c, tc.rec); got != tc.want {
				t.Errorf("drainedIn = %v, want %v", got, tc.want)
			}
		})
	}
}
