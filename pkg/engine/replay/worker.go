package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// write applies one writer's queue. It takes what is queued, up to
// cache.batchSize writes, and applies it as one ordered bulk write per
// namespace. Grouping by namespace keeps each document's writes in queue
// order (a document lives in one namespace) while writes interleaved over
// many collections still travel in large batches.
func (r *Replayer) write(ctx context.Context, q chan item) error {
	batchMax := r.o.Spec.Cache.BatchSize
	if m := r.o.MaxWriteBatch; m > 0 && m < batchMax {
		batchMax = m
	}
	var batch []item
	var g grouper
	for {
		it, ok := <-q
		if !ok {
			return nil
		}
		batch = append(batch[:0], it)
	fill:
		for len(batch) < batchMax {
			select {
			case it, ok := <-q:
				if !ok {
					break fill
				}
				batch = append(batch, it)
			default:
				break fill
			}
		}
		for _, group := range g.group(batch) {
			if err := r.applyGroup(ctx, group); err != nil {
				return err
			}
		}
	}
}

// applyGroup applies writes of one namespace and marks them done.
func (r *Replayer) applyGroup(ctx context.Context, group []item) error {
	err := r.applyItems(ctx, group)
	for _, it := range group {
		r.budget.Release(it.bytes)
	}
	if err != nil {
		return err
	}
	for _, it := range group {
		r.count(it.kind, false)
		r.wm.Done(it.ts)
	}
	r.mu.Lock()
	r.rate.add(len(group))
	r.lastAppliedWall = time.Now()
	r.mu.Unlock()
	return nil
}

// applyBatch writes a batch in order, retrying retryable errors and
// stepping over duplicate keys of the copy/replay overlap.
func (r *Replayer) applyBatch(ctx context.Context, batch []item) error {
	apply := r.o.Apply
	if r.o.ApplyAt != nil {
		at := make([]bson.Timestamp, len(batch))
		for i, it := range batch {
			at[i] = it.ts
		}
		apply = func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
			return r.o.ApplyAt(ctx, ns, models, at[len(at)-len(models):])
		}
	}
	if apply == nil {
		apply = func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
			_, err := r.o.Target.Database(ns.DB).Collection(ns.Coll).BulkWrite(ctx, models,
				options.BulkWrite().SetOrdered(true).SetBypassDocumentValidation(true))
			return err
		}
	}
	backoff := 200 * time.Millisecond
	for attempt := 0; len(batch) > 0; attempt++ {
		models := make([]mongo.WriteModel, len(batch))
		for i, it := range batch {
			models[i] = it.model
		}
		started := time.Now()
		actx, cancel := context.WithTimeout(ctx, r.writeTimeout())
		err := apply(actx, batch[0].ns, models)
		if err != nil && actx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w: no answer within %s", errWriteTimeout, r.writeTimeout())
		}
		cancel()
		if r.o.ObserveWrite != nil {
			r.o.ObserveWrite(batch[0].kind, time.Since(started))
		}
		if err == nil {
			return nil
		}
		class := sink.Classify(err)
		if errors.Is(err, errWriteTimeout) {
			class = sink.Retryable
		}
		switch class {
		case sink.Retryable:
			if attempt >= 8 || ctx.Err() != nil {
				return fmt.Errorf("replay into %s: %w", batch[0].ns, err)
			}
			r.log.Warn("retrying replay batch", "ns", batch[0].ns.String(), "attempt", attempt+1, "err", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue // writes are idempotent: the whole batch again
		case sink.Conflict:
			var bwe mongo.BulkWriteException
			if !errors.As(err, &bwe) || len(bwe.WriteErrors) == 0 {
				return fmt.Errorf("replay into %s: %w", batch[0].ns, err)
			}
			k := bwe.WriteErrors[0].Index
			it := batch[k]
			if !r.inOverlap(it.ns, it.ts) {
				return fmt.Errorf("replay into %s at %d,%d: %w: a unique index on the target refuses a write the source accepted; "+
					"the target holds documents the source does not (written outside this task?)", it.ns, it.ts.T, it.ts.I, err)
			}
			// Overlap: the copy already holds a newer state; later entries
			// bring the document where the source has it. Writes before k
			// were applied (ordered); k is stepped over; the rest go again.
			r.mu.Lock()
			r.tolerated++
			r.mu.Unlock()
			r.log.Debug("duplicate key tolerated in the copy/replay overlap", "ns", it.ns.String(), "ts", it.ts)
			batch = batch[k+1:]
			continue
		default:
			if k, ok := stalePath(err, batch); ok {
				// Writes before k were applied (ordered); the document of
				// k is written as the source has it now, and the rest go
				// again.
				r.log.Info("an update does not fit the target's newer document (an older entry applied again); the document is re-read from the source",
					"ns", batch[k].ns.String(), "ts", batch[k].ts, "err", err)
				if err := r.refetch(ctx, batch[k]); err != nil {
					return err
				}
				batch = batch[k+1:]
				continue
			}
			return fmt.Errorf("replay into %s: %w", batch[0].ns, err)
		}
	}
	return nil
}

// errWriteTimeout marks a bulk write abandoned after WriteTimeout.
var errWriteTimeout = errors.New("write batch timed out")

func (r *Replayer) writeTimeout() time.Duration {
	if r.o.WriteTimeout > 0 {
		return r.o.WriteTimeout
	}
	return 2 * time.Minute
}
