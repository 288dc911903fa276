package shardedsource

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/topology"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// Subtask phases, shown per shard in Status.Shards.
const (
	// SubtaskPending waits for the full copy (or, in a worker running one
	// shard, for the worker that runs the copy).
	SubtaskPending = string(workerapi.SubtaskPending)
	// SubtaskStreaming tails the shard's oplog and applies its writes.
	SubtaskStreaming = string(workerapi.SubtaskStreaming)
	// SubtaskRetiring reads a removed shard's oplog to its end.
	SubtaskRetiring = string(workerapi.SubtaskRetiring)
	// SubtaskRetired is done: the shard left the cluster and everything it
	// logged is applied.
	SubtaskRetired = string(workerapi.SubtaskRetired)
	// SubtaskFailed stopped with an error (the task fails with it).
	SubtaskFailed = string(workerapi.SubtaskFailed)
)

// subtask replays one shard's oplog.
type subtask struct {
	shard    topology.Shard
	client   *mongo.Client
	replayer atomic.Pointer[replay.Replayer]
	cancel   context.CancelFunc
	done     chan struct{}
	retiring atomic.Bool // the shard left config.shards

	mu    sync.Mutex
	phase string
	err   error
	since time.Time
	// co is the shard's part in the running cut-over (cutover_sharded.go).
	co *checkpoint.ShardCutover
}

func (st *subtask) setPhase(p string, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.phase, st.since = p, time.Now()
	if err != nil {
		st.err = err
	}
}

// ShardStatus is one shard subtask's snapshot.
type ShardStatus struct {
	// Shard is the shard's name in config.shards.
	Shard string `json:"shard"`
	// Phase is Pending, Streaming, Retiring, Retired or Failed.
	Phase string `json:"phase"`
	// Address is the shard's URI (without credentials).
	Address string `json:"address,omitempty"`
	// Replay is the subtask's replay snapshot once it runs: applied
	// position, lag, ops/s, skipped entries (fromMigrate among them).
	Replay *replay.Status `json:"replay,omitempty"`
	// Error is why the subtask failed, without credentials.
	Error string `json:"error,omitempty"`
	// Cutover is the shard's part in a running cut-over.
	Cutover *workerapi.ShardCutover `json:"cutover,omitempty"`
}

func (st *subtask) status() ShardStatus {
	st.mu.Lock()
	s := ShardStatus{Shard: st.shard.Name, Phase: st.phase}
	if st.err != nil {
		s.Error = st.err.Error()
	}
	if c := st.co; c != nil {
		s.Cutover = &workerapi.ShardCutover{CaughtUp: c.CaughtUp, Drained: c.Drained}
		if !c.DrainTS.IsZero() {
			s.Cutover.DrainPosition = &workerapi.Timestamp{T: c.DrainTS.T, I: c.DrainTS.I}
		}
	}
	st.mu.Unlock()
	if r := st.replayer.Load(); r != nil {
		rs := r.Status()
		s.Replay = &rs
	}
	return s
}

// AggregateReplay sums the subtasks' replay into one task-level snapshot:
// the applied position is the minimum over the shards still streaming (the
// task's checkpoint), the lag the largest, rates and counts the sums.
func AggregateReplay(shards []ShardStatus) *replay.Status {
	var out *replay.Status
	var retired []*replay.Status
	for _, s := range shards {
		r := s.Replay
		if r == nil {
			continue
		}
		if s.Phase == SubtaskRetired {
			// Its counts stay in the sums (counters never go down); its
			// positions hold nobody back.
			if out != nil {
				addCounts(out, r)
			} else {
				retired = append(retired, r)
			}
			continue
		}
		if out == nil {
			c := *r
			c.Applied, c.Skipped = map[string]int64{}, map[string]int64{}
			c.WriteCommands, c.WritesSent = map[string]int64{}, map[string]int64{}
			c.OpsPerSecond, c.BufferedBytes, c.InFlight, c.ToleratedConflicts = 0, 0, 0, 0
			if !c.LagKnown() {
				c.LagUnknown = shardLagUnknown(s.Shard, c.LagUnknown)
			}
			out = &c
		} else {
			if r.AppliedTS.Compare(out.AppliedTS) < 0 {
				out.AppliedTS, out.AppliedTime = r.AppliedTS, r.AppliedTime
			}
			if r.ReadTS.Compare(out.ReadTS) < 0 {
				out.ReadTS = r.ReadTS
			}
			if r.NewestTS.Compare(out.NewestTS) > 0 {
				out.NewestTS = r.NewestTS
			}
			out.NewestKnown = out.NewestKnown && r.NewestKnown
			out.LagSeconds = max(out.LagSeconds, r.LagSeconds)
			if !r.LagKnown() && out.LagKnown() {
				out.LagUnknown = shardLagUnknown(s.Shard, r.LagUnknown)
			}
			if r.CheckpointAt.After(out.CheckpointAt) {
				out.CheckpointAt = r.CheckpointAt
			}
		}
		addCounts(out, r)
		out.OpsPerSecond += r.OpsPerSecond
		out.BufferedBytes += r.BufferedBytes
		out.InFlight += r.InFlight
	}
	if out != nil {
		for _, r := range retired {
			addCounts(out, r)
		}
		out.WritesPerCommand = replay.WritesPerCommand(out.WriteCommands, out.WritesSent)
	}
	return out
}

func addCounts(out, r *replay.Status) {
	for k, v := range r.Applied {
		out.Applied[k] += v
	}
	for k, v := range r.Skipped {
		out.Skipped[k] += v
	}
	out.ToleratedConflicts += r.ToleratedConflicts
	for k, v := range r.WriteCommands {
		out.WriteCommands[k] += v
	}
	for k, v := range r.WritesSent {
		out.WritesSent[k] += v
	}
}

// shardLagUnknown is why a sharded task's lag is unknown: one of its
// shards' is, for this reason. Its lag is the largest over the shards, so
// one unknown shard makes it unknown.
func shardLagUnknown(shard, why string) string {
	return "shard " + shard + ": " + why
}
