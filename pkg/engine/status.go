package engine

import (
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine/fullsync"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/shardedsource"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// Status is a value snapshot of a task, served as /status and read by the
// metrics collector and the progress display.
type Status struct {
	// Contract is workerapi.ContractVersion: Status is a superset of the
	// worker contract's /status document (workerapi.Status).
	Contract int    `json:"contract"`
	Task     string `json:"task"`
	Mode     string `json:"mode"`
	Phase    Phase  `json:"phase"`
	// Error is the failure that stopped the task, without credentials.
	Error string          `json:"error,omitempty"`
	Copy  fullsync.Status `json:"copy"`
	// TargetSharding is how the copy sharded a sharded target's
	// collections.
	TargetSharding []TargetShardingStatus `json:"targetSharding,omitempty"`
	// Cutover is how far a requested cut-over is; nil before one is
	// requested.
	Cutover *workerapi.Cutover `json:"cutover,omitempty"`
	// Replay is set once oplog replay has started.
	Replay *replay.Status `json:"replay,omitempty"`
	// Source is what the oplog reader asked of the source, once replay
	// reads a replica set's oplog.
	Source *SourceStatus `json:"source,omitempty"`
	// Shards has one entry per shard subtask of a sharded source read
	// shard by shard; Replay then sums them (its applied position is the
	// task's checkpoint, the minimum over the shards).
	Shards []ShardStatus `json:"shards,omitempty"`
	// OplogWindows say, per source oplog, how much of it lies behind the
	// checkpoint (read every few seconds while the task can replay).
	OplogWindows []OplogWindow `json:"oplogWindows,omitempty"`
	// Verify is the last verification's outcome, when one ran.
	Verify *VerifyStatus `json:"verify,omitempty"`
	// StreamingVerify is the streaming verifier's last (or current) pass,
	// once one ran: progress, pending rechecks and persisting mismatches.
	StreamingVerify *verify.StreamStatus `json:"streamingVerify,omitempty"`
	StartedAt       time.Time            `json:"startedAt"`
	ElapsedSeconds  float64              `json:"elapsedSeconds"`
	// StartupSeconds is how long the run took to get going: from its start
	// to its first copied document, or to the start of replay when it
	// copies nothing (connecting, the pre-copy checks, recording the
	// replay start position, creating collections and planning ranges).
	// Until then it is the time so far, with Starting set.
	StartupSeconds float64 `json:"startupSeconds"`
	Starting       bool    `json:"starting,omitempty"`
	// Topology is the source's topology as the process running the
	// engine last discovered it (`ferry run --discover-interval` sets it;
	// the engine leaves it nil).
	Topology *TopologyStatus `json:"topology,omitempty"`
}

// TopologyStatus is the source's topology as a worker discovered it.
type TopologyStatus = workerapi.Topology

// SourceStatus counts the oplog reader's queries on the source.
type SourceStatus struct {
	source.TailerStats
	// OplogQueries is every query on the oplog: Reopens + NewestReads.
	OplogQueries int64 `json:"oplogQueries"`
}

// VerifyStatus summarises a verification.
type VerifyStatus struct {
	Mode string `json:"mode"`
	// Running is true while verification is in progress.
	Running bool `json:"running"`
	// CurrentNS, Done and Total show progress through the namespace being
	// compared.
	CurrentNS string `json:"currentNamespace,omitempty"`
	Done      int64  `json:"done,omitempty"`
	Total     int64  `json:"total,omitempty"`
	OK        bool   `json:"ok"`
	// Differing lists namespaces whose target differs from the source.
	Differing []string `json:"differing,omitempty"`
}

// Status returns a snapshot; it is cheap and safe to call at any time.
func (e *Engine) Status() Status {
	copyStatus := e.copier.Status()
	replayStatus := e.streaming.ReplayStatus()
	targetSharding := e.targetSharding.status()
	var src *SourceStatus
	if t := e.streaming.OplogTailer(); t != nil {
		ts := t.Stats()
		src = &SourceStatus{TailerStats: ts, OplogQueries: ts.Reopens + ts.NewestReads}
	}
	shards := e.ShardStatuses()
	if shards != nil {
		replayStatus = shardedsource.AggregateReplay(shards)
	}
	streaming := e.StreamVerifyStatus()
	streamAt := e.streaming.StreamAt()
	s := Status{Contract: workerapi.ContractVersion, Task: e.task.Name, Mode: string(e.task.Mode), Copy: copyStatus, Replay: replayStatus, Source: src, Shards: shards, TargetSharding: targetSharding, StreamingVerify: streaming}
	var verifyRes *verify.Report
	var verifyProg verifyProgress
	verifyMode := string(e.task.Verify.Mode)
	e.state.report(&s, copyStatus, streamAt, func() {
		// Read with the run's state locked: a report is kept before the
		// phase moves on.
		verifyRes, verifyProg = e.verification.last()
		s.Cutover = e.cut.status(verifyProg)
		if e.cut.running() {
			verifyMode = string(e.task.Cutover.Verify)
		}
	})
	switch {
	case verifyRes != nil:
		v := &VerifyStatus{Mode: verifyMode, OK: verifyRes.OK()}
		for _, n := range verifyRes.Namespaces {
			if !n.OK {
				v.Differing = append(v.Differing, n.Source.String())
			}
		}
		s.Verify = v
	case s.Phase == PhaseVerifying:
		s.Verify = &VerifyStatus{Mode: verifyMode, Running: true,
			CurrentNS: verifyProg.NS, Done: verifyProg.Done, Total: verifyProg.Total}
	}
	return s
}

// ShardStatuses returns a snapshot of every shard subtask, by shard name;
// nil for a source that is not read shard by shard.
func (e *Engine) ShardStatuses() []ShardStatus {
	return e.streaming.ShardStatuses()
}

// ShardStatus is one shard subtask's snapshot (shardedsource.ShardStatus).
type ShardStatus = shardedsource.ShardStatus

// Subtask phases, shown per shard in Status.Shards (package
// shardedsource).
const (
	SubtaskPending   = shardedsource.SubtaskPending
	SubtaskStreaming = shardedsource.SubtaskStreaming
	SubtaskRetiring  = shardedsource.SubtaskRetiring
	SubtaskRetired   = shardedsource.SubtaskRetired
	SubtaskFailed    = shardedsource.SubtaskFailed
)

// ErrUnknownShard means Options.Shard names no shard of the source.
var ErrUnknownShard = shardedsource.ErrUnknownShard
