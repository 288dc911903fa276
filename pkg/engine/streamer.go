package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// streamer is how a run reads the source's changes: one oplog for a
// replica set (replicaSetStreamer), one subtask per shard for a sharded
// source (shardedSource, sharded.go). The engine's phases, the
// cut-over and /status go through it; pickStreamer is the one place that
// asks which kind of source this is.
type streamer interface {
	// follows reports whether this process follows a run another one
	// leads: a worker of one shard that does not run the copy
	// (runShardWorker).
	follows() bool
	// partial reports whether this process replays only part of the
	// source (one shard's worker): the task-wide verification, the
	// restore of the options the sync deferred and streaming verification are
	// left to the run that sees every shard (the cut-over, ferry verify).
	partial() bool
	// checkOplogs fails with source.ErrNoOplog when an oplog this
	// process replays keeps none; what names the task's mode.
	checkOplogs(ctx context.Context, what string) error
	// checkWindow stops a resumed task whose oplog no longer holds the
	// position replay goes on from.
	checkWindow(ctx context.Context, prev checkpoint.TaskRecord) error
	// checkGivenStart checks incremental.startAt, ts, against each
	// oplog's window and returns the start of each shard.
	checkGivenStart(ctx context.Context, ts bson.Timestamp, useOplog bool) (map[string]bson.Timestamp, error)
	// newestStart is a first run's start position without startAt: the
	// source's newest position, or every shard's.
	newestStart(ctx context.Context, useOplog bool) (ts bson.Timestamp, empty bool, shards map[string]bson.Timestamp, err error)
	// recordStarts records each shard's start position and returns the
	// task's (ts for a replica set).
	recordStarts(ctx context.Context, ts bson.Timestamp, shards map[string]bson.Timestamp) (bson.Timestamp, error)
	// copyEnd is the source's position once the copy ended (each shard's
	// recorded for a sharded source).
	copyEnd(ctx context.Context, useOplog bool) (bson.Timestamp, error)
	// stream replays until ctx ends, or, with UntilCaughtUp or a
	// cut-over, until everything the source wrote is applied.
	stream(ctx context.Context) error
	// oplogSides lists the oplogs this process replays with their
	// checkpoints, for the oplog window's watch.
	oplogSides(ctx context.Context) ([]oplogSide, error)
	// shardStatuses is every shard subtask's snapshot this process runs;
	// nil for a replica set.
	shardStatuses() []ShardStatus
	// checkDrained fails unless replay saved its checkpoint at or past
	// the cut-over's drain position (every shard's).
	checkDrained(ctx context.Context, c checkpoint.CutoverRecord) error
	// newestAfterDrain finds an oplog whose newest entry is past its
	// drain position: where ("" or " of shard s"), the drain position
	// and the newest entry; ok false when none is (or none can be read).
	newestAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) (where string, drained, newest bson.Timestamp, ok bool)
}

// pickStreamer picks how this run reads the source, once Open found
// which kind it is (openShards).
func (e *Engine) pickStreamer() streamer {
	if e.shards != nil {
		return e.shards
	}
	return &replicaSetStreamer{task: e.task, shard: e.opts.Shard, source: e.source, srcProfile: e.srcProfile,
		store: e.store, scripted: e.opts.Reader != nil, replay: e.stream}
}

// openShards finds whether the source is read shard by shard and, if so,
// connects to its shards (shardedSource.open): e.shards supervises them,
// given the engine's parts and what it needs of the run as functions.
func (e *Engine) openShards(ctx context.Context) error {
	e.shards = &shardedSource{
		task: e.task, log: e.log, baseLog: e.baseLog(), source: e.source, target: e.target,
		srcProfile: e.srcProfile, dstProfile: e.dstProfile, store: e.store, mapper: e.mapper, cut: e.cut,
		opts: shardedOptions{Shard: e.opts.Shard, ShardReader: e.opts.ShardReader, TopologyInterval: e.opts.TopologyInterval,
			CheckpointInterval: e.opts.CheckpointInterval, ObserveReplay: e.opts.ObserveReplay, ObserveWrite: e.opts.ObserveWrite},
		run: shardedRun{
			untilCaughtUp:  e.untilCaughtUp.Load,
			setPhase:       e.setPhase,
			takeLease:      e.lease.take,
			whileStreaming: func(ctx context.Context) { e.verification.whileStreaming(ctx) },
			replayParams:   e.replayParams,
			shardKeys:      e.replayShardKeys,
			helpCopy:       func(ctx context.Context) (int, error) { return e.copier.HelpCopy(ctx) },
			copied:         func(ns, target string, docs, bytes int64) { e.copier.Copied(ns, target, docs, bytes) },
		},
	}
	sharded, err := e.shards.open(ctx)
	if err != nil {
		return err // Close disconnects the shards it connected to
	}
	if !sharded {
		e.shards = nil
	}
	return nil
}

// replicaSetStreamer reads a replica set's oplog (or a change stream,
// through mongos too) in one replay, which the engine runs (replay).
type replicaSetStreamer struct {
	task *config.Task
	// shard is Options.Shard.
	shard      string
	source     *mongo.Client
	srcProfile conn.Profile
	store      *checkpoint.Store
	// scripted: Options.Reader replaces the oplog tailer (tests).
	scripted bool
	// replay is the Streaming phase's replay (Engine.stream).
	replay func(ctx context.Context) error
}

func (*replicaSetStreamer) follows() bool { return false }

// partial: a worker given a shard (Options.Shard) over a sharded source
// read through mongos (mode full, change streams) still leaves the
// task-wide steps to the run that sees every shard.
func (s *replicaSetStreamer) partial() bool { return s.shard != "" }

func (s *replicaSetStreamer) checkOplogs(ctx context.Context, what string) error {
	ok, err := source.HasOplog(ctx, s.source)
	if err != nil || ok {
		return err
	}
	return source.NoOplogError(what, "the source")
}

func (s *replicaSetStreamer) checkWindow(ctx context.Context, prev checkpoint.TaskRecord) error {
	if err := source.CheckWindow(ctx, s.source, prev.ResumeTS(), prev.ResumesFromEmptyOplog()); err != nil {
		return err
	}
	if prev.AppliedEntry == nil || prev.AppliedTS.IsZero() {
		return nil // nothing applied yet, or a checkpoint saved without its entry
	}
	return source.CheckRollback(ctx, s.source, *prev.AppliedEntry)
}

func (s *replicaSetStreamer) checkGivenStart(ctx context.Context, ts bson.Timestamp, useOplog bool) (map[string]bson.Timestamp, error) {
	if useOplog && !s.scripted {
		if err := source.CheckWindow(ctx, s.source, ts, false); err != nil {
			return nil, fmt.Errorf("incremental.startAt %s: %w", s.task.Incremental.StartAt, err)
		}
	}
	return nil, nil
}

func (s *replicaSetStreamer) newestStart(ctx context.Context, useOplog bool) (ts bson.Timestamp, empty bool, shards map[string]bson.Timestamp, err error) {
	if ts, empty, err = s.positionOf(useOplog)(ctx, s.source); err != nil {
		err = fmt.Errorf("the source's replay start position: %w", err)
	}
	return ts, empty, nil, err
}

func (*replicaSetStreamer) recordStarts(_ context.Context, ts bson.Timestamp, _ map[string]bson.Timestamp) (bson.Timestamp, error) {
	return ts, nil
}

func (s *replicaSetStreamer) copyEnd(ctx context.Context, useOplog bool) (bson.Timestamp, error) {
	if useOplog && s.srcProfile.OplogQueriesScan {
		return copyEndByClock(ctx, s.source)
	}
	endTS, _, err := s.positionOf(useOplog)(ctx, s.source)
	if err != nil {
		err = fmt.Errorf("the source's position at the end of the copy: %w", err)
	}
	return endTS, err
}

func (s *replicaSetStreamer) stream(ctx context.Context) error { return s.replay(ctx) }

func (s *replicaSetStreamer) oplogSides(ctx context.Context) ([]oplogSide, error) {
	rec, err := s.store.Task(ctx)
	if err != nil {
		return nil, err
	}
	return []oplogSide{{client: s.source, from: rec.ResumeTS(), sinceEmpty: rec.ResumesFromEmptyOplog(), byClock: s.srcProfile.OplogQueriesScan}}, nil
}

func (*replicaSetStreamer) shardStatuses() []ShardStatus { return nil }

func (s *replicaSetStreamer) checkDrained(ctx context.Context, c checkpoint.CutoverRecord) error {
	rec, err := s.store.Task(ctx)
	if err != nil {
		return err
	}
	if at := rec.ResumeTS(); c.SourceTS.IsZero() || at.Compare(c.SourceTS) < 0 {
		return fmt.Errorf("cut-over: the checkpoint %d,%d is below the drain position %d,%d", at.T, at.I, c.SourceTS.T, c.SourceTS.I)
	}
	return nil
}

func (s *replicaSetStreamer) newestAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) (string, bson.Timestamp, bson.Timestamp, bool) {
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
