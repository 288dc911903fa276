package source

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ErrNoOplog means a task that replays the oplog reads from a server that
// keeps none (a standalone mongod, a FerretDB without local.oplog.rs): it
// would copy, then wait for changes that never come.
var ErrNoOplog = errors.New("no oplog to replay")

// HasOplog reports whether the server keeps an oplog (local.oplog.rs). It
// asks listCollections for that one name, which a user allowed to read
// the oplog may run (authorizedCollections).
func HasOplog(ctx context.Context, client *mongo.Client) (bool, error) {
	names, err := client.Database("local").ListCollectionNames(ctx, bson.D{{Key: "name", Value: "oplog.rs"}},
		options.ListCollections().SetAuthorizedCollections(true))
	if err != nil {
		return false, fmt.Errorf("look for the source's oplog (listCollections on local): %w", err)
	}
	return len(names) > 0, nil
}

// NoOplogError is ErrNoOplog for a task whose replay is described by
// what ("mode: fullAndIncremental", ...) and a server without an oplog
// ("the source", "shard rs1 of the source"), with the fix.
func NoOplogError(what, server string) error {
	return fmt.Errorf("%s: %w: %s has no local.oplog.rs (a standalone server, or a FerretDB without an oplog, writes none); nothing was written: "+
		"run it as a replica set (a one-member replica set will do: start mongod with --replSet and run rs.initiate()), "+
		"or set mode: full to copy once without replaying changes", what, ErrNoOplog, server)
}
