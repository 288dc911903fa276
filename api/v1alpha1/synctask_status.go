package v1alpha1

// The status half of a SyncTask: what the operator and the workers report.

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// CopyProgress is how far the full copy is.
type CopyProgress struct {
	// Documents is the number of documents copied so far.
	// +optional
	Documents int64 `json:"documents,omitempty"`
	// Bytes is the number of document bytes copied so far.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// EstimatedDocuments is the source's document count when the copy
	// started (an estimate: the source keeps changing).
	// +optional
	EstimatedDocuments int64 `json:"estimatedDocuments,omitempty"`
	// Percent is Documents out of EstimatedDocuments for people, such as
	// "42%"; it reads 100% only once the copy has finished.
	// +kubebuilder:validation:Pattern=`^[0-9]{1,3}%$`
	// +optional
	Percent string `json:"percent,omitempty"`
}

// ShardStatus is what one worker (one shard of a sharded source, or the
// only worker of a replica set) reports.
//
// For a sharded source the entries are also the operator's record of which
// worker pod replays which shard: the pod with ordinal N (<task>-worker-N)
// runs the subtask of the shard whose entry has ordinal N. An ordinal is
// given once, when the shard is first discovered, and never changes, so a
// reordered config.shards never moves a shard's checkpoint to another
// worker; a shard added later gets the next ordinal.
type ShardStatus struct {
	// Name is the shard's _id in config.shards; for a replica set, the
	// worker pod's name.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Ordinal is the StatefulSet ordinal of the worker pod that replays
	// this shard.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Ordinal int32 `json:"ordinal"`
	// Removed is true once the shard has left config.shards: its worker
	// reads the shard's oplog to the end, then the phase reads Retired.
	// +optional
	Removed bool `json:"removed,omitempty"`
	// Phase is where this worker is.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// LagSeconds is how far the applied changes are behind the newest
	// change read from this shard's source, in seconds. Unset while the
	// copy runs; once set, 0 (caught up) is kept rather than omitted. It
	// means nothing (and reads 0) while lagUnknown is set.
	// +kubebuilder:validation:Minimum=0
	// +optional
	LagSeconds int64 `json:"lagSeconds"`
	// LagUnknown says why this worker's lag is not known yet (it has not
	// read the source's newest position since it started); empty once it
	// is.
	// +optional
	LagUnknown string `json:"lagUnknown,omitempty"`
	// OpsPerSecond is the rate at which this worker applies changes.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OpsPerSecond int64 `json:"opsPerSecond"`
	// HeldWrites counts this shard's writes held back after chunk
	// migrations so far (holds.heldWrites in the worker's /status): each
	// waited until the other shards' workers had applied everything up to
	// the migration, so that no older version of a moved document lands
	// after a newer one. 0 from workers that hold none.
	// +kubebuilder:validation:Minimum=0
	// +optional
	HeldWrites int64 `json:"heldWrites"`
	// Documents is the number of documents this worker has copied.
	// +optional
	Documents int64 `json:"documents,omitempty"`
	// AppliedTimestamp is the oplog position (BSON timestamp written as
	// seconds:increment) up to which everything has been applied.
	// +kubebuilder:validation:Pattern=`^[0-9]+:[0-9]+$`
	// +optional
	AppliedTimestamp string `json:"appliedTimestamp,omitempty"`
	// CheckpointTime is the wall-clock time of the last saved checkpoint's
	// oplog position.
	// +optional
	CheckpointTime *metav1.Time `json:"checkpointTime,omitempty"`
	// LastError is the last error this worker met, in plain words; empty
	// once it has recovered.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// Cutover is this shard's part in a cut-over of a sharded source:
	// "CatchingUp", "CaughtUp", "Draining to <seconds:increment>" (the
	// shard's newest oplog position once writes stopped) or "Drained at
	// <seconds:increment>" (its worker applied everything up to it and
	// stopped replaying).
	// +optional
	Cutover string `json:"cutover,omitempty"`
	// LastReportTime is when the worker's figures were last written here.
	// They are written at most every 30 s, and not at all while they stay
	// the same (an idle task), so an old time alone does not mean the
	// worker stopped: the Ready and Degraded conditions say that.
	// +optional
	LastReportTime *metav1.Time `json:"lastReportTime,omitempty"`
}

// VerificationResult values.
const (
	VerificationPassed = "Passed"
	VerificationFailed = "Failed"
)

// Verification is the outcome of the last comparison of source and target.
type Verification struct {
	// Mode is the comparison made: count, hash or sample.
	Mode config.VerifyMode `json:"mode"`
	// Result is Passed when every compared namespace matched.
	// +kubebuilder:validation:Enum=Passed;Failed
	Result string `json:"result"`
	// Time is when the comparison finished.
	Time metav1.Time `json:"time"`
	// Namespaces is the number of namespaces compared.
	// +optional
	Namespaces int32 `json:"namespaces,omitempty"`
	// DifferingNamespaces lists the namespaces (db.collection) that differ,
	// at most 100 of them.
	// +kubebuilder:validation:MaxItems=100
	// +listType=set
	// +optional
	DifferingNamespaces []string `json:"differingNamespaces,omitempty"`
	// Message says what differed, in plain words.
	// +optional
	Message string `json:"message,omitempty"`
}

// StreamingVerification is a streaming verification pass as a worker
// reported it.
type StreamingVerification struct {
	// Running is true while a pass runs.
	// +optional
	Running bool `json:"running,omitempty"`
	// Passes counts the finished passes.
	// +optional
	Passes int64 `json:"passes,omitempty"`
	// Result is Passed or Failed for the last finished pass: Failed when a
	// mismatch persisted, or some could not be rechecked.
	// +kubebuilder:validation:Enum=Passed;Failed
	// +optional
	Result string `json:"result,omitempty"`
	// FinishedAt is when the last pass finished.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Namespaces and NamespacesDone count the collections of the pass and
	// those read through.
	// +optional
	Namespaces int32 `json:"namespaces,omitempty"`
	// +optional
	NamespacesDone int32 `json:"namespacesDone,omitempty"`
	// DocumentsCompared counts the documents compared so far.
	// +optional
	DocumentsCompared int64 `json:"documentsCompared,omitempty"`
	// PendingRechecks is the mismatches waiting for replay to pass them.
	// +optional
	PendingRechecks int64 `json:"pendingRechecks,omitempty"`
	// Persisting counts the mismatches that survived every recheck.
	// +optional
	Persisting int64 `json:"persisting,omitempty"`
	// Findings lists the first persisting mismatches, at most 20.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Findings []VerificationFinding `json:"findings,omitempty"`
	// Message says what the pass found, in plain words.
	// +optional
	Message string `json:"message,omitempty"`
}

// VerificationFinding is one document that differs between source and
// target.
type VerificationFinding struct {
	// Namespace is the source collection (db.collection).
	Namespace string `json:"namespace"`
	// ID is the document's _id as canonical extended JSON.
	ID string `json:"id"`
	// Kind is missing (on the source only), extra (on the target only) or
	// changed.
	Kind string `json:"kind"`
}

// SyncTaskStatus is what the operator and the workers report.
type SyncTaskStatus struct {
	// ObservedGeneration is the generation of the spec this status
	// describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is where the task is: Pending, FullSync, Streaming, Paused,
	// Verifying, Completed or Failed. For a sharded source it is the phase
	// of the shard furthest behind.
	// +optional
	Phase Phase `json:"phase,omitempty"`
	// Conditions are Ready, Progressing and Degraded, each with the
	// generation it was computed for.
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// StartedAt is when the workers first started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// Progress is how far the full copy is, summed over shards.
	// +optional
	Progress *CopyProgress `json:"progress,omitempty"`
	// LagSeconds is how far the target is behind the source, in seconds:
	// the largest lag over shards. Unset while the copy runs; once set, 0
	// (caught up) is kept rather than omitted. It means nothing (and reads
	// 0) while lagUnknown is set.
	// +kubebuilder:validation:Minimum=0
	// +optional
	LagSeconds int64 `json:"lagSeconds"`
	// LagUnknown says why the lag is not known yet: a worker replays but
	// has not read the source's newest position since it started, so it
	// cannot tell how far behind it is. Empty once every worker's lag is
	// known.
	// +optional
	LagUnknown string `json:"lagUnknown,omitempty"`
	// Lag is the Lag column: lagSeconds as "12s", or "unknown" while
	// lagUnknown is set; empty while the copy runs.
	// +optional
	Lag string `json:"lag,omitempty"`
	// OpsPerSecond is the rate at which changes are applied to the target,
	// summed over shards; 0 is kept, like lagSeconds.
	// +kubebuilder:validation:Minimum=0
	// +optional
	OpsPerSecond int64 `json:"opsPerSecond"`
	// BytesPerSecond is the rate at which document bytes are written to the
	// target, summed over shards.
	// +kubebuilder:validation:Minimum=0
	// +optional
	BytesPerSecond int64 `json:"bytesPerSecond,omitempty"`
	// CheckpointTime is the wall-clock time of the oplog position up to
	// which every shard has been applied and saved: a restart resumes from
	// there.
	// +optional
	CheckpointTime *metav1.Time `json:"checkpointTime,omitempty"`
	// ShardSummary counts the shards whose workers stream, such as
	// "3/3 streaming" (retired shards are not counted).
	// +optional
	ShardSummary string `json:"shardSummary,omitempty"`
	// Shards has one entry per worker: one per shard of a sharded source
	// (with the ordinal of the worker pod that replays it), one for a
	// replica set.
	// +listType=map
	// +listMapKey=name
	// +optional
	Shards []ShardStatus `json:"shards,omitempty"`
	// LastVerification is the outcome of the last comparison of source and
	// target.
	// +optional
	LastVerification *Verification `json:"lastVerification,omitempty"`
	// StreamingVerification is the streaming verifier's last (or current)
	// pass (spec.verify.continuous, or POST /verify on a worker): every
	// document compared by _id while the source keeps changing, only
	// mismatches that persist after replay passed them reported. It does
	// not fail the task.
	// +optional
	StreamingVerification *StreamingVerification `json:"streamingVerification,omitempty"`
	// Failures counts the times the task failed (verification found
	// differences, the oplog window was lost, a fatal error). Each failure
	// stopped the workers: nothing more runs until the spec changes or the
	// sync.mongoferry.io/retry annotation gets a new value.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Failures int32 `json:"failures,omitempty"`
	// LastFailure is the most recent failure.
	// +optional
	LastFailure *Failure `json:"lastFailure,omitempty"`
	// LastRetry is the value of the sync.mongoferry.io/retry annotation
	// last acted on.
	// +optional
	LastRetry string `json:"lastRetry,omitempty"`
	// Cutover is how far the requested cut-over is.
	// +optional
	Cutover *CutoverStatus `json:"cutover,omitempty"`
	// ReverseTask names the SyncTask created for spec.reverse.
	// +optional
	ReverseTask string `json:"reverseTask,omitempty"`
	// VerifyRequest is the last on-demand verification asked for with the
	// sync.mongoferry.io/verify annotation, and what the workers answered;
	// the verification's report goes to lastVerification.
	// +optional
	VerifyRequest *VerifyRequest `json:"verifyRequest,omitempty"`
}

// CutoverStatus is how far a cut-over is.
type CutoverStatus struct {
	// Step is the step the cut-over is at: CatchingUp, BlockingWrites,
	// Draining, Verifying, Finalizing, Complete or Failed.
	Step string `json:"step"`
	// CaughtUp is true once the lag was at most cutover.maxLagSeconds.
	// +optional
	CaughtUp bool `json:"caughtUp,omitempty"`
	// WritesBlocked is true while user writes on the source are blocked.
	// +optional
	WritesBlocked bool `json:"writesBlocked,omitempty"`
	// SourcePosition is the source's newest oplog position (seconds,
	// increment) the target was drained to.
	// +optional
	SourcePosition string `json:"sourcePosition,omitempty"`
	// TargetPosition is the target's newest oplog position once finalized:
	// a reverse sync starts there.
	// +optional
	TargetPosition string `json:"targetPosition,omitempty"`
	// Verification is the comparison run at cut-over.
	// +optional
	Verification *Verification `json:"verification,omitempty"`
	// StartedAt is when the cut-over was first seen requested.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when it completed.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Message says what the step waits for, or why it failed and what to
	// do.
	// +optional
	Message string `json:"message,omitempty"`
}

// Failure is why and when a task failed.
type Failure struct {
	// Reason is the Degraded reason of the failure (VerificationFailed,
	// OplogWindowLost, CutoverFailed, Failed).
	Reason string `json:"reason"`
	// Message says what failed and what to do.
	// +optional
	Message string `json:"message,omitempty"`
	// Time is when the failure was seen.
	Time metav1.Time `json:"time"`
}
