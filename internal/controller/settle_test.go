package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestSettle: an idle streaming task writes no status however long it
// runs; one whose figures move (ops/s, lag, condition messages) writes
// them at most every StatusMinInterval; a change a user acts on (phase, a
// condition's reason) is written at once.
func TestSettle(t *testing.T) {
	poll := func(old syncv1alpha1.SyncTaskStatus, at time.Time, report *workerapi.Status) syncv1alpha1.SyncTaskStatus {
		o := observed{generation: 1, now: at, mode: config.ModeFullAndIncremental, workers: []workerObservation{worker(0, report)}}
		return settle(&old, computeStatus(&old, o), at)
	}
	written := poll(syncv1alpha1.SyncTaskStatus{}, statusNow, streaming(0, 0, 1000))
	cases := []struct {
		name   string
		after  time.Duration
		report *workerapi.Status
		write  bool
	}{
		{"idle: only the report time moves", 5 * time.Second, streaming(0, 0, 1000), false},
		{"idle, ten minutes later", 10 * time.Minute, streaming(0, 0, 1000), false},
		{"ops/s and lag move within the interval", 10 * time.Second, streaming(3, 240, 1000), false},
		{"ops/s and lag move after the interval", StatusMinInterval, streaming(3, 240, 1000), true},
		{"lag past Ready's threshold: a condition's reason changes", 5 * time.Second, streaming(ReadyLagSeconds+5, 240, 1000), true},
		{"verifying: the phase changes", 5 * time.Second, &workerapi.Status{Phase: workerapi.PhaseVerifying, Verify: &workerapi.Verify{Mode: "hash", Running: true}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := poll(written, statusNow.Add(c.after), c.report)
			if wrote := !equality.Semantic.DeepEqual(written, got); wrote != c.write {
				t.Errorf("status written: %v, want %v (phase %s, lag %d, ops %d)", wrote, c.write, got.Phase, got.LagSeconds, got.OpsPerSecond)
			}
		})
	}
}
