package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// cutoverStatus is status.cutover from the workers' reports: the report
// of the newest cut-over that got furthest (with one worker per shard,
// the worker moving the steps reports them first and the others follow
// it), else what the status had (a worker that stopped, or was stopped
// once the task completed, reports nothing).
func cutoverStatus(old *syncv1alpha1.CutoverStatus, o observed) *syncv1alpha1.CutoverStatus {
	var c *workerapi.Cutover
	for _, w := range o.workers {
		if w.report == nil || w.report.Cutover == nil {
			continue
		}
		if r := w.report.Cutover; c == nil || r.StartedAt.After(c.StartedAt) ||
			(r.StartedAt.Equal(c.StartedAt) && cutoverStepRank(r.Step) > cutoverStepRank(c.Step)) {
			c = r
		}
	}
	if c != nil {
		next := &syncv1alpha1.CutoverStatus{Step: c.Step, CaughtUp: c.CaughtUp, WritesBlocked: c.WritesBlocked,
			SourcePosition: positionText(c.SourcePosition), TargetPosition: positionText(c.TargetPosition), Message: c.Message}
		if !c.StartedAt.IsZero() {
			t := metav1.NewTime(c.StartedAt.UTC().Truncate(time.Second))
			next.StartedAt = &t
		}
		if c.FinishedAt != nil {
			t := metav1.NewTime(c.FinishedAt.UTC().Truncate(time.Second))
			next.FinishedAt = &t
		}
		if v := c.Verify; v != nil && !v.Running {
			next.Verification = &syncv1alpha1.Verification{Mode: config.VerifyMode(v.Mode), Result: syncv1alpha1.VerificationPassed,
				Message: fmt.Sprintf("source and target match (%s)", v.Mode), Time: metav1.NewTime(o.now.UTC().Truncate(time.Second))}
			if next.FinishedAt != nil {
				next.Verification.Time = *next.FinishedAt
			}
			if !v.OK {
				next.Verification.Result = syncv1alpha1.VerificationFailed
				next.Verification.DifferingNamespaces = v.Differing[:min(len(v.Differing), 100)]
				next.Verification.Message = fmt.Sprintf("source and target differ (%s): %s", v.Mode, strings.Join(next.Verification.DifferingNamespaces, ", "))
			}
			if old != nil && old.Verification != nil && old.Verification.Result == next.Verification.Result {
				next.Verification.Time = old.Verification.Time
			}
		}
		return next
	}
	return old
}

// cutoverStepRank orders the cut-over's steps; Failed ends one as
// Complete does.
func cutoverStepRank(step string) int {
	i := slices.Index([]string{workerapi.CutoverCatchingUp, workerapi.CutoverBlockingWrites, workerapi.CutoverDraining,
		workerapi.CutoverVerifying, workerapi.CutoverFinalizing, workerapi.CutoverComplete}, step)
	if step == workerapi.CutoverFailed {
		i = 5
	}
	return i
}

// positionText is an oplog position as status shows it ("T:I"), empty
// for none.
func positionText(ts *workerapi.Timestamp) string {
	if ts == nil || ts.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d:%d", ts.T, ts.I)
}

// cutoverConditions sets CutoverReady and CutoverComplete once a cut-over
// is requested or has run; set is setConditions' setter.
func cutoverConditions(st *syncv1alpha1.SyncTaskStatus, o observed, set func(t string, ok bool, reason, msg string)) {
	c := st.Cutover
	if c == nil {
		if o.cutover.Requested {
			msg := "the cut-over is requested; waiting for the workers to start it"
			set(syncv1alpha1.ConditionCutoverReady, false, workerapi.CutoverCatchingUp, msg)
			set(syncv1alpha1.ConditionCutoverComplete, false, workerapi.CutoverCatchingUp, msg)
		}
		return
	}
	switch {
	case c.Step == workerapi.CutoverFailed:
		set(syncv1alpha1.ConditionCutoverReady, false, failedStep(c.Message), c.Message)
	case c.CaughtUp:
		set(syncv1alpha1.ConditionCutoverReady, true, syncv1alpha1.ReasonCaughtUp, fmt.Sprintf("the lag was at most %ds: the cut-over goes on", o.cutover.MaxLagSeconds))
	default:
		set(syncv1alpha1.ConditionCutoverReady, false, syncv1alpha1.ReasonLagging, c.Message)
	}
	switch c.Step {
	case workerapi.CutoverComplete:
		msg := fmt.Sprintf("the target holds everything the source wrote up to %s", c.SourcePosition)
		if v := c.Verification; v != nil {
			msg += "; " + v.Message
		}
		if c.WritesBlocked {
			msg += "; writes on the source stay blocked (db.adminCommand({setUserWriteBlockMode: 1, global: false}) unblocks them)"
		}
		set(syncv1alpha1.ConditionCutoverComplete, true, syncv1alpha1.ReasonCutoverComplete, msg)
	case workerapi.CutoverFailed:
		set(syncv1alpha1.ConditionCutoverComplete, false, syncv1alpha1.ReasonCutoverFailed, c.Message)
	default:
		msg := c.Message
		if msg == "" {
			msg = "cut-over step " + c.Step
		}
		set(syncv1alpha1.ConditionCutoverComplete, false, c.Step, msg)
	}
}

// cutoverEvents records an event for each cut-over step the status
// reached.
func (r *SyncTaskReconciler) cutoverEvents(old, cur *syncv1alpha1.SyncTask) {
	c := cur.Status.Cutover
	if c == nil || (old.Status.Cutover != nil && old.Status.Cutover.Step == c.Step) {
		return
	}
	switch c.Step {
	case workerapi.CutoverFailed:
		r.event(cur, corev1.EventTypeWarning, syncv1alpha1.ReasonCutoverFailed, "Cutover", "%s", c.Message)
	case workerapi.CutoverComplete:
		msg := "cut-over complete"
		if cond := meta.FindStatusCondition(cur.Status.Conditions, syncv1alpha1.ConditionCutoverComplete); cond != nil {
			msg = cond.Message
		}
		r.event(cur, corev1.EventTypeNormal, syncv1alpha1.ReasonCutoverComplete, "Cutover", "%s", msg)
	default:
		r.event(cur, corev1.EventTypeNormal, "Cutover"+c.Step, "Cutover", "cut-over step %s", c.Step)
	}
}

// failedStep is the step a failed cut-over's message names first (the
// worker writes "Step: why"), or CutoverFailed.
func failedStep(msg string) string {
	step, _, ok := strings.Cut(msg, ":")
	switch {
	case !ok:
		return syncv1alpha1.ReasonCutoverFailed
	case step == workerapi.CutoverCatchingUp, step == workerapi.CutoverBlockingWrites, step == workerapi.CutoverDraining,
		step == workerapi.CutoverVerifying, step == workerapi.CutoverFinalizing:
		return step
	}
	return syncv1alpha1.ReasonCutoverFailed
}

// shardCutoverText is a shard's part in the cut-over as status.shards[]
// shows it.
func shardCutoverText(c *workerapi.ShardCutover) string {
	switch {
	case c.Drained:
		return "Drained at " + positionText(c.DrainPosition)
	case c.DrainPosition != nil:
		return "Draining to " + positionText(c.DrainPosition)
	case c.CaughtUp:
		return syncv1alpha1.ReasonCaughtUp
	}
	return workerapi.CutoverCatchingUp
}
