package topology

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
)

// Hello asks a server what it is.
func Hello(ctx context.Context, c *mongo.Client) (Kind, error) {
	raw, err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		return KindStandalone, fmt.Errorf("hello: %w", err)
	}
	return ParseHello(raw), nil
}

// ReadShards reads config.shards through the router and applies the
// overrides of source.shards[].
func ReadShards(ctx context.Context, router *mongo.Client, overrides []config.Shard) ([]Shard, error) {
	cur, err := router.Database("config").Collection("shards").Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read config.shards: %w; the source user needs read access to the config database (role clusterMonitor)", err)
	}
	var docs []bson.Raw
	for cur.Next(ctx) {
		docs = append(docs, append(bson.Raw(nil), cur.Current...))
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read config.shards: %w", err)
	}
	_ = cur.Close(ctx)
	shards, err := ParseShards(docs, overrides)
	if err != nil {
		return nil, err
	}
	if len(shards) == 0 {
		return nil, fmt.Errorf("%w: config.shards is empty; point source.uri at the cluster's mongos", ErrNoShards)
	}
	return shards, nil
}

// Discover says whether the source is sharded (from source.kind and
// hello) and, when it is, lists its shards.
func Discover(ctx context.Context, router *mongo.Client, source config.Endpoint) (sharded bool, shards []Shard, err error) {
	kind, err := Hello(ctx, router)
	if err != nil {
		return false, nil, fmt.Errorf("source: %w", err)
	}
	if sharded, err = IsSharded(source.Kind, kind); err != nil || !sharded {
		return false, nil, err
	}
	shards, err = ReadShards(ctx, router, source.Shards)
	return true, shards, err
}

// Open connects to one shard's replica set with the source's credentials
// and TLS.
func Open(ctx context.Context, source config.Endpoint, s Shard) (*mongo.Client, error) {
	c, err := conn.Open(ctx, "source.shards["+s.Name+"]", Endpoint(source, s), conn.Options{AppName: "mongoferry"})
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", s.Name, err)
	}
	return c, nil
}
