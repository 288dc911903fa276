package shard

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Position is what one subtask publishes about its shard's oplog.
type Position struct {
	// Shard is the shard's name (its replica set name in config.shards).
	Shard string `bson:"shard" json:"shard"`
	// Read is the ts of the last entry read from the shard's oplog,
	// no-ops included.
	Read bson.Timestamp `bson:"read" json:"read"`
	// Applied is the subtask's durable position: every entry of the
	// shard's oplog at or below it is applied on the target and saved in
	// the subtask's checkpoint, so a restart never goes back below it.
	Applied bson.Timestamp `bson:"applied" json:"applied"`
	// Retired is set once a removed shard's oplog is read to its end and
	// applied: the subtask holds nobody back any more.
	Retired bool `bson:"retired" json:"retired"`
}

// Board is where the subtasks of one task publish their positions and read
// each other's.
type Board interface {
	// Publish records p as its shard's latest position.
	Publish(ctx context.Context, p Position) error
	// Positions returns the latest position of every subtask that has
	// published, in no particular order.
	Positions(ctx context.Context) ([]Position, error)
}
