package board

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// PositionsCollection holds one document per subtask in the checkpoint
// database.
const PositionsCollection = "shard_positions"

// DefaultRefresh is how long TargetBoard serves the positions it read
// before it reads them again.
const DefaultRefresh = time.Second

// TargetBoard is a Board for subtasks in separate processes: one document
// per subtask, {_id: "<task>/<shard>", task, shard, read, applied,
// retired, waiting, updatedAt}, in the target's checkpoint database.
// Publish writes through; Positions reads every subtask's document at most
// once per Refresh and serves the copy in between.
type TargetBoard struct {
	coll *mongo.Collection
	task string
	// Refresh is how long positions read are served; DefaultRefresh when
	// zero.
	Refresh time.Duration

	mu     sync.Mutex
	cache  []Position
	readAt time.Time
}

// NewTargetBoard returns the board of task in database db of the target.
func NewTargetBoard(target *mongo.Client, db, task string) *TargetBoard {
	return &TargetBoard{coll: target.Database(db).Collection(PositionsCollection), task: task}
}

// positionDoc is a position as stored.
type positionDoc struct {
	ID        string    `bson:"_id"`
	Task      string    `bson:"task"`
	UpdatedAt time.Time `bson:"updatedAt"`
	Position  `bson:",inline"`
}

// Publish implements Board.
func (b *TargetBoard) Publish(ctx context.Context, p Position) error {
	doc := positionDoc{ID: b.task + "/" + p.Shard, Task: b.task, UpdatedAt: time.Now().UTC().Truncate(time.Millisecond), Position: p}
	if _, err := b.coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: doc.ID}}, doc, options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("shard board: publish the position of shard %s: %w", p.Shard, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.cache {
		if b.cache[i].Shard == p.Shard {
			b.cache[i] = p
			return nil
		}
	}
	if b.cache != nil {
		b.cache = append(b.cache, p)
	}
	return nil
}

// Positions implements Board. The result is sorted by shard name and is
// at most Refresh old.
func (b *TargetBoard) Positions(ctx context.Context) ([]Position, error) {
	refresh := b.Refresh
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	b.mu.Lock()
	if b.cache != nil && time.Since(b.readAt) < refresh {
		out := append([]Position(nil), b.cache...)
		b.mu.Unlock()
		return out, nil
	}
	b.mu.Unlock()
	cur, err := b.coll.Find(ctx, bson.D{{Key: "task", Value: b.task}}, options.Find().SetSort(bson.D{{Key: "shard", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("shard board: read positions: %w", err)
	}
	var docs []positionDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("shard board: read positions: %w", err)
	}
	out := make([]Position, len(docs))
	for i, d := range docs {
		out[i] = d.Position
	}
	b.mu.Lock()
	b.cache, b.readAt = append(make([]Position, 0, len(out)), out...), time.Now()
	b.mu.Unlock()
	return out, nil
}

// Check that TargetBoard is a Board.
var _ Board = (*TargetBoard)(nil)
