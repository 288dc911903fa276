package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestCutoverStatus: the worker's cut-over report becomes status.cutover
// and the CutoverReady and CutoverComplete conditions; with no report the
// previous status.cutover is kept.
func TestCutoverStatus(t *testing.T) {
	finished := statusNow.Add(-time.Second)
	report := func(phase workerapi.Phase, c *workerapi.Cutover) *workerapi.Status {
		r := streaming(0, 0, 100)
		r.Phase, r.Cutover = phase, c
		return r
	}
	complete := &workerapi.Cutover{Step: workerapi.CutoverComplete, CaughtUp: true, StartedAt: statusNow.Add(-time.Minute), FinishedAt: &finished,
		SourcePosition: &workerapi.Timestamp{T: 10, I: 2}, TargetPosition: &workerapi.Timestamp{T: 11, I: 1},
		Verify: &workerapi.Verify{Mode: "hash", OK: true}}
	cases := []struct {
		name                    string
		old                     *syncv1alpha1.CutoverStatus
		report                  *workerapi.Status
		wantStep                string
		wantReady, wantComplete string // "Status/Reason"
	}{
		{name: "requested, not started yet", report: streaming(0, 0, 100),
			wantReady: "False/CatchingUp", wantComplete: "False/CatchingUp"},
		{name: "catching up", report: report(workerapi.PhaseStreaming, &workerapi.Cutover{Step: workerapi.CutoverCatchingUp, Message: "lag 9s"}),
			wantStep: workerapi.CutoverCatchingUp, wantReady: "False/Lagging", wantComplete: "False/CatchingUp"},
		{name: "draining", report: report(workerapi.PhaseStreaming, &workerapi.Cutover{Step: workerapi.CutoverDraining, CaughtUp: true}),
			wantStep: workerapi.CutoverDraining, wantReady: "True/CaughtUp", wantComplete: "False/Draining"},
		{name: "complete", report: report(workerapi.PhaseCompleted, complete),
			wantStep: workerapi.CutoverComplete, wantReady: "True/CaughtUp", wantComplete: "True/CutoverComplete"},
		{name: "failed", report: report(workerapi.PhaseFailed, &workerapi.Cutover{Step: workerapi.CutoverFailed, CaughtUp: true, Message: "BlockingWrites: no setUserWriteBlockMode"}),
			wantStep: workerapi.CutoverFailed, wantReady: "False/BlockingWrites", wantComplete: "False/CutoverFailed"},
		{name: "kept without a report", old: &syncv1alpha1.CutoverStatus{Step: workerapi.CutoverComplete, CaughtUp: true, SourcePosition: "10:2"},
			wantStep: workerapi.CutoverComplete, wantReady: "True/CaughtUp", wantComplete: "True/CutoverComplete"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := observed{generation: 2, mode: config.ModeFullAndIncremental, now: statusNow,
				cutover: config.Cutover{Requested: true, Verify: config.VerifyHash, MaxLagSeconds: 5}}
			if tc.report != nil {
				o.workers = []workerObservation{worker(0, tc.report)}
			}
			st := computeStatus(&syncv1alpha1.SyncTaskStatus{Phase: syncv1alpha1.PhaseStreaming, Cutover: tc.old}, o)
			step := ""
			if st.Cutover != nil {
				step = st.Cutover.Step
			}
			if step != tc.wantStep {
				t.Errorf("status.cutover.step %q, want %q", step, tc.wantStep)
			}
			for typ, want := range map[string]string{syncv1alpha1.ConditionCutoverReady: tc.wantReady, syncv1alpha1.ConditionCutoverComplete: tc.wantComplete} {
				c := meta.FindStatusCondition(st.Conditions, typ)
				if c == nil || string(c.Status)+"/"+c.Reason != want {
					t.Errorf("%s = %+v, want %s", typ, c, want)
				}
			}
			if tc.name == "complete" {
				c := st.Cutover
				if c.SourcePosition != "10:2" || c.TargetPosition != "11:1" || c.Verification == nil || c.Verification.Result != syncv1alpha1.VerificationPassed ||
					c.FinishedAt == nil || !c.FinishedAt.Equal(&metav1.Time{Time: finished.Truncate(time.Second)}) || st.Phase != syncv1alpha1.PhaseCompleted {
					t.Errorf("status %+v, cut-over %+v", st.Phase, c)
				}
			}
		})
	}
}

// TestCutoverStatusShardedWorkers: with one worker per shard, the worker
// moving the cut-over's steps reports them first and the others follow
// the checkpoint database a little later; status.cutover is the newest
// cut-over's furthest step, whichever worker reports it.
func TestCutoverStatusShardedWorkers(t *testing.T) {
	older, newer := statusNow.Add(-time.Hour), statusNow.Add(-time.Minute)
	co := func(step string, started time.Time) *workerapi.Cutover {
		return &workerapi.Cutover{Step: step, StartedAt: started}
	}
	cases := []struct {
		name    string
		reports []*workerapi.Cutover
		want    string
	}{
		{"the leader ahead of a follower", []*workerapi.Cutover{co(workerapi.CutoverCatchingUp, newer), co(workerapi.CutoverDraining, newer)}, workerapi.CutoverDraining},
		{"a follower ahead of the leader's last report", []*workerapi.Cutover{co(workerapi.CutoverComplete, newer), co(workerapi.CutoverFinalizing, newer), nil}, workerapi.CutoverComplete},
		{"a new attempt over an old failure", []*workerapi.Cutover{co(workerapi.CutoverFailed, older), co(workerapi.CutoverCatchingUp, newer)}, workerapi.CutoverCatchingUp},
		{"the failure of the followed attempt", []*workerapi.Cutover{co(workerapi.CutoverBlockingWrites, newer), co(workerapi.CutoverFailed, newer)}, workerapi.CutoverFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := observed{now: statusNow}
			for i, c := range tc.reports {
				r := streaming(0, 0, 100)
				r.Cutover = c
				o.workers = append(o.workers, worker(i, r))
			}
			got := cutoverStatus(nil, o)
			if got == nil || got.Step != tc.want {
				t.Errorf("status.cutover %+v, want step %s", got, tc.want)
			}
		})
	}
}

// TestShardCutoverStatus: each shard worker's part in a sharded cut-over
// shows in its status.shards[] entry.
func TestShardCutoverStatus(t *testing.T) {
	drain := &workerapi.Timestamp{T: 100, I: 3}
	cases := []struct {
		part *workerapi.ShardCutover
		want string
	}{
		{nil, ""},
		{&workerapi.ShardCutover{}, "CatchingUp"},
		{&workerapi.ShardCutover{CaughtUp: true}, "CaughtUp"},
		{&workerapi.ShardCutover{CaughtUp: true, DrainPosition: drain}, "Draining to 100:3"},
		{&workerapi.ShardCutover{CaughtUp: true, DrainPosition: drain, Drained: true}, "Drained at 100:3"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			r := streaming(0, 0, 100)
			r.Shards = []workerapi.Shard{{Shard: "rs0", Phase: workerapi.SubtaskStreaming, Cutover: tc.part}}
			w := worker(0, r)
			w.shard = "rs0"
			st := computeStatus(&syncv1alpha1.SyncTaskStatus{}, observed{now: statusNow, workers: []workerObservation{w}})
			if len(st.Shards) != 1 || st.Shards[0].Cutover != tc.want {
				t.Errorf("shards %+v, want cutover %q", st.Shards, tc.want)
			}
		})
	}
}
