package shardedsource

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/cutover"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// Source is the engine's streamer for a sharded source (the engine's
// streamer.go documents each method): it reads the source shard by
// shard, one replay subtask per shard (sharded.go, sharded_stream.go):
// every shard in `ferry run`, one in a worker of the operator
// (Options.Shard). Inside it, copyLeader and Options.Shard tell the
// worker that runs the copy and moves the cut-over from the others: the
// two ways of running a sharded source.

// Follows reports whether this process follows a run another one leads:
// a worker of one shard that does not run the copy (RunShardWorker).
func (s *Source) Follows() bool { return !s.copyLeader() }

// Partial reports whether this process replays only one shard.
func (s *Source) Partial() bool { return s.opts.Shard != "" }

// CheckOplogs fails with source.ErrNoOplog when a shard this process
// replays (every shard, for the copy leader) keeps no oplog.
func (s *Source) CheckOplogs(ctx context.Context, what string) error {
	for _, st := range s.subtaskList() {
		if !s.mine(st.shard.Name) && !s.copyLeader() {
			continue // the copy leader checks every shard before it copies
		}
		ok, err := source.HasOplog(ctx, st.client)
		if err != nil {
			return fmt.Errorf("shard %s: %w", st.shard.Name, err)
		}
		if !ok {
			return source.NoOplogError(what, fmt.Sprintf("shard %s of the source", st.shard.Name))
		}
	}
	return nil
}

// CheckWindow stops a resumed task when a shard's oplog no longer holds
// the position its subtask goes on from (checkShardWindows).
func (s *Source) CheckWindow(ctx context.Context, _ checkpoint.TaskRecord) error {
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return err
	}
	return s.checkShardWindows(ctx, recs)
}

// CheckGivenStart checks incremental.startAt, ts, against every shard's
// oplog and returns it as each shard's start.
func (s *Source) CheckGivenStart(ctx context.Context, ts bson.Timestamp, useOplog bool) (map[string]bson.Timestamp, error) {
	starts := map[string]bson.Timestamp{}
	for _, st := range s.subtaskList() {
		if useOplog {
			if err := source.CheckWindow(ctx, st.client, ts, false); err != nil {
				return nil, fmt.Errorf("incremental.startAt %s: shard %s: %w", s.task.Incremental.StartAt, st.shard.Name, err)
			}
		}
		starts[st.shard.Name] = ts
	}
	return starts, nil
}

// NewestStart is a first run's start without startAt: every shard's
// newest position (shardPositions).
func (s *Source) NewestStart(ctx context.Context, _ bool) (bson.Timestamp, bool, map[string]bson.Timestamp, error) {
	shards, err := s.shardPositions(ctx)
	return bson.Timestamp{}, false, shards, err
}

// RecordStarts records each shard's start position and returns the
// task's, the lowest (recordShardStarts).
func (s *Source) RecordStarts(ctx context.Context, _ bson.Timestamp, shards map[string]bson.Timestamp) (bson.Timestamp, error) {
	return s.recordShardStarts(ctx, shards)
}

// CopyEnd records every shard's position once the copy ended and
// returns the highest (recordShardCopyEnd).
func (s *Source) CopyEnd(ctx context.Context, _ bool) (bson.Timestamp, error) {
	return s.recordShardCopyEnd(ctx)
}

// Stream runs the subtasks (streamSharded).
func (s *Source) Stream(ctx context.Context) error { return s.streamSharded(ctx) }

// OplogSides lists the oplogs of the shards this process replays, with
// their checkpoints, for the oplog window's watch.
func (s *Source) OplogSides(ctx context.Context) ([]source.OplogSide, error) {
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return nil, err
	}
	var out []source.OplogSide
	for _, st := range s.subtaskList() {
		if !s.mine(st.shard.Name) {
			continue
		}
		rec, ok := recs[st.shard.Name]
		if ok && rec.Retired {
			continue
		}
		out = append(out, source.OplogSide{Shard: st.shard.Name, Client: st.client, From: shardResume(rec, ok), ByClock: s.srcProfile.OplogQueriesScan})
	}
	return out, nil
}

// ShardStatuses is a snapshot of every subtask this process runs.
func (s *Source) ShardStatuses() []ShardStatus {
	var out []ShardStatus
	for _, st := range s.subtaskList() {
		ss := st.status()
		ss.Address = config.Redact(st.shard.URI)
		if !s.mine(st.shard.Name) {
			continue
		}
		out = append(out, ss)
	}
	return out
}

// CheckDrained fails unless every shard saved its checkpoint at or past
// its drain position in the cut-over c records.
func (s *Source) CheckDrained(ctx context.Context, c checkpoint.CutoverRecord) error {
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return err
	}
	return cutover.CheckShardsDrained(recs, c.StartedAt)
}

// NewestAfterDrain finds a shard whose newest oplog entry is past its
// drain position: " of shard s", the drain position and the newest
// entry; ok false when none is (or none can be read).
func (s *Source) NewestAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) (string, bson.Timestamp, bson.Timestamp, bool) {
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return "", bson.Timestamp{}, bson.Timestamp{}, false
	}
	for _, st := range s.subtaskList() {
		drained := recs[st.shard.Name].CutoverOf(c.StartedAt).DrainTS
		if drained.IsZero() {
			continue
		}
		if newest, err := source.NewestTS(ctx, st.client); err == nil && newest.Compare(drained) > 0 {
			return " of shard " + st.shard.Name, drained, newest, true
		}
	}
	return "", bson.Timestamp{}, bson.Timestamp{}, false
}

func shardResume(rec checkpoint.ShardRecord, ok bool) bson.Timestamp {
	if !ok {
		return bson.Timestamp{}
	}
	return rec.ResumeTS()
}
