package ferretdb

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// orphanRange is a chunk a shard gave away while keeping its documents
// (Cluster.KeepOrphans): keys [lo, hi) of ns on shard.
type orphanRange struct {
	ns     string
	shard  int
	lo, hi int64
}

// RunRangeDeleter removes every orphan the migrations left on their
// donors (Cluster.KeepOrphans), as a shard's range deleter does: each
// donor's deletes are fromMigrate entries in its oplog.
func (c *Cluster) RunRangeDeleter(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer nextSecond()
	return c.deleteOrphans(context.WithoutCancel(ctx), func(orphanRange) bool { return true })
}

// Orphans returns how many orphans the donors hold.
func (c *Cluster) Orphans(ctx context.Context) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, o := range c.orphans {
		k, err := c.coll(c.clients[o.shard], o.ns).CountDocuments(ctx, idRange(o.lo, o.hi))
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}

func idRange(lo, hi int64) bson.D {
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$gte", Value: lo}, {Key: "$lt", Value: hi}}}}
}

// deleteOrphans removes the orphan ranges that match, in batches of at
// most migrationBatch, each within its own second (see unlogged).
func (c *Cluster) deleteOrphans(ctx context.Context, match func(orphanRange) bool) error {
	var keep []orphanRange
	for _, o := range c.orphans {
		if !match(o) {
			keep = append(keep, o)
			continue
		}
		if err := c.deleteRange(ctx, o); err != nil {
			return err
		}
	}
	c.orphans = keep
	return nil
}

func (c *Cluster) deleteRange(ctx context.Context, o orphanRange) error {
	var docs []bson.D
	cur, err := c.coll(c.clients[o.shard], o.ns).Find(ctx, idRange(o.lo, o.hi))
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil {
		return fmt.Errorf("range deleter of %s on %s: %w", o.ns, c.Names[o.shard], err)
	}
	for len(docs) > 0 {
		n := min(len(docs), migrationBatch)
		ids := make(bson.A, n)
		dels := make([]bson.D, n)
		for i, d := range docs[:n] {
			ids[i] = d[0].Value
			dels[i] = bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: o.ns}, {Key: "o", Value: bson.D{d[0]}}, {Key: "fromMigrate", Value: true}}
		}
		sec := nextSecond()
		err := c.unlogged(ctx, o.ns, ids, sec, []int{o.shard}, func() error {
			_, err := c.coll(c.clients[o.shard], o.ns).DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
			return err
		})
		if err != nil {
			return err
		}
		if err := c.inject(ctx, o.shard, max(sec, uint32(time.Now().Unix())), dels); err != nil {
			return err
		}
		// The newest entry a no-op, as after a migration step (moveBatch).
		noop := []bson.D{{{Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "periodic noop"}}}}}
		if err := c.inject(ctx, o.shard, uint32(time.Now().Unix()), noop); err != nil {
			return err
		}
		if late := time.Since(time.Unix(int64(sec), 0)); late > 2500*time.Millisecond {
			return fmt.Errorf("a range deletion step of %d documents was logged only %s after its second began: the stand-in needs it under 2.5s", n, late)
		}
		docs = docs[n:]
	}
	return nil
}
