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

	// Namespaces selects, filters and renames what is copied.
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
	// RateLimit is a ceiling on documents read from the source per second
	// during the copy; 0 means no limit. It holds for the whole task:
	// workers that copy at once (fullSync.workers, one worker per shard of
	// a sharded source) each take an equal share.
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
// reasons are in reasons.go.
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
// +kubebuilder:printcolumn:name="Lag",type=string,JSONPath=`.status.lag`,description="How far the target is behind the source (unknown until a worker has read the source's newest position)"
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
