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

// shardedStreamer reads a sharded source shard by shard, one replay
// subtask per shard (sharded.go, sharded_stream.go): every shard in
// `ferry run`, one in a worker of the operator (Options.Shard). Inside
// it, copyLeader and Options.Shard tell the worker that runs the copy
// and moves the cut-over from the others: the two ways of running a
// sharded source.
type shardedStreamer struct{ e *Engine }

func (s shardedStreamer) follows() bool { return !s.e.copyLeader() }

func (s shardedStreamer) partial() bool { return s.e.opts.Shard != "" }

func (s shardedStreamer) checkOplogs(ctx context.Context, what string) error {
	e := s.e
	for _, st := range e.subtaskList() {
		if !e.mine(st.shard.Name) && !e.copyLeader() {
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

func (s shardedStreamer) checkWindow(ctx context.Context, _ checkpoint.TaskRecord) error {
	recs, err := s.e.store.Shards(ctx)
	if err != nil {
		return err
	}
	return s.e.checkShardWindows(ctx, recs)
}

func (s shardedStreamer) checkGivenStart(ctx context.Context, ts bson.Timestamp, useOplog bool) (map[string]bson.Timestamp, error) {
	e := s.e
	starts := map[string]bson.Timestamp{}
	for _, st := range e.subtaskList() {
		if useOplog {
			if err := source.CheckWindow(ctx, st.client, ts, false); err != nil {
				return nil, fmt.Errorf("incremental.startAt %s: shard %s: %w", e.task.Incremental.StartAt, st.shard.Name, err)
			}
		}
		starts[st.shard.Name] = ts
	}
	return starts, nil
}

func (s shardedStreamer) newestStart(ctx context.Context, _ bool) (bson.Timestamp, bool, map[string]bson.Timestamp, error) {
	shards, err := s.e.shardPositions(ctx)
	return bson.Timestamp{}, false, shards, err
}

func (s shardedStreamer) recordStarts(ctx context.Context, _ bson.Timestamp, shards map[string]bson.Timestamp) (bson.Timestamp, error) {
	return s.e.recordShardStarts(ctx, shards)
}

func (s shardedStreamer) copyEnd(ctx context.Context, _ bool) (bson.Timestamp, error) {
	return s.e.recordShardCopyEnd(ctx)
}

func (s shardedStreamer) stream(ctx context.Context) error { return s.e.streamSharded(ctx) }

func (s shardedStreamer) oplogSides(ctx context.Context) ([]oplogSide, error) {
	e := s.e
	recs, err := e.store.Shards(ctx)
	if err != nil {
		return nil, err
	}
	var out []oplogSide
	for _, st := range e.subtaskList() {
		if !e.mine(st.shard.Name) {
			continue
		}
		rec, ok := recs[st.shard.Name]
		if ok && rec.Retired {
			continue
		}
		out = append(out, oplogSide{shard: st.shard.Name, client: st.client, from: shardResume(rec, ok), byClock: e.srcProfile.OplogQueriesScan})
	}
	return out, nil
}

func (s shardedStreamer) shardStatuses() []ShardStatus {
	e := s.e
	var out []ShardStatus
	for _, st := range e.subtaskList() {
		ss := st.status()
		ss.Address = config.Redact(st.shard.URI)
		if !e.mine(st.shard.Name) {
			continue
		}
		out = append(out, ss)
	}
	return out
}

func (s shardedStreamer) checkDrained(ctx context.Context, c checkpoint.CutoverRecord) error {
	recs, err := s.e.store.Shards(ctx)
	if err != nil {
		return err
	}
	return cutover.CheckShardsDrained(recs, c.StartedAt)
}

func (s shardedStreamer) newestAfterDrain(ctx context.Context, c checkpoint.CutoverRecord) (string, bson.Timestamp, bson.Timestamp, bool) {
	e := s.e
	recs, err := e.store.Shards(ctx)
	if err != nil {
		return "", bson.Timestamp{}, bson.Timestamp{}, false
	}
	for _, st := range e.subtaskList() {
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
