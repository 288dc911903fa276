package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/engine/topology"
)

// A sharded source (docs/sharded.md; docs/architecture.md, "Sharded
// sources"): the full copy reads each shard directly (pershard.go) or
// through mongos; replay runs one subtask per shard, each
// tailing its shard's oplog from its own checkpoint and skipping chunk
// migrations (fromMigrate). In `ferry run` every subtask runs in one
// process; a worker started with Options.Shard runs one of them.

// ErrUnknownShard means Options.Shard names no shard of the source.
var ErrUnknownShard = errors.New("unknown shard")

// openShards discovers a sharded source and connects to its shards. A
// task that only copies (mode full) or reads a change stream through mongos
// needs no shard connections.
func (e *Engine) openShards(ctx context.Context) error {
	sharded, shards, err := topology.Discover(ctx, e.source, e.task.Source)
	if err != nil {
		return err
	}
	if !sharded {
		if e.opts.Shard != "" {
			return fmt.Errorf("--shard %s: the source is not a sharded cluster (hello names no mongos and source.kind is %s): run without --shard", e.opts.Shard, e.task.Source.Kind)
		}
		return nil
	}
	if e.task.Mode == config.ModeFull || e.task.Incremental.Method == config.MethodChangeStream {
		e.log.Info("sharded source: copied (and changes read) through mongos", "shards", len(shards))
		return nil
	}
	if e.opts.Shard != "" && !slices.ContainsFunc(shards, func(s topology.Shard) bool { return s.Name == e.opts.Shard }) {
		return fmt.Errorf("--shard %s: %w: config.shards lists %s", e.opts.Shard, ErrUnknownShard, shardNames(shards))
	}
	e.sharded = true
	e.subtasks = map[string]*subtask{}
	for _, s := range shards {
		if err := e.addShard(ctx, s); err != nil {
			return err
		}
	}
	e.log.Info("sharded source: one replay subtask per shard", "shards", shardNames(shards), "shard", e.opts.Shard)
	return nil
}

// addShard connects to a shard and registers its (not yet running)
// subtask.
func (e *Engine) addShard(ctx context.Context, s topology.Shard) error {
	c, err := topology.Open(ctx, e.task.Source, s)
	if err != nil {
		return err
	}
	if err := checkNotTarget(ctx, c, e.target, s.Name); err != nil {
		_ = c.Disconnect(context.Background())
		return err
	}
	st := &subtask{shard: s, client: c, phase: SubtaskPending, since: time.Now()}
	e.subMu.Lock()
	e.subtasks[s.Name] = st
	e.shardOrder = append(e.shardOrder, s.Name)
	slices.Sort(e.shardOrder)
	e.subMu.Unlock()
	return nil
}

// copyLeader reports whether this process runs the full copy and records
// the start positions: always in `ferry run`; in workers running one shard
// each, the worker of the shard whose name sorts first.
func (e *Engine) copyLeader() bool {
	if e.opts.Shard == "" {
		return true
	}
	e.subMu.Lock()
	defer e.subMu.Unlock()
	return len(e.shardOrder) > 0 && e.shardOrder[0] == e.opts.Shard
}

// mine reports whether this process runs the subtask of shard name.
func (e *Engine) mine(name string) bool { return e.opts.Shard == "" || e.opts.Shard == name }

func (e *Engine) subtaskList() []*subtask {
	e.subMu.Lock()
	defer e.subMu.Unlock()
	out := make([]*subtask, 0, len(e.shardOrder))
	for _, n := range e.shardOrder {
		out = append(out, e.subtasks[n])
	}
	return out
}

// checkShardWindows fails with OplogWindowLost, naming the shard, when a
// shard's oplog no longer holds its subtask's checkpoint, or with
// source.ErrRolledBack when it no longer holds the entry the checkpoint
// was saved at.
func (e *Engine) checkShardWindows(ctx context.Context, recs map[string]checkpoint.ShardRecord) error {
	for _, st := range e.subtaskList() {
		rec, ok := recs[st.shard.Name]
		if !ok || rec.Retired || !e.mine(st.shard.Name) {
			continue
		}
		if err := checkShardWindow(ctx, st, rec); err != nil {
			return err
		}
	}
	return nil
}

func checkShardWindow(ctx context.Context, st *subtask, rec checkpoint.ShardRecord) error {
	from := rec.ResumeTS()
	if from.IsZero() {
		return nil // a shard added later: its whole oplog is read
	}
	if err := source.CheckWindow(ctx, st.client, from, false); err != nil {
		return fmt.Errorf("shard %s: %w", st.shard.Name, err)
	}
	if rec.AppliedEntry != nil && !rec.AppliedTS.IsZero() {
		if err := source.CheckRollback(ctx, st.client, *rec.AppliedEntry); err != nil {
			return fmt.Errorf("shard %s: %w", st.shard.Name, err)
		}
	}
	return nil
}

// shardPositions reads the newest majority-committed oplog position of
// every shard (source.CommittedTS): the start positions, taken before
// anything is copied, which reads at majority read concern.
func (e *Engine) shardPositions(ctx context.Context) (map[string]bson.Timestamp, error) {
	out := map[string]bson.Timestamp{}
	for _, st := range e.subtaskList() {
		ts, err := source.CommittedTS(ctx, st.client)
		if err != nil {
			return nil, fmt.Errorf("shard %s: %w", st.shard.Name, err)
		}
		out[st.shard.Name] = ts
	}
	return out, nil
}

// recordShardStarts stores the start positions (existing ones are kept)
// and returns the lowest, the task's start.
func (e *Engine) recordShardStarts(ctx context.Context, starts map[string]bson.Timestamp) (bson.Timestamp, error) {
	var low bson.Timestamp
	first := true
	for _, name := range slices.Sorted(maps.Keys(starts)) {
		rec, err := e.store.SetShardStart(ctx, name, starts[name])
		if err != nil {
			return low, err
		}
		e.log.Info("recorded the shard's replay start position", "shard", name, "ts", rec.StartTS)
		if first || rec.StartTS.Compare(low) < 0 {
			low, first = rec.StartTS, false
		}
	}
	return low, nil
}

// recordShardCopyEnd stores every shard's newest position once the copy
// is done.
func (e *Engine) recordShardCopyEnd(ctx context.Context) (bson.Timestamp, error) {
	ends, err := e.shardPositions(ctx)
	if err != nil {
		return bson.Timestamp{}, err
	}
	var high bson.Timestamp
	for name, ts := range ends {
		if err := e.store.SetShardCopyEnd(ctx, name, ts); err != nil {
			return high, err
		}
		if ts.Compare(high) > 0 {
			high = ts
		}
	}
	return high, nil
}

// checkNotTarget refuses a shard that is the target deployment.
func checkNotTarget(ctx context.Context, shard, target *mongo.Client, name string) error {
	return wrapShard(name, conn.CheckDistinct(ctx, shard, target))
}

func wrapShard(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("source.shards[%s]: %w", name, err)
}

func shardNames(shards []topology.Shard) string {
	names := make([]string, len(shards))
	for i, s := range shards {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// ShardStatuses returns a snapshot of every shard subtask, by shard name;
// nil for a source that is not read shard by shard.
func (e *Engine) ShardStatuses() []ShardStatus {
	return e.streaming.shardStatuses()
}
