package catalog

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Stats are a collection's size figures from collStats.
type Stats struct {
	Count      int64   `bson:"count"`
	AvgObjSize float64 `bson:"avgObjSize"`
}

// CollStats returns a collection's document count and average document
// size from collStats, which answers from metadata on servers where a
// count reads every document (FerretDB).
func CollStats(ctx context.Context, coll *mongo.Collection) (Stats, error) {
	var s Stats
	err := coll.Database().RunCommand(ctx, bson.D{{Key: "collStats", Value: coll.Name()}}).Decode(&s)
	return s, err
}

// AvgObjSize returns the collection's average document size in bytes, or 0
// when the server does not say.
func AvgObjSize(ctx context.Context, coll *mongo.Collection) int64 {
	s, err := CollStats(ctx, coll)
	if err != nil {
		return 0
	}
	return int64(s.AvgObjSize)
}

// BatchSizeFor returns a cursor batch size, in documents, that keeps one
// batch of coll near maxBytes: at least 1 and at most maxDocs. Servers
// cap a reply at 16 MiB, but not all of them (FerretDB builds the whole
// batch it was asked for), so readers size batches themselves.
func BatchSizeFor(ctx context.Context, coll *mongo.Collection, maxBytes int64, maxDocs int) int32 {
	n := int64(maxDocs)
	if avg := AvgObjSize(ctx, coll); avg > 0 {
		n = min(n, max(maxBytes/avg, 1))
	}
	return int32(n)
}
