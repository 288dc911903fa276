package fullsync

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// PerShard copies a sharded source's collections shard by shard
// (docs/sharded.md, "Per-shard copy"): the engine's, which knows the
// shards and the workers. The Copier still prepares each collection on
// the target, builds its indexes and records its copy done; the
// collection's plan holds one range that stands for the whole per-shard
// copy.
type PerShard interface {
	// Takes reports whether coll is copied shard by shard (a collection
	// sharded on a ranged key) and, if so, its estimated document count.
	Takes(ctx context.Context, coll catalog.Collection) (bool, int64, error)
	// Copy copies coll shard by shard until every shard's part is
	// recorded done, by this process or by other workers; written is told
	// each batch this process writes.
	Copy(ctx context.Context, coll catalog.Collection, written func(docs, bytes int64)) error
}

// preparePerShard saves plan as a per-shard copy when the PerShard option
// takes coll: one range standing for the whole copy. It reports whether
// it did.
func (c *Copier) preparePerShard(ctx context.Context, coll catalog.Collection, plan checkpoint.Plan) (bool, error) {
	if c.opts.PerShard == nil || coll.Type != "collection" {
		return false, nil
	}
	takes, estimated, err := c.opts.PerShard.Takes(ctx, coll)
	if err != nil || !takes {
		return false, err
	}
	plan.PerShard, plan.Estimated, plan.Ranges = true, estimated, 1
	c.log.Info("planned", "ns", plan.NS, "target", coll.Target.String(), "copy", "shard by shard", "estimatedDocuments", plan.Estimated)
	return true, c.opts.Store.SavePlan(ctx, plan, []checkpoint.Range{{Index: 0, Describe: "every shard's documents, copied shard by shard"}})
}

// splitPerShard separates the ranges of collections copied shard by
// shard from those read through the source client.
func splitPerShard(todo []checkpoint.Range, plans map[string]checkpoint.Plan) (ranges, perShard []checkpoint.Range) {
	for _, r := range todo {
		if plans[r.NS].PerShard {
			perShard = append(perShard, r)
		} else {
			ranges = append(ranges, r)
		}
	}
	return ranges, perShard
}

// copyPerShard runs the per-shard copy of each collection in turn and
// records it done with the documents this process wrote.
func (c *Copier) copyPerShard(ctx context.Context, todo []checkpoint.Range, byNS map[string]catalog.Collection) error {
	for _, r := range todo {
		c.progress.setStage("copying " + r.NS + " shard by shard")
		if err := c.opts.Store.MarkStarted(ctx, r.ID); err != nil {
			return err
		}
		var docs, bytes atomic.Int64
		err := c.opts.PerShard.Copy(ctx, byNS[r.NS], func(d, b int64) {
			docs.Add(d)
			bytes.Add(b)
			c.progress.batchWritten(r.NS, d, b, sink.Result{})
		})
		if err != nil {
			return err
		}
		if err := c.finishRange(ctx, r, docs.Load(), bytes.Load()); err != nil {
			return err
		}
	}
	return nil
}

// Copied counts documents this process wrote into ns (target) for a
// per-shard copy another worker leads: a worker of one shard reports its
// part of the copy through the same status.
func (c *Copier) Copied(ns, target string, docs, bytes int64) {
	c.progress.mu.Lock()
	if c.progress.started.IsZero() {
		c.progress.started, c.progress.stage = time.Now(), "copying this shard's part"
	}
	if c.progress.ns[ns] == nil {
		c.progress.ns[ns] = &nsProgress{target: target, ranges: 1}
	}
	c.progress.mu.Unlock()
	c.progress.batchWritten(ns, docs, bytes, sink.Result{})
}
