package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// Collections in the checkpoint database.
const (
	TasksCollection  = "tasks"
	PlansCollection  = "copy_plans"
	RangesCollection = "copy_ranges"
	// RangeLeasesCollection holds the copy's range leases and done
	// records (pkg/engine/rangelease). It is named here, not imported, so
	// that the manager, which links this package for the cleanup, links
	// no more of the MongoDB client than the cleanup needs.
	RangeLeasesCollection = "rangeleases"
	// ShardCopyCollection holds the per-shard copy's passes (their
	// tables and range plans, pkg/engine/sourceshardcopy).
	ShardCopyCollection = "shardcopy_passes"
	// HeldCollection keeps the target options held back until cut-over
	// (package holdback).
	HeldCollection = "held_options"
)

// Range states.
const (
	RangePending = "pending"
	RangeStarted = "started"
	RangeDone    = "done"
)

// TaskRecord is a task's top-level progress.
type TaskRecord struct {
	ID        string    `bson:"_id"`
	Phase     string    `bson:"phase"`
	CopyDone  bool      `bson:"copyDone"`
	StartedAt time.Time `bson:"startedAt"`
	UpdatedAt time.Time `bson:"updatedAt"`
	// Runs counts starts of the task, 1 on the first.
	Runs int `bson:"runs"`
	// StartTS is the source's newest oplog position recorded before the
	// copy began: replay starts after it.
	StartTS bson.Timestamp `bson:"startTS,omitempty"`
	// StartOnEmptyOplog: the source's oplog was empty when StartTS was
	// recorded, so StartTS is the source's time then, not an entry's ts.
	StartOnEmptyOplog bool `bson:"startOnEmptyOplog,omitempty"`
	// AppliedTS is the replay checkpoint: every entry at or below it has
	// been applied to the target.
	AppliedTS bson.Timestamp `bson:"appliedTS,omitempty"`
	// AppliedEntry is the newest oplog entry at or below AppliedTS that
	// replay read, by ts and term, saved with it: a resumed run checks the
	// source still holds it (source.CheckRollback). Nil in checkpoints
	// saved before it was kept, or from a reader that does not say
	// (EntryLog).
	AppliedEntry *OpTime `bson:"appliedEntry,omitempty"`
	// CopyEndTS is the source's newest oplog position when the full copy
	// finished: replayed entries up to it may meet documents the copy
	// already holds in a newer state.
	CopyEndTS bson.Timestamp `bson:"copyEndTS,omitempty"`
	// CheckpointAt is when AppliedTS was last saved.
	CheckpointAt time.Time `bson:"checkpointAt,omitempty"`
	// Cutover is how far a requested cut-over got (nil before one). Task
	// fills it from CutoversCollection; the task record's own field is
	// read only for records written before that collection existed.
	Cutover *CutoverRecord `bson:"cutover,omitempty"`
	// Selection is the task's namespaces (include, exclude, rename) when
	// the record was created; nil in records written before it was kept.
	Selection *config.Namespaces `bson:"selection,omitempty"`
}

// HasStart reports whether a replay start position was recorded.
func (r TaskRecord) HasStart() bool { return !r.StartTS.IsZero() }

// ResumeTS is where replay continues from: the checkpoint, or the start
// position when nothing was applied yet.
func (r TaskRecord) ResumeTS() bson.Timestamp {
	if !r.AppliedTS.IsZero() {
		return r.AppliedTS
	}
	return r.StartTS
}

// ResumesFromEmptyOplog reports whether ResumeTS is the start position
// taken on an empty oplog (no entry has that ts): the oplog window is then
// checked as source.CheckWindow's sinceEmpty says.
func (r TaskRecord) ResumesFromEmptyOplog() bool {
	return r.StartOnEmptyOplog && r.ResumeTS() == r.StartTS
}

// Plan is one namespace's full-copy plan, written once the target
// collection is prepared and its ranges are saved.
type Plan struct {
	ID        string `bson:"_id"`
	Task      string `bson:"task"`
	NS        string `bson:"ns"`
	Ranges    int    `bson:"ranges"`
	Estimated int64  `bson:"estimated"`
	// IndexesBuilt is set once the target's indexes exist.
	IndexesBuilt bool `bson:"indexesBuilt"`
	// PerShard is set for a collection of a sharded source copied shard
	// by shard: its one range stands for the whole copy, whose own ranges
	// are leased per shard and pass (package rangelease).
	PerShard bool `bson:"perShard,omitempty"`
}

// Range is one _id range of a namespace and how far its copy got.
type Range struct {
	ID    string `bson:"_id"`
	Task  string `bson:"task"`
	NS    string `bson:"ns"`
	Index int    `bson:"index"`
	// Filter is the find filter as raw BSON bytes: stored as binary,
	// because servers refuse stored field names such as $gte.
	Filter []byte `bson:"filter"`
	// Describe says in words what the range covers, for logs.
	Describe string `bson:"describe"`
	State    string `bson:"state"`
	Attempts int    `bson:"attempts"`
	Docs     int64  `bson:"docs"`
	Bytes    int64  `bson:"bytes"`
}

// OpTime is an oplog entry's position: its ts and its term t (-1 for an
// entry without one).
type OpTime struct {
	TS bson.Timestamp `bson:"ts"`
	T  int64          `bson:"t"`
}

// EntryLog says which oplog entries replay read: EntryAt returns the
// newest one at or below ts (ok false when it knows none). The tailer
// implements it.
type EntryLog interface {
	EntryAt(ts bson.Timestamp) (OpTime, bool)
}

// Store reads and writes one task's progress.
type Store struct {
	db   *mongo.Database
	task string
	// shard, when set, scopes SaveApplied to one shard's subtask (see
	// ForShard).
	shard string
	// entries, when set, names the entry saved with each checkpoint (see
	// WithEntries).
	entries EntryLog
}

// WithEntries returns a store whose checkpoints are saved with the entry
// l names at or below them (TaskRecord.AppliedEntry,
// ShardRecord.AppliedEntry).
func (s *Store) WithEntries(l EntryLog) *Store {
	c := *s
	c.entries = l
	return &c
}

// appliedSet is the $set of a checkpoint at ts.
func (s *Store) appliedSet(ts bson.Timestamp) bson.D {
	set := bson.D{{Key: "appliedTS", Value: ts}, {Key: "checkpointAt", Value: time.Now().UTC()}}
	if s.entries != nil {
		if e, ok := s.entries.EntryAt(ts); ok {
			set = append(set, bson.E{Key: "appliedEntry", Value: e})
		}
	}
	return set
}

// NewStore returns the store of task in database db on the target.
func NewStore(target *mongo.Client, db, task string) *Store {
	return &Store{db: target.Database(db), task: task}
}

// Start loads the task record, creating it on the first run, and counts
// this run.
func (s *Store) Start(ctx context.Context) (TaskRecord, error) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	var rec TaskRecord
	err := s.db.Collection(TasksCollection).FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: s.task}},
		bson.D{
			{Key: "$setOnInsert", Value: bson.D{{Key: "startedAt", Value: now}, {Key: "phase", Value: "Pending"}, {Key: "copyDone", Value: false}}},
			{Key: "$set", Value: bson.D{{Key: "updatedAt", Value: now}}},
			{Key: "$inc", Value: bson.D{{Key: "runs", Value: 1}}},
		},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After),
	).Decode(&rec)
	if err != nil {
		return rec, fmt.Errorf("checkpoint: load task %s: %w", s.task, err)
	}
	return s.withCutover(ctx, rec)
}

// SetSelection records the task's namespaces, unless the record holds
// them already (it keeps the first run's).
func (s *Store) SetSelection(ctx context.Context, ns config.Namespaces) error {
	_, err := s.db.Collection(TasksCollection).UpdateOne(ctx,
		bson.D{{Key: "_id", Value: s.task}, {Key: "selection", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "selection", Value: ns}}}})
	if err != nil {
		return fmt.Errorf("checkpoint: record the namespaces: %w", err)
	}
	return nil
}

// SetPhase records the task's phase; copyDone is set once and never unset.
func (s *Store) SetPhase(ctx context.Context, phase string, copyDone bool) error {
	set := bson.D{{Key: "phase", Value: phase}, {Key: "updatedAt", Value: time.Now().UTC()}}
	if copyDone {
		set = append(set, bson.E{Key: "copyDone", Value: true})
	}
	_, err := s.db.Collection(TasksCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.task}}, bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return fmt.Errorf("checkpoint: set phase: %w", err)
	}
	return nil
}

// SetStartTS records the replay start position, and whether the source's
// oplog was empty then; an existing one is kept. It returns the record.
func (s *Store) SetStartTS(ctx context.Context, ts bson.Timestamp, emptyOplog bool) (TaskRecord, error) {
	set := bson.D{{Key: "startTS", Value: ts}}
	if emptyOplog {
		set = append(set, bson.E{Key: "startOnEmptyOplog", Value: true})
	}
	_, err := s.db.Collection(TasksCollection).UpdateOne(ctx,
		bson.D{{Key: "_id", Value: s.task}, {Key: "startTS", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return TaskRecord{}, fmt.Errorf("checkpoint: record start position: %w", err)
	}
	return s.Task(ctx)
}

// MarkCopyDone records that the full copy finished, and the source's newest
// oplog position at that moment.
func (s *Store) MarkCopyDone(ctx context.Context, endTS bson.Timestamp) error {
	_, err := s.db.Collection(TasksCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.task}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "copyDone", Value: true}, {Key: "copyEndTS", Value: endTS}, {Key: "updatedAt", Value: time.Now().UTC()}}}})
	if err != nil {
		return fmt.Errorf("checkpoint: mark copy done: %w", err)
	}
	return nil
}

// SaveApplied records the replay checkpoint: the task's, or the shard's
// for a store from ForShard.
func (s *Store) SaveApplied(ctx context.Context, ts bson.Timestamp) error {
	if s.shard != "" {
		return s.saveShardApplied(ctx, ts)
	}
	_, err := s.db.Collection(TasksCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.task}},
		bson.D{{Key: "$set", Value: s.appliedSet(ts)}})
	if err != nil {
		return fmt.Errorf("checkpoint: save %d,%d: %w", ts.T, ts.I, err)
	}
	return nil
}

// Task reads the task record.
func (s *Store) Task(ctx context.Context) (TaskRecord, error) {
	var rec TaskRecord
	if err := s.db.Collection(TasksCollection).FindOne(ctx, bson.D{{Key: "_id", Value: s.task}}).Decode(&rec); err != nil {
		return rec, fmt.Errorf("checkpoint: read task %s: %w", s.task, err)
	}
	return s.withCutover(ctx, rec)
}

// withCutover sets rec's cut-over from CutoversCollection, when that has
// one (see TaskRecord.Cutover).
func (s *Store) withCutover(ctx context.Context, rec TaskRecord) (TaskRecord, error) {
	c, err := s.cutover(ctx)
	if err != nil {
		return rec, err
	}
	if c != nil {
		rec.Cutover = c
	}
	return rec, nil
}

// Plans returns the saved plans by namespace.
func (s *Store) Plans(ctx context.Context) (map[string]Plan, error) {
	cur, err := s.db.Collection(PlansCollection).Find(ctx, bson.D{{Key: "task", Value: s.task}})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read plans: %w", err)
	}
	var plans []Plan
	if err := cur.All(ctx, &plans); err != nil {
		return nil, fmt.Errorf("checkpoint: read plans: %w", err)
	}
	out := make(map[string]Plan, len(plans))
	for _, p := range plans {
		out[p.NS] = p
	}
	return out, nil
}

// SavePlan stores a namespace's ranges, then its plan. Leftover ranges of
// an earlier, unfinished planning of the namespace are replaced: nothing
// of a namespace is copied before its plan is saved.
func (s *Store) SavePlan(ctx context.Context, p Plan, ranges []Range) error {
	p.ID, p.Task = s.task+"/"+p.NS, s.task
	if _, err := s.db.Collection(RangesCollection).DeleteMany(ctx, bson.D{{Key: "task", Value: s.task}, {Key: "ns", Value: p.NS}}); err != nil {
		return fmt.Errorf("checkpoint: clear ranges of %s: %w", p.NS, err)
	}
	docs := make([]any, len(ranges))
	for i := range ranges {
		r := ranges[i]
		r.ID = fmt.Sprintf("%s/%s/%06d", s.task, p.NS, r.Index)
		r.Task, r.NS, r.State = s.task, p.NS, RangePending
		docs[i] = r
	}
	if len(docs) > 0 {
		if _, err := s.db.Collection(RangesCollection).InsertMany(ctx, docs); err != nil {
			return fmt.Errorf("checkpoint: save ranges of %s: %w", p.NS, err)
		}
	}
	if _, err := s.db.Collection(PlansCollection).ReplaceOne(ctx, bson.D{{Key: "_id", Value: p.ID}}, p, options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("checkpoint: save plan of %s: %w", p.NS, err)
	}
	return nil
}

// MarkIndexesBuilt records that a namespace's indexes exist on the target.
func (s *Store) MarkIndexesBuilt(ctx context.Context, ns string) error {
	_, err := s.db.Collection(PlansCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: s.task + "/" + ns}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "indexesBuilt", Value: true}}}})
	if err != nil {
		return fmt.Errorf("checkpoint: mark indexes of %s: %w", ns, err)
	}
	return nil
}

// Ranges returns every range of the task, ordered by namespace and index.
func (s *Store) Ranges(ctx context.Context) ([]Range, error) {
	cur, err := s.db.Collection(RangesCollection).Find(ctx, bson.D{{Key: "task", Value: s.task}},
		options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read ranges: %w", err)
	}
	var out []Range
	if err := cur.All(ctx, &out); err != nil {
		return nil, fmt.Errorf("checkpoint: read ranges: %w", err)
	}
	return out, nil
}

// MarkStarted records that a range's copy began (again).
func (s *Store) MarkStarted(ctx context.Context, id string) error {
	return s.updateRange(ctx, id, bson.D{
		{Key: "$set", Value: bson.D{{Key: "state", Value: RangeStarted}}},
		{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}},
	})
}

// MarkStartedMany marks every range of ids that is pending as started at
// once (a done or started range is left as it is): a shared copy marks
// each range it claims before writing any of it, so that a later copy in
// one process clears what is there before it copies it (fullsync's
// readRange).
func (s *Store) MarkStartedMany(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := s.db.Collection(RangesCollection).UpdateMany(ctx,
		bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "state", Value: RangePending}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: RangeStarted}}}, {Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}}})
	if err != nil {
		return fmt.Errorf("checkpoint: mark %d ranges started: %w", len(ids), err)
	}
	return nil
}

// MarkDone records that every document of a range is on the target.
func (s *Store) MarkDone(ctx context.Context, id string, docs, bytes int64) error {
	return s.updateRange(ctx, id, bson.D{{Key: "$set", Value: bson.D{
		{Key: "state", Value: RangeDone}, {Key: "docs", Value: docs}, {Key: "bytes", Value: bytes},
	}}})
}

func (s *Store) updateRange(ctx context.Context, id string, update bson.D) error {
	r, err := s.db.Collection(RangesCollection).UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update)
	if err != nil {
		return fmt.Errorf("checkpoint: update range %s: %w", id, err)
	}
	if r.MatchedCount == 0 {
		return fmt.Errorf("checkpoint: range %s: %w", id, ErrNotFound)
	}
	return nil
}

// ErrNotFound means a progress record is missing.
var ErrNotFound = errors.New("progress record not found")

// Drop removes everything the task keeps, its range leases and done
// records (rangelease) and per-shard copy passes included.
func (s *Store) Drop(ctx context.Context) error {
	for _, c := range []string{RangesCollection, PlansCollection, ShardsCollection, HeldCollection, LeasesCollection, CutoversCollection, RangeLeasesCollection, ShardCopyCollection} {
		if _, err := s.db.Collection(c).DeleteMany(ctx, bson.D{{Key: "task", Value: s.task}}); err != nil {
			return fmt.Errorf("checkpoint: drop %s: %w", c, err)
		}
	}
	if _, err := s.db.Collection(TasksCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: s.task}}); err != nil {
		return fmt.Errorf("checkpoint: drop task: %w", err)
	}
	return nil
}
