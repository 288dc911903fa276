package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// streamer is how a run reads the source's changes: one oplog for a
// replica set (replicaSetStreamer), one subtask per shard for a sharded
// source (shardedStreamer, sharded.go). The engine's phases, the
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
	if e.sharded {
		return shardedStreamer{e}
	}
	return replicaSetStreamer{e}
}

// replicaSetStreamer reads a replica set's oplog (or a change stream,
// through mongos too) in one replay.
type replicaSetStreamer struct{ e *Engine }

func (replicaSetStreamer) follows() bool { return false }

// partial: a worker given a shard (Options.Shard) over a sharded source
// read through mongos (mode full, change streams) still leaves the
// task-wide steps to the run that sees every shard.
func (s replicaSetStreamer) partial() bool { return s.e.opts.Shard != "" }

func (s replicaSetStreamer) checkOplogs(ctx context.Context, what string) error {
	ok, err := source.HasOplog(ctx, s.e.source)
	if err != nil || ok {
		return err
	}
	return source.NoOplogError(what, "the source")
}

func (s replicaSetStreamer) checkWindow(ctx context.Context, prev checkpoint.TaskRecord) error {
	if err := source.CheckWindow(ctx, s.e.source, prev.ResumeTS(), prev.ResumesFromEmptyOplog()); err != nil {
		return err
	}
	if prev.AppliedEntry == nil || prev.AppliedTS.IsZero() {
		return nil // nothing applied yet, or a checkpoint saved without its entry
	}
	return source.CheckRollback(ctx, s.e.source, *prev.AppliedEntry)
}

func (s replicaSetStreamer) checkGivenStart(ctx context.Context, ts bson.Timestamp, useOplog bool) (map[string]bson.Timestamp, error) {
	e := s.e
	if useOplog && e.opts.Reader == nil {
		if err := source.CheckWindow(ctx, e.source, ts, false); err != nil {
			return nil, fmt.Errorf("incremental.startAt %s: %w", e.task.Incremental.StartAt, err)
		}
	}
	return nil, nil
}

func (s replicaSetStreamer) newestStart(ctx context.Context, useOplog bool) (ts bson.Timestamp, empty bool, shards map[string]bson.Timestamp, err error) {
	if ts, empty, err = s.e.positionOf(useOplog)(ctx, s.e.source); err != nil {
		err = fmt.Errorf("the source's replay start position: %w", err)
	}
	return ts, empty, nil, err
}

func (replicaSetStreamer) recordStarts(_ context.Context, ts bson.Timestamp, _ map[string]bson.Timestamp) (bson.Timestamp, error) {
	return ts, nil
}

func (s replicaSetStreamer) copyEnd(ctx context.Context, useOplog bool) (bson.Timestamp, error) {
	e := s.e
	if useOplog && e.srcProfile.OplogQueriesScan {
		return copyEndByClock(ctx, e.source)
	}
	endTS, _, err := e.positionOf(useOplog)(ctx, e.source)
	if err != nil {
		err = fmt.Errorf("the source's position at the end of the copy: %w", err)
	}
	return endTS, err
}

func (s replicaSetStreamer) stream(ctx context.Context) error { return s.e.stream(ctx) }

func (s replicaSetStreamer) oplogSides(ctx context.Context) ([]oplogSide, error) {
	e := s.e
	rec, err := e.store.Task(ctx)
	if err != nil {
		return nil, err
	}
	return []oplogSide{{client: e.source, from: rec.ResumeTS(), sinceEmpty: rec.ResumesFromEmptyOplog(), byClock: e.srcProfile.OplogQueriesScan}}, nil
}

func (replicaSetStreamer) shardStatuses() []ShardStatus { return nil }

func (s replicaSetStreamer) checkDrained(ctx context.Context, c checkpoint.CutoverRecord) error {
	rec, err := s.e.store.Task(ctx)
	if err != nil {
		return err
	}
	if at := rec.ResumeTS(); c.SourceTS.IsZero() || at.Compare(c.SourceTS) < 0 {
		return fmt.Errorf("cut-over: the checkpoint %d,%d is below the drain position %d,%d", at.T, at.I, c.SourceTS.T, c.SourceTS.I)
	}
	return nil
}

func (s replicaSetStreamer) newestAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) (string, bson.Timestamp, bson.Timestamp, bool) {
	drained := c.SourceTS
	if newest, err := source.NewestTS(ctx, s.e.source); err == nil && newest.Compare(drained) > 0 {
		return "", drained, newest, true
	}
	return "", bson.Timestamp{}, bson.Timestamp{}, false
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
