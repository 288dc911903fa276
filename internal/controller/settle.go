package controller

import (
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

// StatusMinInterval is how long figures that move on every poll (lag,
// rates, checkpoint and report times, document counts after the copy,
// the numbers in condition messages) may wait before they alone cause a
// status write. The workers' own metrics carry the live values; the
// status changes at once for what a user acts on (phase, a condition's
// status or reason, shards, failures, verification).
const StatusMinInterval = 30 * time.Second

// settle returns cur, or old unchanged when cur differs from it only in
// the report times (an idle task: never written), or only in figures that
// move on every poll while old's were written less than
// StatusMinInterval ago (a streaming task: written at most that often).
func settle(old *syncv1alpha1.SyncTaskStatus, cur syncv1alpha1.SyncTaskStatus, now time.Time) syncv1alpha1.SyncTaskStatus {
	if !equality.Semantic.DeepEqual(steady(old), steady(&cur)) {
		return cur
	}
	if equality.Semantic.DeepEqual(unstamped(old), unstamped(&cur)) {
		return *old.DeepCopy()
	}
	if last := lastReport(old); last.IsZero() || now.Sub(last) >= StatusMinInterval {
		return cur
	}
	return *old.DeepCopy()
}

// unstamped is st without its shards' report times.
func unstamped(st *syncv1alpha1.SyncTaskStatus) *syncv1alpha1.SyncTaskStatus {
	s := st.DeepCopy()
	for i := range s.Shards {
		s.Shards[i].LastReportTime = nil
	}
	return s
}

// steady is st without the figures that move on every poll.
func steady(st *syncv1alpha1.SyncTaskStatus) *syncv1alpha1.SyncTaskStatus {
	s := st.DeepCopy()
	s.LagSeconds, s.Lag, s.OpsPerSecond, s.BytesPerSecond, s.CheckpointTime = 0, "", 0, 0, nil
	if s.Progress != nil && s.Phase != syncv1alpha1.PhaseFullSync {
		// The copy's progress moves the status while it runs; after it,
		// only the count of documents replay adds changes.
		s.Progress.Documents, s.Progress.Bytes = 0, 0
	}
	for i := range s.Conditions {
		s.Conditions[i].Message = ""
	}
	for i := range s.Shards {
		sh := &s.Shards[i]
		sh.LagSeconds, sh.OpsPerSecond, sh.HeldWrites = 0, 0, 0
		sh.AppliedTimestamp, sh.CheckpointTime, sh.LastReportTime = "", nil, nil
		if s.Phase != syncv1alpha1.PhaseFullSync {
			sh.Documents = 0
		}
	}
	return s
}

// lastReport is when st's figures were last written: the newest shard
// report time.
func lastReport(st *syncv1alpha1.SyncTaskStatus) time.Time {
	var t time.Time
	for _, sh := range st.Shards {
		if sh.LastReportTime != nil && sh.LastReportTime.After(t) {
			t = sh.LastReportTime.Time
		}
	}
	return t
}
