package controller

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// ReadyLagSeconds is the lag below which a streaming task is Ready.
const ReadyLagSeconds = 30

// recentExit is how long a worker's non-zero exit keeps the task Degraded.
const recentExit = 10 * time.Minute

// waitingProblems are container waiting reasons that mean the worker
// cannot start.
var waitingProblems = []string{"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError",
	"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "RunContainerError"}

// observed is what one reconcile knows: the spec's facts that shape the
// status, and the workers.
type observed struct {
	generation int64
	mode       config.Mode
	verifyMode config.VerifyMode
	// cutover is spec.cutover.
	cutover   config.Cutover
	suspended bool
	// blocked stops the task before any worker starts (a missing Secret,
	// a spec the engine refuses).
	blocked *blockedError
	// topology is what the workers reported of the source (one worker
	// whatever the source when the task does not read shards).
	topology discovery
	// shardNames are the names of the shard entries the task has (old
	// entries of other names are dropped); nil keeps every old entry.
	shardNames []string
	// plan is which worker replays which shard (no entries for one
	// worker).
	plan    shardPlan
	workers []workerObservation
	now     time.Time
	// failedStop: the task failed in this generation and no retry was
	// asked for, so its workers are stopped and it stays Failed.
	failedStop bool
	// restart: a failed task runs again (a new generation, or retry, the
	// new value of the retry annotation): its failed shards start over.
	restart bool
	retry   string
}

// phaseOrder ranks phases from furthest behind to furthest ahead: the
// task's phase is its slowest shard's.
var phaseOrder = []syncv1alpha1.Phase{
	syncv1alpha1.PhasePending, syncv1alpha1.PhaseFullSync, syncv1alpha1.PhaseStreaming,
	syncv1alpha1.PhaseVerifying, syncv1alpha1.PhaseCompleted,
}

// computeStatus folds one reconcile's observations into the previous
// status. Values a worker cannot report while stopped (copy progress,
// checkpoint, shard entries) are kept from the previous status.
func computeStatus(old *syncv1alpha1.SyncTaskStatus, o observed) syncv1alpha1.SyncTaskStatus {
	if o.restart {
		old = restarted(old, o.retry)
	}
	st := *old.DeepCopy()
	st.ObservedGeneration = o.generation

	v := observeShards(old, o)
	st.Shards = v.shards
	st.ShardSummary = shardSummary(st.Shards)
	st.Phase = taskPhase(old, o, v)
	sumFigures(&st, old, v.reports)
	st.Progress = copyProgress(old.Progress, o, st.Phase, st.Shards, v.reports)
	st.CheckpointTime = lowWatermark(st.Shards, old.CheckpointTime)
	st.LastVerification = verification(old.LastVerification, v.reports, v.verifyExits, o)
	st.StreamingVerification = streamingVerification(old.StreamingVerification, v.reports)
	st.Cutover = cutoverStatus(old.Cutover, o)

	if st.Phase == syncv1alpha1.PhaseFailed && old.Phase != syncv1alpha1.PhaseFailed {
		f := shardFailure{syncv1alpha1.ReasonFailed, "a worker failed"}
		if v.failure != nil {
			f = *v.failure
		}
		st.Failures++
		st.LastFailure = &syncv1alpha1.Failure{Reason: f.reason, Message: f.message, Time: metav1.NewTime(o.now.UTC().Truncate(time.Second))}
	}
	setConditions(&st, o, v.failure)
	return st
}

// shardsView is what the workers observed now say: each shard's status,
// the reports read, the first failure and the exits that carry a
// verification's outcome.
type shardsView struct {
	shards      []syncv1alpha1.ShardStatus
	reports     []*workerapi.Status
	failure     *shardFailure
	verifyExits []*corev1.ContainerStateTerminated
}

// observeShards builds each shard's status from its worker (one per
// shard: a pod being replaced next to its successor, or scaled away, is
// left out) and keeps the shards no worker reported now.
func observeShards(old *syncv1alpha1.SyncTaskStatus, o observed) shardsView {
	prev := map[string]syncv1alpha1.ShardStatus{}
	for _, s := range old.Shards {
		prev[s.Name] = s
	}
	var v shardsView
	seen := map[string]bool{}
	for _, w := range o.workers {
		if seen[w.shard] || (o.shardNames != nil && !slices.Contains(o.shardNames, w.shard)) {
			continue // a pod being replaced next to its successor, or scaled away
		}
		seen[w.shard] = true
		sh, ok := prev[w.shard]
		if !ok {
			sh = syncv1alpha1.ShardStatus{Name: w.shard, Phase: syncv1alpha1.PhasePending}
		}
		v.shards = append(v.shards, v.observeWorker(sh, w, old, o.now))
	}
	for _, s := range old.Shards {
		if seen[s.Name] || (o.shardNames != nil && !slices.Contains(o.shardNames, s.Name)) {
			continue // reported above, or no longer a worker of the task
		}
		s.OpsPerSecond = 0
		if o.suspended {
			s.Phase = syncv1alpha1.PhasePaused
		}
		v.shards = append(v.shards, s)
	}
	if o.plan.entries != nil {
		v.shards = mapShards(v.shards, o.plan)
	}
	return v
}

// observeWorker updates the shard's status sh from its worker's report or
// last exit, and records the report, a failure and a verifying exit in v.
func (v *shardsView) observeWorker(sh syncv1alpha1.ShardStatus, w workerObservation, old *syncv1alpha1.SyncTaskStatus, now time.Time) syncv1alpha1.ShardStatus {
	sh.OpsPerSecond = 0
	sh.Ordinal = int32(max(w.ordinal, 0))
	if staleExit(old, w.lastExit) {
		w.lastExit = nil
	}
	exitPhase, f := exitOutcome(w)
	if f != nil && v.failure == nil {
		v.failure = f
	}
	switch r := w.report; {
	case r != nil:
		v.reports = append(v.reports, r)
		applyReport(&sh, r, now)
		sh.HeldWrites = w.held
		switch {
		case sh.Phase == syncv1alpha1.PhasePending && exitPhase != "":
			sh.Phase = exitPhase // failing again right after a restart
		case exitPhase == syncv1alpha1.PhaseCompleted && sh.Phase != syncv1alpha1.PhaseFailed:
			// The worker finished the task once (exit 0) and was
			// restarted (StatefulSet pods always are): it only checks
			// again, and the controller stops it.
			sh.Phase = syncv1alpha1.PhaseCompleted
		}
		if sh.Phase == syncv1alpha1.PhaseFailed && v.failure == nil {
			v.failure = reportedFailure(w.pod, r)
		}
	case exitPhase != "":
		sh.Phase = exitPhase
	}
	if sh.LastError == "" && w.lastExit != nil && w.lastExit.ExitCode != workerapi.ExitDone && w.report == nil {
		sh.LastError = exitText(w.lastExit)
	}
	if e := w.lastExit; e != nil && (e.ExitCode == workerapi.ExitDone || e.ExitCode == workerapi.ExitVerificationFailed) {
		v.verifyExits = append(v.verifyExits, e)
	}
	return sh
}

// taskPhase is Paused when suspended; Completed stays once reached; else
// the slowest shard's, Failed if any failed, Pending before any report.
func taskPhase(old *syncv1alpha1.SyncTaskStatus, o observed, v shardsView) syncv1alpha1.Phase {
	switch {
	case o.suspended:
		return syncv1alpha1.PhasePaused
	case o.failedStop:
		return syncv1alpha1.PhaseFailed
	case old.Phase == syncv1alpha1.PhaseCompleted && len(v.reports) == 0 && v.failure == nil:
		return syncv1alpha1.PhaseCompleted
	case v.failure != nil && v.failure.reason != syncv1alpha1.ReasonWorkerFailing:
		return syncv1alpha1.PhaseFailed
	default:
		return slowestPhase(v.shards)
	}
}

// sumFigures sets the task's figures: lag is the largest over shards,
// rates are sums over the workers that reported now, and the start is the
// earliest a worker reports (once).
func sumFigures(st *syncv1alpha1.SyncTaskStatus, old *syncv1alpha1.SyncTaskStatus, reports []*workerapi.Status) {
	st.LagSeconds, st.OpsPerSecond, st.BytesPerSecond = 0, 0, 0
	st.LagUnknown = ""
	for _, s := range st.Shards {
		st.LagSeconds = max(st.LagSeconds, s.LagSeconds)
		if s.LagUnknown != "" && st.LagUnknown == "" {
			st.LagUnknown = s.Name + ": " + s.LagUnknown
		}
	}
	st.Lag = lagColumn(st)
	for _, r := range reports {
		if r.Replay != nil {
			st.OpsPerSecond += int64(math.Round(r.Replay.OpsPerSecond))
		}
		if r.Phase == workerapi.PhaseFullSync {
			st.BytesPerSecond += int64(math.Round(r.Copy.BytesPerSecond))
		}
		if !r.StartedAt.IsZero() && (st.StartedAt == nil || r.StartedAt.Before(st.StartedAt.Time)) && old.StartedAt == nil {
			t := metav1.NewTime(r.StartedAt.UTC().Truncate(time.Second))
			st.StartedAt = &t
		}
	}
}

// restarted is a failed task's status as it runs again: its failed
// shards start over (Pending, their error cleared), and retry, when set,
// is recorded as acted on. Failures and LastFailure are kept.
func restarted(old *syncv1alpha1.SyncTaskStatus, retry string) *syncv1alpha1.SyncTaskStatus {
	st := old.DeepCopy()
	st.Phase = syncv1alpha1.PhasePending
	for i := range st.Shards {
		if st.Shards[i].Phase == syncv1alpha1.PhaseFailed {
			st.Shards[i].Phase = syncv1alpha1.PhasePending
			st.Shards[i].LastError = ""
		}
	}
	if v := st.LastVerification; v != nil && v.Result == syncv1alpha1.VerificationFailed {
		st.LastVerification = nil
	}
	// A failed cut-over is requested again: the workers start it over and
	// report its steps afresh.
	if c := st.Cutover; c != nil && c.Step == workerapi.CutoverFailed {
		st.Cutover = nil
	}
	if retry != "" {
		st.LastRetry = retry
	}
	return st
}

// mapShards orders the entries by the plan's ordinals, with an entry for
// every shard of the plan (Pending before its worker reports).
func mapShards(shards []syncv1alpha1.ShardStatus, p shardPlan) []syncv1alpha1.ShardStatus {
	out := make([]syncv1alpha1.ShardStatus, 0, len(p.entries))
	for _, e := range p.entries {
		i := slices.IndexFunc(shards, func(s syncv1alpha1.ShardStatus) bool { return s.Name == e.name })
		sh := syncv1alpha1.ShardStatus{Name: e.name, Phase: syncv1alpha1.PhasePending}
		if i >= 0 {
			sh = shards[i]
		}
		sh.Ordinal, sh.Removed = e.ordinal, e.removed
		out = append(out, sh)
	}
	return out
}

// shardFailure is why a shard is Failed or cannot run.
type shardFailure struct {
	reason, message string
}

// staleExit reports whether a worker's last exit is the one the task
// failed on before it was started again (a new generation or the retry
// annotation): a pod not yet replaced still shows it, and it must not fail
// the restarted task again. Status times have whole seconds, so an exit
// in the second the failure was recorded counts as that failure.
func staleExit(old *syncv1alpha1.SyncTaskStatus, e *corev1.ContainerStateTerminated) bool {
	f := old.LastFailure
	return e != nil && f != nil && old.Phase != syncv1alpha1.PhaseFailed && !e.FinishedAt.After(f.Time.Time)
}

// exitOutcome reads a worker's last exit: the phase it implies (Completed
// after exit 0, Failed after the exit codes that will not go away by
// restarting) and the failure to report.
func exitOutcome(w workerObservation) (syncv1alpha1.Phase, *shardFailure) {
	e := w.lastExit
	if e == nil {
		if w.waiting != nil && slices.Contains(waitingProblems, w.waiting.Reason) {
			return "", &shardFailure{syncv1alpha1.ReasonWorkerFailing, fmt.Sprintf("%s: %s: %s", w.pod, w.waiting.Reason, w.waiting.Message)}
		}
		return "", nil
	}
	switch e.ExitCode {
	case workerapi.ExitDone:
		return syncv1alpha1.PhaseCompleted, nil
	case workerapi.ExitOplogWindowLost:
		return syncv1alpha1.PhaseFailed, &shardFailure{syncv1alpha1.ReasonOplogWindowLost, fmt.Sprintf(
			"%s: the source's oplog no longer holds the checkpoint: changes were lost; delete the task's checkpoint (or recreate the task with deletePolicy Delete) to copy everything again: %s",
			w.pod, exitText(e))}
	case workerapi.ExitVerificationFailed:
		return syncv1alpha1.PhaseFailed, &shardFailure{syncv1alpha1.ReasonVerificationFailed, fmt.Sprintf("%s: %s", w.pod, exitText(e))}
	case workerapi.ExitCutoverFailed:
		return syncv1alpha1.PhaseFailed, &shardFailure{syncv1alpha1.ReasonCutoverFailed, fmt.Sprintf("%s: %s", w.pod, exitText(e))}
	}
	if w.waiting != nil && slices.Contains(waitingProblems, w.waiting.Reason) {
		return "", &shardFailure{syncv1alpha1.ReasonWorkerFailing, fmt.Sprintf("%s: %s, restarted %d times: %s", w.pod, w.waiting.Reason, w.restarts, exitText(e))}
	}
	return "", nil
}

// lagColumn is the Lag column of st: "unknown" while a worker's lag is,
// the lag in seconds once the copy is over, nothing before.
func lagColumn(st *syncv1alpha1.SyncTaskStatus) string {
	switch {
	case st.LagUnknown != "":
		return "unknown"
	case st.Phase == "", st.Phase == syncv1alpha1.PhasePending, st.Phase == syncv1alpha1.PhaseFullSync:
		return ""
	}
	return fmt.Sprintf("%ds", st.LagSeconds)
}

// reportedFailure is the failure a worker's /status shows before it
// exits: the controller may read the report first and the exit code only
// later, so the reason must not depend on which it sees first.
//
// A failed cut-over is CutoverFailed whichever step failed, its
// verification included, as the worker's exit code (4) says.
func reportedFailure(pod string, r *workerapi.Status) *shardFailure {
	if c := r.Cutover; c != nil && c.Step == workerapi.CutoverFailed {
		return &shardFailure{syncv1alpha1.ReasonCutoverFailed, fmt.Sprintf("%s: %s", pod, c.Message)}
	}
	if v := r.Verify; v != nil && !v.Running && !v.OK {
		return &shardFailure{syncv1alpha1.ReasonVerificationFailed, fmt.Sprintf("%s: verification found %d namespaces that differ between source and target (%s)",
			pod, len(v.Differing), strings.Join(v.Differing, ", "))}
	}
	return &shardFailure{reason: syncv1alpha1.ReasonFailed, message: fmt.Sprintf("%s: %s", pod, r.Error)}
}

// applyReport copies a worker's /status into its shard entry.
func applyReport(sh *syncv1alpha1.ShardStatus, r *workerapi.Status, now time.Time) {
	sh.Phase = syncv1alpha1.Phase(r.Phase)
	if sh.Phase == "" {
		sh.Phase = syncv1alpha1.PhasePending
	}
	if len(r.Shards) == 1 && r.Shards[0].Phase == workerapi.SubtaskRetired {
		sh.Phase = syncv1alpha1.PhaseRetired
	}
	if len(r.Shards) == 1 && r.Shards[0].Cutover != nil {
		sh.Cutover = shardCutoverText(r.Shards[0].Cutover)
	}
	sh.LastError = r.Error
	t := metav1.NewTime(now.UTC().Truncate(time.Second))
	sh.LastReportTime = &t
	// A worker that resumes after the copy copies nothing this run and
	// reports no documents: keep what earlier runs reported.
	sh.Documents = max(sh.Documents, r.Copy.Documents)
	sh.LagSeconds, sh.LagUnknown = 0, ""
	if rp := r.Replay; rp != nil {
		sh.LagSeconds = int64(math.Ceil(rp.LagSeconds))
		if !rp.LagKnown() {
			sh.LagSeconds, sh.LagUnknown = 0, rp.LagUnknown
		}
		sh.OpsPerSecond = int64(math.Round(rp.OpsPerSecond))
		if !rp.AppliedTS.IsZero() {
			sh.AppliedTimestamp = fmt.Sprintf("%d:%d", rp.AppliedTS.T, rp.AppliedTS.I)
			ct := metav1.NewTime(rp.AppliedTime.UTC())
			sh.CheckpointTime = &ct
		}
	}
}

func phaseRank(p syncv1alpha1.Phase) int {
	if i := slices.Index(phaseOrder, p); i >= 0 {
		return i
	}
	return 0
}

// slowestPhase is the phase of the shard furthest behind; Pending when
// there is none.
func slowestPhase(shards []syncv1alpha1.ShardStatus) syncv1alpha1.Phase {
	if len(shards) == 0 {
		return syncv1alpha1.PhasePending
	}
	p := syncv1alpha1.PhaseCompleted
	active := false
	for _, s := range shards {
		if s.Phase == syncv1alpha1.PhaseRetired {
			continue // its shard left the cluster: it holds nothing back
		}
		active = true
		if s.Phase == syncv1alpha1.PhaseFailed {
			return syncv1alpha1.PhaseFailed
		}
		if phaseRank(s.Phase) < phaseRank(p) {
			p = s.Phase
		}
	}
	if !active {
		return syncv1alpha1.PhasePending
	}
	return p
}

func copyDone(p syncv1alpha1.Phase) bool {
	return p == syncv1alpha1.PhaseStreaming || p == syncv1alpha1.PhaseVerifying || p == syncv1alpha1.PhaseCompleted ||
		p == syncv1alpha1.PhaseRetired
}

// copyProgress sums the workers' copy figures. The percentage reads 100%
// only when every shard's copy has finished; until then it stops at 99%
// (estimates drift while the source changes).
func copyProgress(old *syncv1alpha1.CopyProgress, o observed, phase syncv1alpha1.Phase, shards []syncv1alpha1.ShardStatus, reports []*workerapi.Status) *syncv1alpha1.CopyProgress {
	if o.mode == config.ModeIncremental {
		return nil
	}
	p := &syncv1alpha1.CopyProgress{Percent: "0%"}
	if old != nil {
		p = old.DeepCopy()
	}
	var docs, bytes, est int64
	copied := false
	for _, r := range reports {
		if r.Copy.Ranges > 0 || r.Copy.EstimatedDocuments > 0 {
			copied = true
			docs += r.Copy.Documents
			bytes += r.Copy.Bytes
			est += r.Copy.EstimatedDocuments
		}
	}
	if copied {
		p.Documents, p.Bytes, p.EstimatedDocuments = max(p.Documents, docs), max(p.Bytes, bytes), max(p.EstimatedDocuments, est)
	}
	done := phase == syncv1alpha1.PhaseCompleted || len(shards) > 0
	for _, s := range shards {
		done = done && copyDone(s.Phase)
	}
	switch {
	case done || (phase == syncv1alpha1.PhasePaused && p.Percent == "100%"):
		p.Percent = "100%"
	case phase == syncv1alpha1.PhasePaused:
		// keep the last figure
	case p.EstimatedDocuments > 0:
		p.Percent = fmt.Sprintf("%d%%", min(99, 100*p.Documents/p.EstimatedDocuments))
	default:
		p.Percent = "0%"
	}
	return p
}

// lowWatermark is the oldest checkpoint over shards: everything up to it
// is on the target for every shard. It needs every shard's checkpoint.
func lowWatermark(shards []syncv1alpha1.ShardStatus, old *metav1.Time) *metav1.Time {
	var low *metav1.Time
	for _, s := range shards {
		if s.Phase == syncv1alpha1.PhaseRetired {
			continue
		}
		if s.CheckpointTime == nil {
			return old
		}
		if low == nil || s.CheckpointTime.Before(low) {
			low = s.CheckpointTime.DeepCopy()
		}
	}
	if low == nil {
		return old
	}
	return low
}

// verification takes the last verification a worker reports; its time is
// when the controller first saw that outcome. A worker that completes
// exits at once, so its report is rarely seen: its exit code tells the
// outcome instead (0 passed, 2 found differences, by `ferry run`'s exit
// codes), without the differing namespaces.
func verification(old *syncv1alpha1.Verification, reports []*workerapi.Status, exits []*corev1.ContainerStateTerminated, o observed) *syncv1alpha1.Verification {
	var next *syncv1alpha1.Verification
	for _, r := range reports {
		if r.Verify == nil || r.Verify.Running {
			continue
		}
		next = &syncv1alpha1.Verification{Mode: config.VerifyMode(r.Verify.Mode), Result: syncv1alpha1.VerificationPassed,
			Time: metav1.NewTime(o.now.UTC().Truncate(time.Second)), Namespaces: int32(len(r.Copy.Namespaces))}
		if !r.Verify.OK {
			next.Result = syncv1alpha1.VerificationFailed
			next.DifferingNamespaces = r.Verify.Differing
			if len(next.DifferingNamespaces) > 100 {
				next.DifferingNamespaces = next.DifferingNamespaces[:100]
			}
			next.Message = fmt.Sprintf("%d namespaces differ between source and target (%s): run `ferry verify` for the _ids",
				len(r.Verify.Differing), strings.Join(next.DifferingNamespaces, ", "))
		} else {
			next.Message = fmt.Sprintf("source and target match (%s)", r.Verify.Mode)
		}
	}
	mode := o.verifyMode
	if mode == "" {
		mode = config.VerifyHash
	}
	if next == nil && mode != config.VerifyNone {
		for _, e := range exits {
			next = &syncv1alpha1.Verification{Mode: mode, Result: syncv1alpha1.VerificationPassed,
				Time:    metav1.NewTime(e.FinishedAt.UTC().Truncate(time.Second)),
				Message: fmt.Sprintf("source and target match (%s)", mode)}
			if e.ExitCode == workerapi.ExitVerificationFailed {
				next.Result = syncv1alpha1.VerificationFailed
				next.Message = fmt.Sprintf("source and target differ (%s): %s; run `ferry verify` for the namespaces and _ids", mode, exitText(e))
			}
		}
	}
	if next == nil {
		return old
	}
	if old != nil && old.Result == next.Result && old.Mode == next.Mode && slices.Equal(old.DifferingNamespaces, next.DifferingNamespaces) {
		next.Time = old.Time
		if next.Namespaces == 0 {
			next.Namespaces = old.Namespaces
		}
	}
	return next
}

// maxStreamingFindings caps status.streamingVerification.findings.
const maxStreamingFindings = 20

// streamingVerification maps the first worker's streaming verification
// (the worker that runs every shard, or a replica set's) into the status;
// old is kept while no worker reports one.
func streamingVerification(old *syncv1alpha1.StreamingVerification, reports []*workerapi.Status) *syncv1alpha1.StreamingVerification {
	for _, r := range reports {
		v := r.StreamingVerify
		if v == nil {
			continue
		}
		out := &syncv1alpha1.StreamingVerification{Running: v.Running, Passes: v.Passes,
			Namespaces: int32(min(v.Namespaces, math.MaxInt32)), NamespacesDone: int32(min(v.NamespacesDone, math.MaxInt32)), //nolint:gosec // G115: capped
			DocumentsCompared: v.Compared, PendingRechecks: int64(v.PendingRechecks), Persisting: v.Persisting}
		for _, f := range v.Findings[:min(len(v.Findings), maxStreamingFindings)] {
			out.Findings = append(out.Findings, syncv1alpha1.VerificationFinding{Namespace: f.Namespace, ID: f.ID, Kind: f.Kind})
		}
		if !v.FinishedAt.IsZero() {
			t := metav1.NewTime(v.FinishedAt.UTC().Truncate(time.Second))
			out.FinishedAt = &t
		}
		switch {
		case v.Running:
			out.Message = fmt.Sprintf("comparing %s: %d documents, %d mismatches waiting for a recheck", v.CurrentNamespace, v.Compared, v.PendingRechecks)
		case v.Passes == 0:
		case v.Error != "":
			out.Result = syncv1alpha1.VerificationFailed
			out.Message = "the last pass stopped early: " + v.Error
		case v.OK:
			out.Result = syncv1alpha1.VerificationPassed
			out.Message = fmt.Sprintf("source and target match: %d documents compared, %d changes in flight rechecked", v.Compared, v.Resolved)
		default:
			out.Result = syncv1alpha1.VerificationFailed
			out.Message = streamingFailure(v)
		}
		if v.Running && old != nil {
			out.Result = old.Result
		}
		return out
	}
	return old
}

// streamingFailure says why a finished pass failed.
func streamingFailure(v *workerapi.StreamingVerify) string {
	var parts []string
	if v.Persisting > 0 {
		first := ""
		if len(v.Findings) > 0 {
			first = fmt.Sprintf(", first %s _id %s (%s)", v.Findings[0].Namespace, v.Findings[0].ID, v.Findings[0].Kind)
		}
		what := "documents differ"
		if v.Persisting == 1 {
			what = "document differs"
		}
		parts = append(parts, fmt.Sprintf("%d %s after every recheck%s", v.Persisting, what, first))
	}
	if v.NotRechecked > 0 {
		parts = append(parts, fmt.Sprintf("%d mismatches were not rechecked: the recheck budget (verify.maxPendingBytes) was full", v.NotRechecked))
	}
	if v.Unsettled > 0 {
		parts = append(parts, fmt.Sprintf("%d mismatches were not rechecked: replay did not pass them before the pass ended", v.Unsettled))
	}
	return strings.Join(parts, "; ")
}
