package controller

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// setConditions sets Ready, Progressing and Degraded for the computed
// phase.
func setConditions(st *syncv1alpha1.SyncTaskStatus, o observed, failure *shardFailure) {
	set := func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionFalse
		if ok {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason,
			Message: msg, ObservedGeneration: o.generation})
	}

	// Degraded: the first problem that needs a person.
	degraded := degradedCondition(st, o, failure)
	set(syncv1alpha1.ConditionDegraded, degraded.reason != syncv1alpha1.ReasonHealthy, degraded.reason, degraded.message)

	ready, progressing := readyCondition(st, o, degraded)
	set(syncv1alpha1.ConditionReady, ready.ok, ready.reason, ready.message)
	set(syncv1alpha1.ConditionProgressing, progressing.ok, progressing.reason, progressing.message)

	// TargetSharding: from the worker that prepared the target, while
	// it reports; kept as it was otherwise.
	if c, ok := targetShardingCondition(o); ok {
		set(syncv1alpha1.ConditionTargetSharding, c.ok, c.reason, c.message)
	}
	cutoverConditions(st, o, set)
}

// maxConditionMessage bounds a condition message built from lists (the
// API allows 32 KiB).
const maxConditionMessage = 4096

// targetShardingCondition reads how the copy sharded the target's
// collections from the workers' reports: the notes when there are any,
// else the collections and their keys. ok is false while no worker
// reports a sharded target.
func targetShardingCondition(o observed) (cond, bool) {
	var sharded, notes []string
	seen := false
	for _, w := range o.workers {
		if w.report == nil || len(w.report.TargetSharding) == 0 {
			continue
		}
		seen = true
		for _, ts := range w.report.TargetSharding {
			if ts.Key != "" {
				sharded = append(sharded, ts.Namespace+" "+ts.Key)
			}
		}
		notes = append(notes, w.report.ShardingNotes()...)
	}
	if !seen {
		return cond{}, false
	}
	clip := func(s string) string {
		if len(s) > maxConditionMessage {
			return s[:maxConditionMessage] + "..."
		}
		return s
	}
	slices.Sort(notes)
	if notes = slices.Compact(notes); len(notes) > 0 {
		return cond{false, syncv1alpha1.ReasonShardingNotes, clip(strings.Join(notes, "; "))}, true
	}
	slices.Sort(sharded)
	return cond{true, syncv1alpha1.ReasonAsPlanned, clip(fmt.Sprintf("%d target collections sharded and pre-split before the copy: %s",
		len(sharded), strings.Join(slices.Compact(sharded), ", ")))}, true
}

type cond struct {
	ok              bool
	reason, message string
}

// degradedCheck is one named reason a task needs a person: it returns the
// problem it finds, or nil.
type degradedCheck struct {
	name  string
	check func(st *syncv1alpha1.SyncTaskStatus, o observed, failure *shardFailure) *shardFailure
}

// degradedChecks are looked at in order; the first that finds a problem
// gives Degraded its reason (ConditionDegraded documents the list).
var degradedChecks = []degradedCheck{
	{"blocked", func(_ *syncv1alpha1.SyncTaskStatus, o observed, _ *shardFailure) *shardFailure {
		if o.blocked == nil {
			return nil
		}
		return &shardFailure{o.blocked.reason, o.blocked.message}
	}},
	{"failed now", func(_ *syncv1alpha1.SyncTaskStatus, _ observed, failure *shardFailure) *shardFailure { return failure }},
	{"failed and stopped", func(st *syncv1alpha1.SyncTaskStatus, o observed, _ *shardFailure) *shardFailure {
		if !o.failedStop || st.LastFailure == nil {
			return nil
		}
		return &shardFailure{st.LastFailure.Reason, st.LastFailure.Message + "; the workers are stopped: fix the cause, then change the spec or set the annotation " +
			syncv1alpha1.RetryAnnotation + " to a new value"}
	}},
	{"worker restarted", func(_ *syncv1alpha1.SyncTaskStatus, o observed, _ *shardFailure) *shardFailure {
		for _, w := range o.workers {
			if e := w.lastExit; !o.suspended && e != nil && e.ExitCode != workerapi.ExitDone && w.restarts > 0 && o.now.Sub(e.FinishedAt.Time) < recentExit {
				return &shardFailure{syncv1alpha1.ReasonWorkerRestarted, fmt.Sprintf("%s restarted %d times, last at %s: %s",
					w.pod, w.restarts, e.FinishedAt.UTC().Format(time.RFC3339), exitText(e))}
			}
		}
		return nil
	}},
	{"worker error", func(_ *syncv1alpha1.SyncTaskStatus, o observed, _ *shardFailure) *shardFailure {
		for _, w := range o.workers {
			if !o.suspended && w.report != nil && w.report.Error != "" {
				return &shardFailure{syncv1alpha1.ReasonWorkerError, fmt.Sprintf("%s: %s", w.pod, w.report.Error)}
			}
		}
		return nil
	}},
	{"status unreadable", func(_ *syncv1alpha1.SyncTaskStatus, o observed, _ *shardFailure) *shardFailure {
		for _, w := range o.workers {
			if !o.suspended && w.running && w.pollErr != nil {
				return &shardFailure{syncv1alpha1.ReasonStatusUnavailable, fmt.Sprintf(
					"cannot read %s's /status: %v; the manager must reach the worker pods on the metrics port", w.pod, w.pollErr)}
			}
		}
		return nil
	}},
	{"shard discovery", func(_ *syncv1alpha1.SyncTaskStatus, o observed, _ *shardFailure) *shardFailure {
		if o.plan.err == nil {
			return nil
		}
		return &shardFailure{syncv1alpha1.ReasonShardDiscoveryFailed, fmt.Sprintf(
			"the workers cannot list the source's shards (the last known ones stand, and a shard added meanwhile gets no worker yet): %v", o.plan.err)}
	}},
	{"verification differences", func(st *syncv1alpha1.SyncTaskStatus, _ observed, _ *shardFailure) *shardFailure {
		if v := st.LastVerification; v != nil && v.Result == syncv1alpha1.VerificationFailed {
			return &shardFailure{syncv1alpha1.ReasonVerificationFailed, v.Message}
		}
		return nil
	}},
}

// degradedCondition is the first problem the checks find, or Healthy.
func degradedCondition(st *syncv1alpha1.SyncTaskStatus, o observed, failure *shardFailure) shardFailure {
	for _, c := range degradedChecks {
		if f := c.check(st, o, failure); f != nil {
			return *f
		}
	}
	return shardFailure{syncv1alpha1.ReasonHealthy, "no problems seen"}
}

func readyCondition(st *syncv1alpha1.SyncTaskStatus, o observed, degraded shardFailure) (ready, progressing cond) {
	if o.blocked != nil {
		c := cond{false, o.blocked.reason, o.blocked.message}
		return c, c
	}
	switch st.Phase {
	case syncv1alpha1.PhasePaused:
		c := cond{false, syncv1alpha1.ReasonSuspended, "suspended: workers scaled to zero, the checkpoint is kept; set spec.suspend to false to resume"}
		return c, c
	case syncv1alpha1.PhaseCompleted:
		msg := "the copy is complete"
		if v := st.LastVerification; v != nil {
			msg += "; " + v.Message
		}
		return cond{true, syncv1alpha1.ReasonCompleted, msg}, cond{false, syncv1alpha1.ReasonCompleted, msg}
	case syncv1alpha1.PhaseFailed:
		return cond{false, syncv1alpha1.ReasonFailed, degraded.message}, cond{false, syncv1alpha1.ReasonFailed, degraded.message}
	case syncv1alpha1.PhaseStreaming:
		if st.LagUnknown != "" {
			return cond{false, syncv1alpha1.ReasonLagUnknown, fmt.Sprintf("streaming changes; the lag is not known yet (%s), so Ready waits for it", st.LagUnknown)},
				cond{true, syncv1alpha1.ReasonStreaming, "replaying the source's changes"}
		}
		if st.LagSeconds < ReadyLagSeconds {
			return cond{true, syncv1alpha1.ReasonStreaming, fmt.Sprintf("streaming changes: %ds behind the source, %d ops/s", st.LagSeconds, st.OpsPerSecond)},
				cond{true, syncv1alpha1.ReasonStreaming, "replaying the source's changes"}
		}
		return cond{false, syncv1alpha1.ReasonLagging, fmt.Sprintf("the target is %ds behind the source (Ready below %ds)", st.LagSeconds, ReadyLagSeconds)},
			cond{true, syncv1alpha1.ReasonStreaming, "replaying the source's changes"}
	case syncv1alpha1.PhaseFullSync:
		msg := "copying"
		if p := st.Progress; p != nil {
			msg = fmt.Sprintf("copying: %s (%d of about %d documents)", p.Percent, p.Documents, p.EstimatedDocuments)
		}
		return cond{false, string(syncv1alpha1.PhaseFullSync), msg}, cond{true, string(syncv1alpha1.PhaseFullSync), msg}
	case syncv1alpha1.PhaseVerifying:
		msg := fmt.Sprintf("comparing source and target (%s)", o.verifyMode)
		return cond{false, string(syncv1alpha1.PhaseVerifying), msg}, cond{true, string(syncv1alpha1.PhaseVerifying), msg}
	}
	readyPods := 0
	for _, w := range o.workers {
		if w.ready {
			readyPods++
		}
	}
	msg := fmt.Sprintf("waiting for the workers to report (%d of %d pods ready)", readyPods, len(o.workers))
	if degraded.reason != syncv1alpha1.ReasonHealthy {
		msg += ": " + degraded.message
	}
	return cond{false, syncv1alpha1.ReasonWorkersStarting, msg}, cond{true, syncv1alpha1.ReasonWorkersStarting, msg}
}
