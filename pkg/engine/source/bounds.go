package source

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// OplogBounds returns the ts of the oldest and the newest entry a source's
// oplog holds (both zero when it is empty): the window a checkpoint must
// stay inside for replay to resume.
func OplogBounds(ctx context.Context, client *mongo.Client) (oldest, newest bson.Timestamp, err error) {
	if oldest, err = edgeTS(ctx, client, 1); err != nil {
		return oldest, newest, err
	}
	newest, err = edgeTS(ctx, client, -1)
	return oldest, newest, err
}

// OplogSide is one oplog to watch and where its task resumes on it: the
// source's, or a shard's.
type OplogSide struct {
	// Shard names the shard; empty for a replica set.
	Shard  string
	Client *mongo.Client
	// From is the checkpoint; zero skips the oplog (no position yet).
	From       bson.Timestamp
	SinceEmpty bool
	// ByClock: the newest position is the server's clock (the engine's
	// readWindow).
	ByClock bool
}
