package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// DeletePolicy says what happens to the task's checkpoint database on the
// target when the SyncTask is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletePolicy string

// Delete policies.
const (
	// DeleteRetain keeps the checkpoint database: a SyncTask created again
	// under the same name resumes from it.
	DeleteRetain DeletePolicy = "Retain"
	// DeleteDelete drops the task's checkpoints from the target.
	DeleteDelete DeletePolicy = "Delete"
)

// Validation rules, checked by the API server (CEL). Each names the field
// it is about (fieldPath) and tells the user what to do. The rules on one
// endpoint (credentials in URIs, shard overrides, shard keys, TLS) are on
// Source, Target and TLS; these relate fields across the spec.
//
// Source and target the same (ignoring case and a trailing slash; the
// controller's pre-flight check also compares hosts):
// +kubebuilder:validation:XValidation:rule=`(self.source.uri.endsWith('/') ? self.source.uri.substring(0, self.source.uri.size() - 1) : self.source.uri).lowerAscii() != (self.target.uri.endsWith('/') ? self.target.uri.substring(0, self.target.uri.size() - 1) : self.target.uri).lowerAscii()`,message="must differ from source.uri: a task copies from one deployment to another, so point target.uri at the destination",fieldPath=".target.uri"
//
// Fields that only make sense together:
// +kubebuilder:validation:XValidation:rule=`!has(self.fullSync) || !has(self.fullSync.dropTarget) || !self.fullSync.dropTarget || self.mode != 'incremental'`,message="would drop the target's collections, and mode incremental copies nothing back into them: remove dropTarget, or use mode fullAndIncremental",fieldPath=".fullSync.dropTarget"
//
// Fields that cannot change while the task runs (transition rules):
// +kubebuilder:validation:XValidation:rule=`self.mode == oldSelf.mode || (has(self.suspend) && self.suspend) || (has(oldSelf.suspend) && oldSelf.suspend)`,message="cannot change while the task runs: set suspend to true first (or in the same change); the checkpoint belongs to the old mode",fieldPath=".mode",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`self.source.uri == oldSelf.source.uri || (has(self.suspend) && self.suspend) || (has(oldSelf.suspend) && oldSelf.suspend)`,message="cannot change while the task runs: set suspend to true first (or in the same change); the checkpoint refers to the old source",fieldPath=".source.uri",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`self.target.uri == oldSelf.target.uri || (has(self.suspend) && self.suspend) || (has(oldSelf.suspend) && oldSelf.suspend)`,message="cannot change while the task runs: set suspend to true first (or in the same change); the checkpoint is kept on the old target",fieldPath=".target.uri",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule=`self.checkpoint.database == oldSelf.checkpoint.database || (has(self.suspend) && self.suspend) || (has(oldSelf.suspend) && oldSelf.suspend)`,message="cannot change while the task runs: set suspend to true first (or in the same change); the task restarts from nothing in a new checkpoint database",fieldPath=".checkpoint.database",reason=FieldValueForbidden

// SyncTaskSpec is a task for the operator: where to copy from and to
// (Source and Target, with credentials and TLS material from Secrets), the
// options shared with a `ferry run` task file (the sections of pkg/config,
// which mean the same in both), and how the workers run. TaskSpec renders
// it as the workers' task file.
//
// Mode, the source and target URIs and the checkpoint database cannot change
// while the task runs: suspend it first (or in the same change).
type SyncTaskSpec struct {
	// Mode is full (copy once), incremental (replay changes only) or
	// fullAndIncremental (copy, then keep replaying).
	// +kubebuilder:default=fullAndIncremental
	// +optional
	Mode config.Mode `json:"mode,omitempty"`
	// Source is the deployment data is read from.
	Source Source `json:"source"`
	// Target is the deployment data is written to.
	Target Target `json:"target"`

	// Namespaces selects and renames what is copied.
	// +optional
	Namespaces config.Namespaces `json:"namespaces,omitempty"`
	// Threads sets read and write concurrency.
	// +kubebuilder:default={}
	// +optional
	Threads config.Threads `json:"threads,omitempty"`
	// Cache bounds in-flight buffering in documents and bytes.
	// +kubebuilder:default={}
	// +optional
	Cache config.Cache `json:"cache,omitempty"`
	// FullSync tunes the full copy.
	// +kubebuilder:default={}
	// +optional
	FullSync config.FullSync `json:"fullSync,omitempty"`
	// Incremental tunes change replay.
	// +kubebuilder:default={}
	// +optional
	Incremental config.Incremental `json:"incremental,omitempty"`
	// DDL replays collection and index changes (create, drop, rename,
	// createIndexes, ...) when true.
	// +kubebuilder:default=true
	// +optional
	DDL *bool `json:"ddl,omitempty"`
	// Verify compares source and target after the copy.
	// +kubebuilder:default={}
	// +optional
	Verify config.Verify `json:"verify,omitempty"`
	// RateLimit is a ceiling on documents read from the source per second;
	// 0 means no limit.
	// +kubebuilder:validation:Minimum=0
	// +optional
	RateLimit int64 `json:"rateLimit,omitempty"`
	// Checkpoint says where progress is kept.
	// +kubebuilder:default={}
	// +optional
	Checkpoint config.Checkpoint `json:"checkpoint,omitempty"`
	// Cutover ends the sync: once requested, the workers catch up, drain
	// to the source's newest position, verify and finalize the target;
	// status.cutover and the CutoverReady and CutoverComplete conditions
	// follow it, and the task then completes.
	// +kubebuilder:default={}
	// +optional
	Cutover config.Cutover `json:"cutover,omitempty"`
	// Reverse, after a completed cut-over, creates a SyncTask that replays
	// the target's changes back to the source from the target position
	// recorded at cut-over, without a copy, so the old deployment stays a
	// way back.
	// +optional
	Reverse *Reverse `json:"reverse,omitempty"`
	// Suspend stops the workers and keeps the checkpoint.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// DeletePolicy says what deleting the SyncTask does to its checkpoints
	// in the target's checkpoint database: Retain keeps them (a task created
	// again under the same name resumes), Delete removes them.
	// +kubebuilder:default=Retain
	// +optional
	DeletePolicy DeletePolicy `json:"deletePolicy,omitempty"`

	// WorkerImage is the container image of the workers; the manager's
	// default (its own version of MongoFerry) when empty.
	// +optional
	WorkerImage string `json:"workerImage,omitempty"`

	// Resources are the compute resources of each worker container.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// WorkerTemplate adds to the worker pods what a cluster needs to
	// schedule and run them: labels and annotations, scheduling fields,
	// image pull Secrets, a service account, variables and volumes.
	// +optional
	WorkerTemplate *WorkerTemplate `json:"workerTemplate,omitempty"`

	// MetricsPort is the port on which each worker serves /metrics and
	// /status. Workers run as a non-root user, so it is 1024 or above.
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=65535
	// +kubebuilder:default=9090
	// +optional
	MetricsPort int32 `json:"metricsPort,omitempty"`
}

// Reverse asks for a reverse sync after the cut-over.
type Reverse struct {
	// Enabled creates the reverse SyncTask once the cut-over is complete.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// TaskName names the reverse SyncTask (default: this task's name
	// with the suffix -reverse).
	// +kubebuilder:validation:MaxLength=63
	// +optional
	TaskName string `json:"taskName,omitempty"`
}

// Phase is where a task, or one of its shards, is. The names are those of
// the engine's status (pkg/engine), plus Paused for a suspended task and
// Retired for a shard that left the cluster.
// +kubebuilder:validation:Enum=Pending;FullSync;Streaming;Paused;Verifying;Completed;Failed;Retired
type Phase string

// Phases.
const (
	PhasePending   Phase = "Pending"
	PhaseFullSync  Phase = "FullSync"
	PhaseStreaming Phase = "Streaming"
	PhasePaused    Phase = "Paused"
	PhaseVerifying Phase = "Verifying"
	PhaseCompleted Phase = "Completed"
	PhaseFailed    Phase = "Failed"
	// PhaseRetired is a shard's only: the shard left config.shards and its
	// worker applied its oplog to the end.
	PhaseRetired Phase = "Retired"
)

// WorkerTemplate is an overlay for the worker pods. What the operator
// sets itself (its labels, the worker container's command, probes,
// security context, the task's own variables) cannot be overridden.
//
// +kubebuilder:validation:XValidation:rule=`!has(self.metadata) || !has(self.metadata.labels) || self.metadata.labels.all(k, !k.startsWith('app.kubernetes.io/') && !k.startsWith('sync.mongoferry.io/'))`,message="labels under app.kubernetes.io/ and sync.mongoferry.io/ are the operator's: use other keys",fieldPath=".metadata.labels"
// +kubebuilder:validation:XValidation:rule=`!has(self.env) || self.env.all(e, !e.name.startsWith('MONGOFERRY_'))`,message="variables named MONGOFERRY_* are the operator's: use other names",fieldPath=".env"
type WorkerTemplate struct {
	// Metadata adds labels and annotations to the worker pods.
	// +optional
	Metadata *WorkerMetadata `json:"metadata,omitempty"`
	// NodeSelector places the workers on nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations let the workers run on tainted nodes.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Affinity constrains where the workers run. Its schema is the
	// Pod's (checked when the StatefulSet is applied; an error there shows
	// in the Degraded condition), left out of the CRD to keep it small.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// PriorityClassName is the workers' priority class.
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// ServiceAccountName runs the workers as this service account (its
	// token is still not mounted: workers never call the Kubernetes API).
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// ImagePullSecrets are the Secrets to pull the worker image with.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// Env adds variables to the worker container, for example from
	// Secrets (names starting with MONGOFERRY_ are the operator's).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Env []corev1.EnvVar `json:"env,omitempty"`
	// Volumes adds volumes to the worker pods, mounted by VolumeMounts.
	// Each is a Pod volume ({name: certs, secret: {secretName: ...}}),
	// decoded by the controller (an error is an InvalidSpec) and checked
	// again when the StatefulSet is applied; its schema is left out of the
	// CRD to keep it small.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:pruning:PreserveUnknownFields
	Volumes []runtime.RawExtension `json:"volumes,omitempty"`
	// VolumeMounts mounts Volumes into the worker container.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	VolumeMounts []corev1.VolumeMount `json:"volumeMounts,omitempty"`
}

// WorkerMetadata is the labels and annotations added to worker pods.
type WorkerMetadata struct {
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Condition types of a SyncTask. Each says exactly when it is True; the
// reasons are the controller's (controllers/status.go).
const (
	// ConditionReady is True when the target can be used as it is: the
	// task streams with a lag under 30 s (reason Streaming) or has
	// completed (Completed). Otherwise it is False, and the reason says
	// why: FullSync and Verifying while those run, Lagging when streaming
	// 30 s or more behind, WorkersStarting before the workers report,
	// Suspended, Failed, or the reason the task is blocked
	// (SecretNotFound, SecretInvalid, InvalidSpec).
	ConditionReady = "Ready"
	// ConditionProgressing is True while the task moves towards done or
	// keeps up: its workers start, copy, stream or verify (reasons
	// WorkersStarting, FullSync, Streaming, Verifying). It is False when
	// nothing runs: Suspended, Completed, Failed, or blocked.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when something needs a person, with the
	// first of these that holds as its reason: the task is blocked
	// (SecretNotFound, SecretInvalid, InvalidSpec); it failed (OplogWindowLost,
	// VerificationFailed, CutoverFailed, Failed); a worker keeps failing before it
	// reports (WorkerFailing) or restarted within the last 10 minutes
	// (WorkerRestarted); a worker reports an error it retries
	// (WorkerError); a worker's /status cannot be read
	// (StatusUnavailable); the source's shards cannot be listed
	// (ShardDiscoveryFailed); the last verification found differences
	// (VerificationFailed). Otherwise it is False with reason Healthy. Lag
	// alone does not make a task Degraded: Ready says Lagging.
	ConditionDegraded = "Degraded"
	// ConditionTargetSharding is set once the copy has prepared a sharded
	// target's collections (target.sharding). True (reason AsPlanned)
	// when every collection was sharded and pre-split as the source's, or
	// as target.shardKeys says; False (reason ShardingNotes) when some
	// part could not be done that way, with each note in the message:
	// zones no target shard belongs to, no chunk boundaries to pre-split
	// at (left to the target's balancer), a collection kept as the target
	// already shards it. Absent for an unsharded target. It does not make
	// the task Degraded: the data is copied either way.
	ConditionTargetSharding = "TargetSharding"
	// ConditionCutoverReady is set once a cut-over is requested. True
	// (reason CaughtUp) while the lag is at most cutover.maxLagSeconds and
	// the cut-over can proceed, or once it has passed that step; False
	// (reason Lagging, or the step that failed) otherwise.
	ConditionCutoverReady = "CutoverReady"
	// ConditionCutoverComplete is True (reason CutoverComplete) once the
	// target was drained to the source's newest position, verified and
	// finalized; False while the cut-over runs (the reason names the step)
	// or after it failed (reason CutoverFailed, with the message).
	ConditionCutoverComplete = "CutoverComplete"
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
	// copy runs; once set, 0 (caught up) is kept rather than omitted.
	// +kubebuilder:validation:Minimum=0
	// +optional
	LagSeconds int64 `json:"lagSeconds"`
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
	// (caught up) is kept rather than omitted, so the Lag column shows 0,
	// not <none>.
	// +kubebuilder:validation:Minimum=0
	// +optional
	LagSeconds int64 `json:"lagSeconds"`
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

// RetryAnnotation is the annotation that, set to a new value on a Failed
// SyncTask, runs it again from its checkpoint (the workers are stopped
// after a failure).
const RetryAnnotation = "sync.mongoferry.io/retry"

// VerifyAnnotation is the annotation that, set to a new value, asks the
// workers for one verification pass while they stream; the report goes to
// status.streamingVerification.
const VerifyAnnotation = "sync.mongoferry.io/verify"

// SyncTask copies a MongoDB deployment (replica set or sharded cluster) to
// another and keeps it in sync.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=st,categories=mongoferry
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress.percent`
// +kubebuilder:printcolumn:name="Shards",type=string,JSONPath=`.status.shardSummary`,description="Shards whose workers stream"
// +kubebuilder:printcolumn:name="Lag",type=integer,JSONPath=`.status.lagSeconds`,description="Seconds the target is behind the source"
// +kubebuilder:printcolumn:name="Ops/s",type=integer,JSONPath=`.status.opsPerSecond`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
type SyncTask struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what to copy, from where to where, and how.
	Spec SyncTaskSpec `json:"spec"`
	// Status is what the operator and the workers report.
	// +optional
	Status SyncTaskStatus `json:"status,omitempty"`
}

// SyncTaskList is a list of SyncTasks.
//
// +kubebuilder:object:root=true
type SyncTaskList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the SyncTasks.
	Items []SyncTask `json:"items"`
}
