package v1alpha1

// Condition reasons, in addition to the phases and the blocked reasons.
const (
	ReasonSuspended          = "Suspended"
	ReasonCompleted          = "Completed"
	ReasonStreaming          = "Streaming"
	ReasonLagging            = "Lagging"
	ReasonLagUnknown         = "LagUnknown"
	ReasonWorkersStarting    = "WorkersStarting"
	ReasonFailed             = "Failed"
	ReasonHealthy            = "Healthy"
	ReasonOplogWindowLost    = "OplogWindowLost"
	ReasonVerificationFailed = "VerificationFailed"
	ReasonWorkerFailing      = "WorkerFailing"
	ReasonWorkerRestarted    = "WorkerRestarted"
	ReasonWorkerError        = "WorkerError"
	ReasonStatusUnavailable  = "StatusUnavailable"
	ReasonAsPlanned          = "AsPlanned"
	ReasonShardingNotes      = "ShardingNotes"
)

// Reasons of the cut-over conditions (the others are the step names).
const (
	ReasonCaughtUp        = "CaughtUp"
	ReasonCutoverComplete = "CutoverComplete"
	ReasonCutoverFailed   = "CutoverFailed"
)

// Reasons for a task the controller cannot start.
const (
	ReasonSecretNotFound = "SecretNotFound"
	ReasonSecretInvalid  = "SecretInvalid"
	ReasonInvalidSpec    = "InvalidSpec"
)

// Reasons of shard events and conditions.
const (
	ReasonShardsDiscovered     = "ShardsDiscovered"
	ReasonShardAdded           = "ShardAdded"
	ReasonShardRemoved         = "ShardRemoved"
	ReasonShardDiscoveryFailed = "ShardDiscoveryFailed"
)
