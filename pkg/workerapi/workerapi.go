// Package workerapi is the contract between a MongoFerry worker (`ferry
// run --listen`, one pod of a SyncTask's StatefulSet) and the operator's
// controller: the /status document the worker serves, its HTTP API
// (Handler, server.go: /status, /healthz and POST /verify, beside the
// /metrics handler it is given), its phases, the worker's exit codes, and
// the environment the controller gives the worker. It imports nothing
// from MongoDB, so the controller reads workers without linking the
// engine.
//
// The engine's own status (pkg/engine.Status) is a superset of Status:
// the worker serves the engine's, and a round-trip test in pkg/engine pins
// that it decodes into this one. Fields are added, never renamed; a
// change that breaks a reader bumps ContractVersion.
package workerapi

import (
	"strings"
	"time"
)

// ContractVersion is the version of the /status document: the worker
// serves it in Status.Contract.
const ContractVersion = 1

// Phase is where a worker's task is.
type Phase string

// Phases of a worker's task.
const (
	PhasePending   Phase = "Pending"
	PhaseFullSync  Phase = "FullSync"
	PhaseStreaming Phase = "Streaming"
	PhaseVerifying Phase = "Verifying"
	PhaseCompleted Phase = "Completed"
	PhaseFailed    Phase = "Failed"
)

// SubtaskPhase is where one shard's replay subtask is.
type SubtaskPhase string

// Phases of a shard subtask.
const (
	SubtaskPending   SubtaskPhase = "Pending"
	SubtaskStreaming SubtaskPhase = "Streaming"
	SubtaskRetiring  SubtaskPhase = "Retiring"
	SubtaskRetired   SubtaskPhase = "Retired"
	SubtaskFailed    SubtaskPhase = "Failed"
)

// Exit codes of `ferry run`.
const (
	// ExitDone: the task completed (mode full: copied and verified).
	ExitDone = 0
	// ExitFailed: an error (the message says which); restarting may help.
	ExitFailed = 1
	// ExitVerificationFailed: verification found differences (a cut-over's
	// verification exits ExitCutoverFailed).
	ExitVerificationFailed = 2
	// ExitOplogWindowLost: the checkpoint is older than the source's
	// oldest oplog entry; only a new full copy helps.
	ExitOplogWindowLost = 3
	// ExitCutoverFailed: a cut-over step failed (its verification
	// included), or the task cannot cut
	// over (the message says which step and what to do); restarting
	// fails again until the request or the deployment changes.
	ExitCutoverFailed = 4
	// ExitInterrupted: stopped by a signal (SIGINT or SIGTERM).
	ExitInterrupted = 130
)

// Environment the controller gives a worker.
const (
	// EnvTask is the path of the task file.
	EnvTask = "MONGOFERRY_TASK"
	// EnvSourcePassword and EnvTargetPassword hold the passwords from the
	// credentials Secrets.
	EnvSourcePassword = "MONGOFERRY_SOURCE_PASSWORD" //nolint:gosec // G101: a variable name, not a password
	EnvTargetPassword = "MONGOFERRY_TARGET_PASSWORD" //nolint:gosec // G101: a variable name, not a password
	// EnvShard names the one shard a worker replays (empty: every shard).
	EnvShard = "MONGOFERRY_SHARD"
	// EnvShardMap maps pod ordinals to shard names ("0=shard0,1=shard1").
	EnvShardMap = "MONGOFERRY_SHARD_MAP"
	// EnvPodName is the worker pod's name (its ordinal is the suffix).
	EnvPodName = "MONGOFERRY_POD_NAME"
)

// Flags of `ferry run` the controller sets on a worker whose source may
// be sharded, and on copy-only workers.
const (
	// FlagDiscoverInterval makes the worker discover the source's
	// topology at start and then at this interval, and report it in
	// Status.Topology.
	FlagDiscoverInterval = "--discover-interval"
	// FlagAwaitShardMap makes a worker without a shard mapping wait for
	// one when the source is sharded, instead of running every shard.
	FlagAwaitShardMap = "--await-shard-map"
	// FlagCopyOnly makes a worker a copy-only worker of a replica-set
	// source's full copy (fullSync.workers above 1): it copies ranges of
	// the task's plan until the task's worker records the copy done.
	FlagCopyOnly = "--copy-only"
)

// Status is the /status document of a worker.
type Status struct {
	// Contract is ContractVersion (0 from workers older than it).
	Contract int    `json:"contract,omitempty"`
	Task     string `json:"task"`
	Mode     string `json:"mode"`
	Phase    Phase  `json:"phase"`
	// Error is the error the task stopped on, if any.
	Error string `json:"error,omitempty"`
	Copy  Copy   `json:"copy"`
	// Replay is the replay's state (for a sharded source, the shards'
	// aggregated); nil before replay starts.
	Replay *Replay `json:"replay,omitempty"`
	// Shards are a sharded source's subtasks (the worker's one, or every
	// one when a single process runs them all).
	Shards    []Shard   `json:"shards,omitempty"`
	Verify    *Verify   `json:"verify,omitempty"`
	StartedAt time.Time `json:"startedAt"`
	// StreamingVerify is the streaming verifier's last (or current) pass,
	// once one ran (verify.continuous, or POST /verify on the worker).
	StreamingVerify *StreamingVerify `json:"streamingVerify,omitempty"`
	// TargetSharding is how the copy sharded a sharded target's
	// collections, one entry per collection it created.
	TargetSharding []TargetSharding `json:"targetSharding,omitempty"`
	// Cutover is how far a requested cut-over is; nil before one is
	// requested.
	Cutover *Cutover `json:"cutover,omitempty"`
	// Topology is the source's topology as the worker last discovered it
	// (workers run with --discover-interval); nil from workers that do
	// not discover. The controller sizes a sharded task's workers from
	// it.
	Topology *Topology `json:"topology,omitempty"`
}

// Steps of a cut-over, in order.
const (
	CutoverCatchingUp     = "CatchingUp"
	CutoverBlockingWrites = "BlockingWrites"
	CutoverDraining       = "Draining"
	CutoverVerifying      = "Verifying"
	CutoverFinalizing     = "Finalizing"
	CutoverComplete       = "Complete"
	CutoverFailed         = "Failed"
)

// CutoverSteps are the steps a cut-over passes through, in order; a failed
// one ends at CutoverFailed instead.
var CutoverSteps = []string{CutoverCatchingUp, CutoverBlockingWrites, CutoverDraining, CutoverVerifying, CutoverFinalizing, CutoverComplete}

// Cutover is a cut-over's progress as a worker reports it.
type Cutover struct {
	Step          string `json:"step"`
	CaughtUp      bool   `json:"caughtUp,omitempty"`
	WritesBlocked bool   `json:"writesBlocked,omitempty"`
	// SourcePosition is the source position drained to; TargetPosition
	// the target's newest position once finalized (a reverse sync's
	// start).
	SourcePosition *Timestamp `json:"sourcePosition,omitempty"`
	TargetPosition *Timestamp `json:"targetPosition,omitempty"`
	// Verify is the verification run at cut-over.
	Verify     *Verify    `json:"verify,omitempty"`
	StartedAt  time.Time  `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	Message    string     `json:"message,omitempty"`
}

// Topology is what a worker found the source to be: hello on source.uri,
// then config.shards through the mongos (with the source.shards[]
// overrides) when it is one or source.kind is sharded.
type Topology struct {
	// Sharded: the source is read shard by shard.
	Sharded bool `json:"sharded"`
	// Shards are the shards' names in config.shards, sorted; empty unless
	// Sharded.
	Shards []string `json:"shards,omitempty"`
	// DiscoveredAt is when Sharded and Shards were last read.
	DiscoveredAt time.Time `json:"discoveredAt"`
	// AttemptedAt is when the worker last tried; Error says why that try
	// failed (Sharded and Shards are then the last known ones), empty
	// when it succeeded.
	AttemptedAt time.Time `json:"attemptedAt"`
	Error       string    `json:"error,omitempty"`
	// AwaitingShardMap: the source is sharded and the worker has no shard
	// mapping yet (`ferry run --await-shard-map`): it copies and replays
	// nothing, and waits for the operator to give it its shard.
	AwaitingShardMap bool `json:"awaitingShardMap,omitempty"`
}

// TargetSharding is how the copy sharded one target collection before
// writing to it.
type TargetSharding struct {
	Namespace string `json:"namespace"`
	// Key is the shard key ({region: 1, userId: 1}); empty when the
	// collection is not sharded on the target.
	Key string `json:"key,omitempty"`
	// Placement is how its chunks reached the shards: unsharded, kept,
	// moveRange, hashedInitialChunks, zones or balancer.
	Placement string `json:"placement"`
	// Chunks is the chunk count the pre-split left (0: the server's
	// choice); Commands the commands run.
	Chunks   int `json:"chunks,omitempty"`
	Commands int `json:"commands"`
	// Notes say what was not done as the source has it, and why: zones
	// no target shard belongs to, no chunk boundaries to pre-split at,
	// a collection kept as the target shards it.
	Notes []string `json:"notes,omitempty"`
}

// ShardingNotes returns the notes of every target collection, each
// prefixed with its namespace unless it names it already.
func (s *Status) ShardingNotes() []string {
	var out []string
	for _, ts := range s.TargetSharding {
		for _, n := range ts.Notes {
			if !strings.Contains(n, ts.Namespace) {
				n = ts.Namespace + ": " + n
			}
			out = append(out, n)
		}
	}
	return out
}

// Copy is the full copy's progress.
type Copy struct {
	Stage              string      `json:"stage"`
	EstimatedDocuments int64       `json:"estimatedDocuments"`
	Documents          int64       `json:"documents"`
	Bytes              int64       `json:"bytes"`
	Percent            float64     `json:"percent"`
	DocsPerSecond      float64     `json:"docsPerSecond"`
	BytesPerSecond     float64     `json:"bytesPerSecond"`
	Ranges             int         `json:"ranges"`
	RangesDone         int         `json:"rangesDone"`
	Namespaces         []Namespace `json:"namespaces"`
}

// Namespace is one collection's copy progress.
type Namespace struct {
	NS                 string  `json:"ns"`
	Target             string  `json:"target"`
	EstimatedDocuments int64   `json:"estimatedDocuments"`
	Documents          int64   `json:"documents"`
	Percent            float64 `json:"percent"`
	Done               bool    `json:"done"`
}

// Timestamp is an oplog position.
type Timestamp struct {
	T uint32 `json:"T"`
	I uint32 `json:"I"`
}

// IsZero reports whether ts is the zero position.
func (ts Timestamp) IsZero() bool { return ts.T == 0 && ts.I == 0 }

// Replay is the replay's state.
type Replay struct {
	// AppliedTS is the saved checkpoint, AppliedTime its source time.
	AppliedTS   Timestamp `json:"appliedTS"`
	AppliedTime time.Time `json:"appliedTime"`
	// LagSeconds is how far AppliedTS is behind the source's newest
	// position; absent from the document (0 here) while LagUnknown is set.
	LagSeconds float64 `json:"lagSeconds"`
	// LagUnknown says why the lag cannot be known yet (the source's newest
	// position not read since the worker started, or a shard's not);
	// empty once it is known, and from workers older than it.
	LagUnknown   string  `json:"lagUnknown,omitempty"`
	OpsPerSecond float64 `json:"opsPerSecond"`
	Shard        string  `json:"shard,omitempty"`
	Holds        Holds   `json:"holds"`
}

// LagKnown reports whether LagSeconds says how far the target is behind.
func (r *Replay) LagKnown() bool { return r.LagUnknown == "" }

// Holds counts writes held after chunk migrations.
type Holds struct {
	HeldWrites int64 `json:"heldWrites"`
	HeldNow    int   `json:"heldNow"`
}

// Shard is one shard subtask.
type Shard struct {
	Shard  string       `json:"shard"`
	Phase  SubtaskPhase `json:"phase"`
	Replay *Replay      `json:"replay,omitempty"`
	Error  string       `json:"error,omitempty"`
	// Cutover is the shard's part in a running cut-over; nil before one.
	Cutover *ShardCutover `json:"cutover,omitempty"`
}

// ShardCutover is one shard's part in a sharded source's cut-over: its
// subtask caught up (lag at most maxLagSeconds), the shard's position it
// drains to (read once the cut-over reached Draining), and whether it got
// there and stopped replaying.
type ShardCutover struct {
	CaughtUp      bool       `json:"caughtUp,omitempty"`
	DrainPosition *Timestamp `json:"drainPosition,omitempty"`
	Drained       bool       `json:"drained,omitempty"`
}

// Verify is the verification's state.
type Verify struct {
	Mode      string   `json:"mode"`
	Running   bool     `json:"running"`
	CurrentNS string   `json:"currentNamespace,omitempty"`
	Done      int64    `json:"done,omitempty"`
	Total     int64    `json:"total,omitempty"`
	OK        bool     `json:"ok"`
	Differing []string `json:"differing,omitempty"`
}

// StreamingVerify is a streaming verification pass: documents compared
// by _id while the source keeps changing, mismatches compared again once
// replay has passed the source's position from when they were seen, and
// only those that persist reported.
type StreamingVerify struct {
	// Running is true while a pass runs; Passes counts finished ones.
	Running    bool      `json:"running"`
	Passes     int64     `json:"passes"`
	StartedAt  time.Time `json:"startedAt,omitzero"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Namespaces is the collections compared, NamespacesDone those read
	// through, CurrentNamespace the one being read.
	Namespaces       int    `json:"namespaces"`
	NamespacesDone   int    `json:"namespacesDone"`
	CurrentNamespace string `json:"currentNamespace,omitempty"`
	// Compared counts documents compared, Rechecked the rechecks made,
	// Mismatches the mismatches first seen, Resolved those a recheck found
	// equal (changes in flight).
	Compared   int64 `json:"documentsCompared"`
	Rechecked  int64 `json:"rechecked"`
	Mismatches int64 `json:"mismatches"`
	Resolved   int64 `json:"resolved"`
	// PendingRechecks and PendingBytes are the mismatches waiting for
	// replay, within MaxPendingBytes; PendingFull is set once the budget
	// ran out, and NotRechecked counts the mismatches refused then.
	PendingRechecks int   `json:"pendingRechecks"`
	PendingBytes    int64 `json:"pendingBytes"`
	MaxPendingBytes int64 `json:"maxPendingBytes"`
	PendingFull     bool  `json:"pendingFull,omitempty"`
	NotRechecked    int64 `json:"notRechecked,omitempty"`
	// Unsettled counts mismatches replay had not passed when the pass
	// ended.
	Unsettled int64 `json:"unsettled,omitempty"`
	// Persisting counts mismatches that survived every recheck; Findings
	// lists the first of them.
	Persisting int64           `json:"persisting"`
	Findings   []VerifyFinding `json:"findings,omitempty"`
	// OK is true after a pass that found nothing persisting and left
	// nothing unchecked.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// VerifyFinding is one document that differs between source and target.
type VerifyFinding struct {
	// Namespace is the source namespace (db.collection).
	Namespace string `json:"namespace"`
	// ID is the document's _id as canonical extended JSON.
	ID string `json:"id"`
	// Kind is missing (on the source only), extra (on the target only) or
	// changed.
	Kind string `json:"kind"`
}

// HeldWrites is the writes the worker's subtasks held after chunk
// migrations: its shards' when it lists any, else its replay's.
func (s *Status) HeldWrites() int64 {
	if len(s.Shards) == 0 {
		if s.Replay != nil {
			return s.Replay.Holds.HeldWrites
		}
		return 0
	}
	var n int64
	for _, sh := range s.Shards {
		if sh.Replay != nil {
			n += sh.Replay.Holds.HeldWrites
		}
	}
	return n
}
