package targetsharding

import (
	"slices"

	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/bsonorder"
)

// readAll reads every document of a config collection matching filter,
// in sort order.
func readAll(ctx context.Context, router *mongo.Client, coll string, filter, sort bson.D) ([]bson.Raw, error) {
	opts := options.Find()
	if sort != nil {
		opts.SetSort(sort)
	}
	cur, err := router.Database("config").Collection(coll).Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("read config.%s: %w; the user needs read access to the config database (role clusterMonitor)", coll, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var out []bson.Raw
	for cur.Next(ctx) {
		out = append(out, append(bson.Raw(nil), cur.Current...))
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read config.%s: %w", coll, err)
	}
	return out, nil
}

// ReadLayout reads how ns is sharded, through a mongos: its
// config.collections entry, chunks (by UUID from 5.0, by ns on 4.4) and
// zone ranges. It reports false when the collection is not sharded.
func ReadLayout(ctx context.Context, router *mongo.Client, ns string) (Layout, bool, error) {
	docs, err := readAll(ctx, router, "collections", bson.D{{Key: "_id", Value: ns}}, nil)
	if err != nil || len(docs) == 0 {
		return Layout{}, false, err
	}
	l, ok, err := ParseCollection(docs[0])
	if err != nil || !ok {
		return Layout{}, false, err
	}
	byMin := bson.D{{Key: "min", Value: 1}}
	var chunks []bson.Raw
	if l.UUID != nil {
		if chunks, err = readAll(ctx, router, "chunks", bson.D{{Key: "uuid", Value: *l.UUID}}, byMin); err != nil {
			return Layout{}, false, err
		}
	}
	if len(chunks) == 0 {
		if chunks, err = readAll(ctx, router, "chunks", bson.D{{Key: "ns", Value: ns}}, byMin); err != nil {
			return Layout{}, false, err
		}
	}
	for _, raw := range chunks {
		c, err := ParseChunk(raw)
		if err != nil {
			return Layout{}, false, err
		}
		l.Chunks = append(l.Chunks, c)
	}
	tags, err := readAll(ctx, router, "tags", bson.D{{Key: "ns", Value: ns}}, byMin)
	if err != nil {
		return Layout{}, false, err
	}
	for _, raw := range tags {
		_, z, err := ParseZoneRange(raw)
		if err != nil {
			return Layout{}, false, err
		}
		l.Zones = append(l.Zones, z)
	}
	sortByMin(l)
	return l, true, nil
}

// ReadKey reads how the cluster behind router shards ns: its shard key,
// from config.collections alone (no chunks). It reports false when ns is
// not sharded.
func ReadKey(ctx context.Context, router *mongo.Client, ns string) (Key, bool, error) {
	docs, err := readAll(ctx, router, "collections", bson.D{{Key: "_id", Value: ns}}, nil)
	if err != nil || len(docs) == 0 {
		return nil, false, err
	}
	l, ok, err := ParseCollection(docs[0])
	if err != nil || !ok {
		return nil, false, err
	}
	return l.Key, true, nil
}

// sortByMin puts chunks and zone ranges in shard-key order (the server's
// sort on min is BSON order, which is the key order for the bounds a
// collection's chunks have; sorting here keeps recorded inputs honest).
func sortByMin(l Layout) {
	sortBounds(l.Chunks, func(c Chunk) bson.Raw { return c.Min })
	sortBounds(l.Zones, func(z ZoneRange) bson.Raw { return z.Min })
}

// Cluster is a sharded target: its shards with their zones, and its
// server version.
type Cluster struct {
	Shards []Shard
	// Major is the server's major version (moveRange from 6).
	Major int
}

// ReadCluster reads a sharded cluster's shards and their zones through a
// mongos; major is its server's major version.
func ReadCluster(ctx context.Context, router *mongo.Client, major int) (Cluster, error) {
	docs, err := readAll(ctx, router, "shards", bson.D{}, bson.D{{Key: "_id", Value: 1}})
	if err != nil {
		return Cluster{}, err
	}
	c := Cluster{Major: major}
	for _, raw := range docs {
		s, err := ParseShard(raw)
		if err != nil {
			return Cluster{}, err
		}
		c.Shards = append(c.Shards, s)
	}
	if len(c.Shards) == 0 {
		return Cluster{}, fmt.Errorf("the target is a mongos but config.shards lists no shard")
	}
	return c, nil
}

// ReadPrimary reads the primary shard of database db (where an unsharded
// collection of it lives, and where shardCollection puts the first
// chunk).
func ReadPrimary(ctx context.Context, router *mongo.Client, db string) (string, error) {
	docs, err := readAll(ctx, router, "databases", bson.D{{Key: "_id", Value: db}}, nil)
	if err != nil || len(docs) == 0 {
		return "", err
	}
	p, _ := docs[0].Lookup("primary").StringValueOK()
	return p, nil
}

// sortBounds sorts s by the shard-key order of bound(x).
func sortBounds[T any](s []T, bound func(T) bson.Raw) {
	slices.SortStableFunc(s, func(a, b T) int { return compareBounds(bound(a), bound(b)) })
}

// compareBounds compares two bounds of one shard key in the server's
// order.
func compareBounds(a, b bson.Raw) int {
	return bsonorder.Compare(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: a}, bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: b})
}
