package engine

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/cutover"
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

// replicaSetStreamer reads a replica set's oplog (or a change stream,
// through mongos too) in one replay (stream.go). It owns the replay's
// state and knows the engine only through its fields: the engine's parts,
// its options, and what it needs of the run as functions.
type replicaSetStreamer struct {
	task *config.Task
	// shard is Options.Shard.
	shard string
	// log names the task; baseLog does not (for the replayer, which adds
	// it itself).
	log, baseLog *slog.Logger
	endpoints
	// cut is the task's cut-over, which drives replay once it runs.
	cut *cutover.Machine
	// finish says when replay ends once caught up (shared with the
	// engine, which asks).
	finish *finishRequest
	// newReplayer makes the replayer (newReplayer; tests give fakes).
	newReplayer func(replay.Options) Replayer
	// reader, Options.Reader, replaces the oplog tailer (tests).
	reader func(from bson.Timestamp) source.OplogReader
	// checkpointInterval and observeReplay are Options'.
	checkpointInterval time.Duration
	observeReplay      func(op string, d time.Duration)
	// whileStreaming runs the streaming verification while replay runs,
	// until ctx ends; shardKeys is what replay needs to know of a sharded
	// target (targetSharding.replayShardKeys).
	whileStreaming func(ctx context.Context)
	shardKeys      func() replay.ShardKeys

	replayer atomic.Pointer[Replayer]
	tailer   atomic.Pointer[source.Tailer]
	// streamAt is when replay started in this run.
	streamAt atomic.Pointer[time.Time]
}

func (*replicaSetStreamer) Follows() bool { return false }

// partial: a worker given a shard (Options.Shard) over a sharded source
// read through mongos (mode full, change streams) still leaves the
// task-wide steps to the run that sees every shard.
func (s *replicaSetStreamer) Partial() bool { return s.shard != "" }

func (s *replicaSetStreamer) CheckOplogs(ctx context.Context, what string) error {
	ok, err := source.HasOplog(ctx, s.source)
	if err != nil || ok {
		return err
	}
	return source.NoOplogError(what, "the source")
}

func (s *replicaSetStreamer) CheckWindow(ctx context.Context, prev checkpoint.TaskRecord) error {
	if err := source.CheckWindow(ctx, s.source, prev.ResumeTS(), prev.ResumesFromEmptyOplog()); err != nil {
		return err
	}
	if prev.AppliedEntry == nil || prev.AppliedTS.IsZero() {
		return nil // nothing applied yet, or a checkpoint saved without its entry
	}
	return source.CheckRollback(ctx, s.source, *prev.AppliedEntry)
}

func (s *replicaSetStreamer) CheckGivenStart(ctx context.Context, ts bson.Timestamp, useOplog bool) (map[string]bson.Timestamp, error) {
	if useOplog && s.reader == nil {
		if err := source.CheckWindow(ctx, s.source, ts, false); err != nil {
			return nil, fmt.Errorf("incremental.startAt %s: %w", s.task.Incremental.StartAt, err)
		}
	}
	return nil, nil
}

func (s *replicaSetStreamer) NewestStart(ctx context.Context, useOplog bool) (ts bson.Timestamp, empty bool, shards map[string]bson.Timestamp, err error) {
	if ts, empty, err = s.positionOf(useOplog)(ctx, s.source); err != nil {
		err = fmt.Errorf("the source's replay start position: %w", err)
	}
	return ts, empty, nil, err
}

func (*replicaSetStreamer) RecordStarts(_ context.Context, ts bson.Timestamp, _ map[string]bson.Timestamp) (bson.Timestamp, error) {
	return ts, nil
}

func (s *replicaSetStreamer) CopyEnd(ctx context.Context, useOplog bool) (bson.Timestamp, error) {
	if useOplog && s.srcProfile.OplogQueriesScan {
		return copyEndByClock(ctx, s.source)
	}
	endTS, _, err := s.positionOf(useOplog)(ctx, s.source)
	if err != nil {
		err = fmt.Errorf("the source's position at the end of the copy: %w", err)
	}
	return endTS, err
}

func (s *replicaSetStreamer) OplogSides(ctx context.Context) ([]source.OplogSide, error) {
	rec, err := s.store.Task(ctx)
	if err != nil {
		return nil, err
	}
	return []source.OplogSide{{Client: s.source, From: rec.ResumeTS(), SinceEmpty: rec.ResumesFromEmptyOplog(), ByClock: s.srcProfile.OplogQueriesScan}}, nil
}

func (*replicaSetStreamer) ShardStatuses() []ShardStatus { return nil }

func (s *replicaSetStreamer) CheckDrained(ctx context.Context, c checkpoint.CutoverRecord) error {
	rec, err := s.store.Task(ctx)
	if err != nil {
		return err
	}
	if at := rec.ResumeTS(); c.SourceTS.IsZero() || at.Compare(c.SourceTS) < 0 {
		return fmt.Errorf("cut-over: the checkpoint %d,%d is below the drain position %d,%d", at.T, at.I, c.SourceTS.T, c.SourceTS.I)
	}
	return nil
}

func (s *replicaSetStreamer) NewestAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) (string, bson.Timestamp, bson.Timestamp, bool) {
	drained := c.SourceTS
	if newest, err := source.NewestTS(ctx, s.source); err == nil && newest.Compare(drained) > 0 {
		return "", drained, newest, true
	}
	return "", bson.Timestamp{}, bson.Timestamp{}, false
}

// positionOf returns how the source's current position is read: its
// newest oplog entry, or its clock where reading the newest entry would
// read the whole oplog, or its cluster time for change streams.
func (s *replicaSetStreamer) positionOf(useOplog bool) func(context.Context, *mongo.Client) (bson.Timestamp, bool, error) {
	switch {
	case !useOplog:
		return func(ctx context.Context, c *mongo.Client) (bson.Timestamp, bool, error) {
			ts, err := source.ClusterTime(ctx, c)
			return ts, false, err
		}
	case s.srcProfile.OplogQueriesScan:
		// Reading the newest entry would read the whole oplog.
		return source.StartPositionByClock
	}
	return source.StartPosition
}

// copyEndByClock is the copy's end position on a source where reading
// the newest oplog entry reads the whole oplog (conn.Profile's
// OplogQueriesScan; seconds on FerretDB with a busy oplog): the start of
// the next second by the server's clock, above every entry written
// before the call. The copy's end only bounds the copy/replay overlap
// (replay.Options.OverlapUntil: how long a duplicate key on a unique
// secondary index is tolerated), never where replay starts, so an upper
// bound serves; it tolerates such a duplicate at most a second longer.
// The start position on such a source is the start of a second too, read
// within milliseconds of it (source.StartPositionByClock).
func copyEndByClock(ctx context.Context, c *mongo.Client) (bson.Timestamp, error) {
	ts, err := source.ServerTime(ctx, c)
	if err != nil {
		return bson.Timestamp{}, err
	}
	return bson.Timestamp{T: ts.T + 1}, nil
}
