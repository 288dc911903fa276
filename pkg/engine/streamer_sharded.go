package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/cutover"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// The sharded source as the run's streamer: it reads the source shard by
// shard, one replay subtask per shard (sharded.go, sharded_stream.go):
// every shard in `ferry run`, one in a worker of the operator
// (Options.Shard). Inside it, copyLeader and Options.Shard tell the
// worker that runs the copy and moves the cut-over from the others: the
// two ways of running a sharded source.
var _ streamer = (*shardedSource)(nil)

func (s *shardedSource) follows() bool { return !s.copyLeader() }

func (s *shardedSource) partial() bool { return s.opts.Shard != "" }

func (s *shardedSource) checkOplogs(ctx context.Context, what string) error {
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

func (s *shardedSource) checkWindow(ctx context.Context, _ checkpoint.TaskRecord) error {
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return err
	}
	return s.checkShardWindows(ctx, recs)
}

func (s *shardedSource) checkGivenStart(ctx context.Context, ts bson.Timestamp, useOplog bool) (map[string]bson.Timestamp, error) {
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

func (s *shardedSource) newestStart(ctx context.Context, _ bool) (bson.Timestamp, bool, map[string]bson.Timestamp, error) {
	shards, err := s.shardPositions(ctx)
	return bson.Timestamp{}, false, shards, err
}

func (s *shardedSource) recordStarts(ctx context.Context, _ bson.Timestamp, shards map[string]bson.Timestamp) (bson.Timestamp, error) {
	return s.recordShardStarts(ctx, shards)
}

func (s *shardedSource) copyEnd(ctx context.Context, _ bool) (bson.Timestamp, error) {
	return s.recordShardCopyEnd(ctx)
}

func (s *shardedSource) stream(ctx context.Context) error { return s.streamSharded(ctx) }

func (s *shardedSource) oplogSides(ctx context.Context) ([]oplogSide, error) {
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return nil, err
	}
	var out []oplogSide
	for _, st := range s.subtaskList() {
		if !s.mine(st.shard.Name) {
			continue
		}
		rec, ok := recs[st.shard.Name]
		if ok && rec.Retired {
			continue
		}
		out = append(out, oplogSide{shard: st.shard.Name, client: st.client, from: shardResume(rec, ok), byClock: s.srcProfile.OplogQueriesScan})
	}
	return out, nil
}

func (s *shardedSource) shardStatuses() []ShardStatus {
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

func (s *shardedSource) checkDrained(ctx context.Context, c checkpoint.CutoverRecord) error {
	recs, err := s.store.Shards(ctx)
	if err != nil {
		return err
	}
	return cutover.CheckShardsDrained(recs, c.StartedAt)
}

func (s *shardedSource) newestAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) (string, bson.Timestamp, bson.Timestamp, bool) {
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
