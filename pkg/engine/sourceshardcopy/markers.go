package sourceshardcopy

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// rangeDeletions is the namespace of the range deletion tasks whose
// writes mark a migration on its recipient (see pkg/engine/replay's
// migration markers).
const rangeDeletions = "config.rangeDeletions"

// Migrated reports whether shard name's oplog, after from, holds a marker
// of a migration of ns into it: the insert of its pending range deletion
// task (nss ns, donorShardId another shard), or the delete or update
// that ends a task whose insert names ns so. Read after a table read,
// with from the shard's newest ts before the table read before it, it
// finds every migration into the shard that committed between the two
// reads: its end marker follows its commit, and the shard ended it before
// it could give the chunk on (docs/sharded.md, "Per-shard copy").
func Migrated(ctx context.Context, shard *mongo.Client, name, ns string, from bson.Timestamp) (bool, error) {
	oplog := shard.Database("local").Collection("oplog.rs")
	cur, err := oplog.Find(ctx, bson.D{{Key: "ns", Value: rangeDeletions}, {Key: "ts", Value: bson.D{{Key: "$gt", Value: from}}}})
	if err != nil {
		return false, fmt.Errorf("read the migration markers of %s: %w", name, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var ended bson.A
	for cur.Next(ctx) {
		e := cur.Current
		op, _ := e.Lookup("op").StringValueOK()
		switch op {
		case "i":
			if into(e.Lookup("o").Document(), name, ns) {
				return true, nil
			}
		case "d":
			ended = append(ended, e.Lookup("o", "_id"))
		case "u":
			ended = append(ended, e.Lookup("o2", "_id"))
		}
	}
	if err := cur.Err(); err != nil || len(ended) == 0 {
		return false, err
	}
	n, err := oplog.CountDocuments(ctx, bson.D{{Key: "ns", Value: rangeDeletions}, {Key: "op", Value: "i"},
		{Key: "o._id", Value: bson.D{{Key: "$in", Value: ended}}}, {Key: "o.nss", Value: ns},
		{Key: "o.donorShardId", Value: bson.D{{Key: "$ne", Value: name}}}})
	if err != nil {
		return false, fmt.Errorf("read the migration markers of %s: %w", name, err)
	}
	return n > 0, nil
}

// into reports whether a range deletion task is a recipient's of a
// migration of ns into shard name (a donor's own task names itself).
func into(task bson.Raw, name, ns string) bool {
	nss, _ := task.Lookup("nss").StringValueOK()
	donor, _ := task.Lookup("donorShardId").StringValueOK()
	return nss == ns && donor != name
}
