package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ShardsCollection holds one record per shard subtask of a sharded source.
const ShardsCollection = "shards"

// ShardRecord is one shard subtask's progress: where its replay starts,
// how far it has applied, and whether the shard was removed.
type ShardRecord struct {
	ID    string `bson:"_id"`
	Task  string `bson:"task"`
	Shard string `bson:"shard"`
	// Started is set once StartTS is recorded; StartTS may be zero for a
	// shard added while the task ran (replay reads its whole oplog).
	Started bool           `bson:"started"`
	StartTS bson.Timestamp `bson:"startTS"`
	// AppliedTS is the subtask's checkpoint in its shard's oplog.
	AppliedTS bson.Timestamp `bson:"appliedTS,omitempty"`
	// AppliedEntry is the newest entry of the shard's oplog at or below
	// AppliedTS the subtask read (see TaskRecord.AppliedEntry).
	AppliedEntry *OpTime `bson:"appliedEntry,omitempty"`
	// CopyEndTS is the shard's newest oplog position when the full copy
	// finished (see TaskRecord.CopyEndTS).
	CopyEndTS bson.Timestamp `bson:"copyEndTS,omitempty"`
	// Txns are the oplog entries of a multi-shard transaction part the
	// subtask had read, and was waiting to apply, when it saved AppliedTS
	// (replay.Options.SaveState): a restart recovers them with it.
	Txns []bson.Raw `bson:"txns,omitempty"`
	// Retired is set once a removed shard's oplog was applied to its end.
	Retired      bool      `bson:"retired,omitempty"`
	CheckpointAt time.Time `bson:"checkpointAt,omitempty"`
	// Cutover is the shard's part in the task's cut-over (nil before
	// one; see CutoverOf).
	Cutover *ShardCutover `bson:"cutover,omitempty"`
}

// ResumeTS is where the subtask's replay continues from.
func (r ShardRecord) ResumeTS() bson.Timestamp {
	if !r.AppliedTS.IsZero() {
		return r.AppliedTS
	}
	return r.StartTS
}

// ForShard returns a store whose SaveApplied records the checkpoint of one
// shard's subtask; everything else is the task's, shared. After each save
// the task's user-visible checkpoint (TaskRecord.AppliedTS) becomes the
// minimum over the shards that are not retired.
func (s *Store) ForShard(shard string) *Store {
	c := *s
	c.shard = shard
	return &c
}

// Shard is the shard a store saves checkpoints for ("" for the task).
func (s *Store) Shard() string { return s.shard }

func (s *Store) shardID(shard string) string { return s.task + "/" + shard }

// Shards returns the task's shard records, by shard name.
func (s *Store) Shards(ctx context.Context) (map[string]ShardRecord, error) {
	cur, err := s.db.Collection(ShardsCollection).Find(ctx, bson.D{{Key: "task", Value: s.task}})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read shard positions: %w", err)
	}
	var recs []ShardRecord
	if err := cur.All(ctx, &recs); err != nil {
		return nil, fmt.Errorf("checkpoint: read shard positions: %w", err)
	}
	cuts, err := s.shardCutovers(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make(map[string]ShardRecord, len(recs))
	for _, r := range recs {
		if c, ok := cuts[r.Shard]; ok {
			r.Cutover = &c
		}
		out[r.Shard] = r
	}
	return out, nil
}

// ShardRecord reads one shard's record; ErrNotFound when it has none.
func (s *Store) ShardRecord(ctx context.Context, shard string) (ShardRecord, error) {
	var rec ShardRecord
	err := s.db.Collection(ShardsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: s.shardID(shard)}}).Decode(&rec)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return rec, fmt.Errorf("checkpoint: shard %s: %w", shard, ErrNotFound)
	}
	if err != nil {
		return rec, fmt.Errorf("checkpoint: read shard %s: %w", shard, err)
	}
	cuts, err := s.shardCutovers(ctx, shard)
	if err != nil {
		return rec, err
	}
	if c, ok := cuts[shard]; ok {
		rec.Cutover = &c
	}
	return rec, nil
}

// SetShardStart records a shard's replay start position; an existing one
// is kept (a restart never moves it). It returns the record as stored.
func (s *Store) SetShardStart(ctx context.Context, shard string, ts bson.Timestamp) (ShardRecord, error) {
	_, err := s.db.Collection(ShardsCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.shardID(shard)}},
		bson.D{{Key: "$setOnInsert", Value: bson.D{
			{Key: "task", Value: s.task}, {Key: "shard", Value: shard}, {Key: "started", Value: true}, {Key: "startTS", Value: ts},
		}}}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return ShardRecord{}, fmt.Errorf("checkpoint: record start position of shard %s: %w", shard, err)
	}
	return s.ShardRecord(ctx, shard)
}

// SetShardCopyEnd records a shard's newest oplog position at the end of
// the full copy.
func (s *Store) SetShardCopyEnd(ctx context.Context, shard string, ts bson.Timestamp) error {
	_, err := s.db.Collection(ShardsCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.shardID(shard)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "copyEndTS", Value: ts}}}})
	if err != nil {
		return fmt.Errorf("checkpoint: record copy end of shard %s: %w", shard, err)
	}
	return nil
}

// RetireShard records that a removed shard's oplog was applied to its
// end: it no longer holds the task's checkpoint back.
func (s *Store) RetireShard(ctx context.Context, shard string) error {
	_, err := s.db.Collection(ShardsCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.shardID(shard)}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "retired", Value: true}}}})
	if err != nil {
		return fmt.Errorf("checkpoint: retire shard %s: %w", shard, err)
	}
	return s.refreshTaskCheckpoint(ctx)
}

// saveShardApplied records one shard's checkpoint, then the task's.
func (s *Store) saveShardApplied(ctx context.Context, ts bson.Timestamp) error {
	return s.SaveShardState(ctx, ts, nil)
}

// SaveShardState records the checkpoint of the store's shard (a store
// from ForShard) together with the transaction entries it holds (see
// ShardRecord.Txns), in one write, then the task's checkpoint.
func (s *Store) SaveShardState(ctx context.Context, ts bson.Timestamp, txns []bson.Raw) error {
	if s.shard == "" {
		return fmt.Errorf("checkpoint: SaveShardState needs a shard's store (ForShard)")
	}
	if txns == nil {
		txns = []bson.Raw{}
	}
	_, err := s.db.Collection(ShardsCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.shardID(s.shard)}},
		bson.D{{Key: "$set", Value: append(s.appliedSet(ts), bson.E{Key: "txns", Value: txns})}})
	if err != nil {
		return fmt.Errorf("checkpoint: save shard %s at %d,%d: %w", s.shard, ts.T, ts.I, err)
	}
	return s.refreshTaskCheckpoint(ctx)
}

// refreshTaskCheckpoint sets the task's checkpoint to the minimum of the
// shards that are not retired.
func (s *Store) refreshTaskCheckpoint(ctx context.Context) error {
	recs, err := s.Shards(ctx)
	if err != nil {
		return err
	}
	low, ok := MinApplied(recs)
	if !ok {
		return nil
	}
	_, err = s.db.Collection(TasksCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.task}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "appliedTS", Value: low}, {Key: "checkpointAt", Value: time.Now().UTC()}}}})
	if err != nil {
		return fmt.Errorf("checkpoint: save task checkpoint: %w", err)
	}
	return nil
}

// MinApplied is the task's checkpoint over its shards: the lowest resume
// position of the shards that are not retired. ok is false when there is
// none.
func MinApplied(recs map[string]ShardRecord) (low bson.Timestamp, ok bool) {
	for _, r := range recs {
		if r.Retired || !r.Started {
			continue
		}
		if ts := r.ResumeTS(); !ok || ts.Compare(low) < 0 {
			low, ok = ts, true
		}
	}
	return low, ok
}
