package engine

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/shardedsource"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// streamer is how a run reads the source's changes: one oplog for a
// replica set (replicaSetStreamer), one subtask per shard for a sharded
// source (shardedsource.Source, as shardedStreamer). The engine's phases, the
// cut-over and /status go through it; pickStreamer is the one place that
// asks which kind of source this is.
type streamer interface {
	// Follows reports whether this process follows a run another one
	// leads: a worker of one shard that does not run the copy
	// (shardedsource.Source.RunShardWorker).
	Follows() bool
	// Partial reports whether this process replays only part of the
	// source (one shard's worker): the task-wide verification, the
	// restore of the options the sync deferred and streaming verification are
	// left to the run that sees every shard (the cut-over, ferry verify).
	Partial() bool
	// CheckOplogs fails with source.ErrNoOplog when an oplog this
	// process replays keeps none; what names the task's mode.
	CheckOplogs(ctx context.Context, what string) error
	// CheckWindow stops a resumed task whose oplog no longer holds the
	// position replay goes on from.
	CheckWindow(ctx context.Context, prev checkpoint.TaskRecord) error
	// CheckGivenStart checks incremental.startAt, ts, against each
	// oplog's window and returns the start of each shard.
	CheckGivenStart(ctx context.Context, ts bson.Timestamp, useOplog bool) (map[string]bson.Timestamp, error)
	// NewestStart is a first run's start position without startAt: the
	// source's newest position, or every shard's.
	NewestStart(ctx context.Context, useOplog bool) (ts bson.Timestamp, empty bool, shards map[string]bson.Timestamp, err error)
	// RecordStarts records each shard's start position and returns the
	// task's (ts for a replica set).
	RecordStarts(ctx context.Context, ts bson.Timestamp, shards map[string]bson.Timestamp) (bson.Timestamp, error)
	// CopyEnd is the source's position once the copy ended (each shard's
	// recorded for a sharded source).
	CopyEnd(ctx context.Context, useOplog bool) (bson.Timestamp, error)
	// Stream replays until ctx ends, or, with UntilCaughtUp or a
	// cut-over, until everything the source wrote is applied.
	Stream(ctx context.Context) error
	// OplogSides lists the oplogs this process replays with their
	// checkpoints, for the oplog window's watch.
	OplogSides(ctx context.Context) ([]source.OplogSide, error)
	// ShardStatuses is every shard subtask's snapshot this process runs;
	// nil for a replica set.
	ShardStatuses() []ShardStatus
	// CheckDrained fails unless replay saved its checkpoint at or past
	// the cut-over's drain position (every shard's).
	CheckDrained(ctx context.Context, c checkpoint.CutoverRecord) error
	// NewestAfterDrain finds an oplog whose newest entry is past its
	// drain position: where ("" or " of shard s"), the drain position
	// and the newest entry; ok false when none is (or none can be read).
	NewestAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) (where string, drained, newest bson.Timestamp, ok bool)
	// ReplayStatus is a snapshot of the replay this run started, nil
	// before it starts and for a sharded source (whose ShardStatuses
	// Status sums).
	ReplayStatus() *replay.Status
	// OplogTailer is the oplog tailer replay reads, nil while none does
	// (always for a sharded source, whose subtasks read their shards).
	OplogTailer() *source.Tailer
	// StreamAt is when replay started in this run, zero before it starts
	// and for a sharded source.
	StreamAt() time.Time
}

// pickStreamer picks how this run reads the source, once Open found
// which kind it is (openShards).
func (e *Engine) pickStreamer() streamer {
	if e.shards != nil {
		return shardedStreamer{e.shards}
	}
	return &replicaSetStreamer{task: e.task, shard: e.opts.Shard, log: e.log, baseLog: e.baseLog(),
		endpoints: e.endpoints, cut: e.cut.machine, finish: e.finish, newReplayer: newReplayer,
		reader: e.opts.Reader, checkpointInterval: e.opts.CheckpointInterval, observeReplay: e.opts.ObserveReplay,
		whileStreaming: func(ctx context.Context) { e.verification.whileStreaming(ctx) },
		shardKeys:      func() replay.ShardKeys { return e.targetSharding.replayShardKeys() }}
}

// shardedStreamer is a sharded source as the engine's streamer: its
// subtasks replay, each reading its shard's oplog (ShardStatuses).
type shardedStreamer struct{ *shardedsource.Source }

func (shardedStreamer) ReplayStatus() *replay.Status { return nil }

func (shardedStreamer) OplogTailer() *source.Tailer { return nil }

func (shardedStreamer) StreamAt() time.Time { return time.Time{} }

// openShards finds whether the source is read shard by shard and, if so,
// connects to its shards (shardedsource.Source.Open): e.shards
// supervises them, given the engine's parts and what it needs of the run
// as functions.
func (e *Engine) openShards(ctx context.Context) error {
	e.shards = shardedsource.New(shardedsource.Config{
		Task: e.task, Log: e.log, BaseLog: e.baseLog(), Source: e.source, Target: e.target,
		SourceProfile: e.srcProfile, TargetProfile: e.dstProfile, Store: e.store, Mapper: e.mapper, Cutover: e.cut.machine,
		Options: shardedsource.Options{Shard: e.opts.Shard, ShardReader: e.opts.ShardReader, TopologyInterval: e.opts.TopologyInterval,
			CheckpointInterval: e.opts.CheckpointInterval, ObserveReplay: e.opts.ObserveReplay, ObserveWrite: e.opts.ObserveWrite},
		Run: shardedsource.Run{
			UntilCaughtUp:  e.finish.untilCaughtUp,
			SetPhase:       e.state.setPhase,
			TakeLease:      e.lease.take,
			WhileStreaming: func(ctx context.Context) { e.verification.whileStreaming(ctx) },
			ReplayParams: func(ctx context.Context) (map[string]bool, []catalog.Namespace, error) {
				return replayParams(ctx, e.source, e.mapper)
			},
			ShardKeys: func() replay.ShardKeys { return e.targetSharding.replayShardKeys() },
			HelpCopy:  func(ctx context.Context) (int, error) { return e.copier.HelpCopy(ctx) },
			Copied:    func(ns, target string, docs, bytes int64) { e.copier.Copied(ns, target, docs, bytes) },
		},
	})
	sharded, err := e.shards.Open(ctx)
	if err != nil {
		return err // Close disconnects the shards it connected to
	}
	if !sharded {
		e.shards = nil
	}
	return nil
}
