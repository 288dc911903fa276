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

// CutoverRecord is how far a task's cut-over got, kept in its task record
// so that a restarted worker goes on from the step it reached.
type CutoverRecord struct {
	// Step is one of workerapi's Cutover* step names.
	Step          string `bson:"step"`
	CaughtUp      bool   `bson:"caughtUp,omitempty"`
	WritesBlocked bool   `bson:"writesBlocked,omitempty"`
	// SourceTS is the source's newest position read once writes stopped:
	// the drain replays up to and including it.
	SourceTS bson.Timestamp `bson:"sourceTS,omitempty"`
	// TargetTS is the target's newest oplog position at the end: where a
	// reverse sync starts.
	TargetTS bson.Timestamp `bson:"targetTS,omitempty"`
	// Verify is the verification's outcome once it ran.
	Verify     *CutoverVerify `bson:"verify,omitempty"`
	StartedAt  time.Time      `bson:"startedAt"`
	FinishedAt time.Time      `bson:"finishedAt,omitempty"`
	Message    string         `bson:"message,omitempty"`
}

// CutoverVerify is the outcome of the verification run at cut-over.
type CutoverVerify struct {
	Mode string `bson:"mode"`
	OK   bool   `bson:"ok"`
	// Differing names the source namespaces whose target differs.
	Differing []string `bson:"differing,omitempty"`
}

// CutoversCollection holds each task's cut-over record (one document,
// _id the task's name), apart from the task record. Only the worker that
// moves the cut-over's step writes it, while every worker's checkpoint
// save updates the task record; a server that updates a document by
// reading it and writing it back whole (FerretDB v1 does) would let such
// a save, begun before a step was recorded in the same document, write
// the earlier step back, and the workers that follow the cut-over would
// never read the step (a Failed among them). Task records written before
// this collection existed keep their cut-over in the task record's field,
// which Task reads when the collection has none.
const CutoversCollection = "cutovers"

// cutoverDoc is a document of CutoversCollection.
type cutoverDoc struct {
	Task      string        `bson:"task"`
	Cutover   CutoverRecord `bson:"cutover"`
	UpdatedAt time.Time     `bson:"updatedAt"`
}

// SetCutover records the cut-over's progress (see CutoversCollection).
func (s *Store) SetCutover(ctx context.Context, c CutoverRecord) error {
	_, err := s.db.Collection(CutoversCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.task}},
		bson.D{{Key: "$set", Value: cutoverDoc{Task: s.task, Cutover: c, UpdatedAt: time.Now().UTC()}}},
		options.UpdateOne().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("checkpoint: record cut-over step %s: %w", c.Step, err)
	}
	return nil
}

// cutover reads the task's cut-over record; nil when none is recorded in
// CutoversCollection.
func (s *Store) cutover(ctx context.Context) (*CutoverRecord, error) {
	var d cutoverDoc
	err := s.db.Collection(CutoversCollection).FindOne(ctx, bson.D{{Key: "_id", Value: s.task}}).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("checkpoint: read the cut-over of task %s: %w", s.task, err)
	}
	return &d.Cutover, nil
}

// ShardCutover is one shard's part in a sharded source's cut-over, kept
// in its shard record: whether its subtask caught up, the position it
// drains to and whether it got there. StartedAt is the cut-over's
// (CutoverRecord.StartedAt): a record left by an earlier attempt, which
// has another, counts as none.
type ShardCutover struct {
	StartedAt time.Time `bson:"startedAt"`
	CaughtUp  bool      `bson:"caughtUp,omitempty"`
	// DrainTS is the shard's newest oplog position read once the
	// cut-over reached Draining (after writes were blocked, when they
	// are): the shard's subtask replays up to and including it.
	DrainTS bson.Timestamp `bson:"drainTS,omitempty"`
	// Drained is set once the subtask's saved checkpoint reached DrainTS
	// and it stopped replaying.
	Drained bool `bson:"drained,omitempty"`
}

// CutoverOf returns the shard's part in the cut-over that started at
// startedAt: zero (nothing done yet) when the record has none or one of
// another attempt.
func (r ShardRecord) CutoverOf(startedAt time.Time) ShardCutover {
	if r.Cutover == nil || !r.Cutover.StartedAt.Equal(startedAt) {
		return ShardCutover{StartedAt: startedAt}
	}
	return *r.Cutover
}

// SetShardCutover records a shard's part in the cut-over, replacing what
// was recorded. The writers take turns, so none loses another's field:
// the shard's subtask records CaughtUp, then the worker that runs the
// cut-over records DrainTS once every shard caught up, then the subtask
// records Drained once it reached DrainTS. It is kept in
// CutoversCollection (_id the shard record's), apart from the shard
// record, for the reason the task's cut-over is: the subtask saves its
// checkpoint in the shard record while the cut-over runs, and a server
// that updates a document by reading it and writing it back whole
// (FerretDB v1) would let one write undo the other (a saved checkpoint
// moved back below the drain position, or a drain position lost).
func (s *Store) SetShardCutover(ctx context.Context, shard string, c ShardCutover) error {
	_, err := s.db.Collection(CutoversCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.shardID(shard)}},
		bson.D{{Key: "$set", Value: shardCutoverDoc{Task: s.task, Shard: shard, Cutover: c, UpdatedAt: time.Now().UTC()}}},
		options.UpdateOne().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("checkpoint: record the cut-over of shard %s: %w", shard, err)
	}
	return nil
}

// shardCutoverDoc is a shard's document in CutoversCollection.
type shardCutoverDoc struct {
	Task      string       `bson:"task"`
	Shard     string       `bson:"shard"`
	Cutover   ShardCutover `bson:"shardCutover"`
	UpdatedAt time.Time    `bson:"updatedAt"`
}

// shardCutovers reads the shards' parts in the task's cut-over, by shard.
func (s *Store) shardCutovers(ctx context.Context, shard string) (map[string]ShardCutover, error) {
	filter := bson.D{{Key: "task", Value: s.task}, {Key: "shard", Value: bson.D{{Key: "$exists", Value: true}}}}
	if shard != "" {
		filter = bson.D{{Key: "_id", Value: s.shardID(shard)}}
	}
	cur, err := s.db.Collection(CutoversCollection).Find(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read the shards' cut-over: %w", err)
	}
	var docs []shardCutoverDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("checkpoint: read the shards' cut-over: %w", err)
	}
	out := make(map[string]ShardCutover, len(docs))
	for _, d := range docs {
		out[d.Shard] = d.Cutover
	}
	return out, nil
}
