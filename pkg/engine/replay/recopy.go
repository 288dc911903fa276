package replay

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// recopy makes the target's collection a copy of the source's as it is
// now: for a collection renamed into the task from a name the task does
// not select. $out, convertToCapped and a rename across databases all
// build their result in a temporary collection (tmp.agg_out.<uuid>,
// tmpXXXXX.convertToCapped.<name>, tmpXXXXX.renameCollection) and rename
// it over the final name; when the task's filters name collections, the
// temporary one is not selected and its writes were not replayed. Later
// entries of the collection apply on top of the copy, which may already
// reflect them: up to the source's newest position when the copy ends,
// their conflicts are tolerated as in the copy/replay overlap.
func (r *Replayer) recopy(ctx context.Context, src catalog.Namespace) error {
	m, t := r.o.Mapper, r.o.Target
	c, ok, err := catalog.Describe(ctx, r.o.Source, m, src)
	if err != nil {
		return err
	}
	dst := m.Target(src)
	if err := t.Database(dst.DB).Collection(dst.Coll).Drop(ctx); err != nil {
		return fmt.Errorf("drop %s before copying it again: %w", dst, err)
	}
	if err := r.holder.Dropped(ctx, dst); err != nil {
		return err
	}
	if !ok {
		return nil // gone again on the source: later entries say what follows
	}
	r.log.Info("copying a collection renamed into the task from the source", "ns", src.String(), "target", dst.String())
	if err := r.holder.CreateCollection(ctx, c, m); err != nil {
		return err
	}
	if c.Copyable() {
		if err := r.copyDocuments(ctx, src, dst, findQuery(c.Filter)); err != nil {
			return err
		}
		if err := r.holder.CreateIndexes(ctx, c, r.o.IndexesOneByOne); err != nil {
			return err
		}
	}
	newest, err := r.o.Reader.Newest(ctx)
	if err != nil {
		return fmt.Errorf("copy %s: read the source's newest position: %w", src, err)
	}
	r.mu.Lock()
	if r.recopied == nil {
		r.recopied = map[catalog.Namespace]bson.Timestamp{}
	}
	r.recopied[dst] = newest
	r.mu.Unlock()
	return nil
}

// copyDocuments copies the documents of src that match query (those the
// target keeps, findQuery) into dst in unordered batches of at most
// cache.batchSize documents and 8 MiB.
func (r *Replayer) copyDocuments(ctx context.Context, src, dst catalog.Namespace, query any) error {
	// At majority read concern, as the full copy reads.
	cur, err := r.o.Source.Database(src.DB).Collection(src.Coll, options.Collection().SetReadConcern(readconcern.Majority())).Find(ctx, query)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	coll := r.o.Target.Database(dst.DB).Collection(dst.Coll)
	const maxBytes = 8 << 20
	var (
		batch []any
		size  int
		n     int64
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if _, err := coll.InsertMany(ctx, batch, options.InsertMany().SetOrdered(false).SetBypassDocumentValidation(true)); err != nil && !mongo.IsDuplicateKeyError(err) {
			return fmt.Errorf("copy %s into %s: %w", src, dst, err)
		}
		n += int64(len(batch))
		batch, size = batch[:0], 0
		return nil
	}
	for cur.Next(ctx) {
		doc := bson.Raw(append([]byte(nil), cur.Current...))
		batch = append(batch, doc)
		size += len(doc)
		if len(batch) >= r.o.Spec.Cache.BatchSize || size >= maxBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := cur.Err(); err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := flush(); err != nil {
		return err
	}
	r.log.Info("copied a collection renamed into the task", "ns", src.String(), "documents", n)
	return nil
}

// inOverlap reports whether a write at ts into ns may meet a document
// that already reflects it: the full copy's overlap, or a collection
// copied again during replay.
func (r *Replayer) inOverlap(ns catalog.Namespace, ts bson.Timestamp) bool {
	if ts.Compare(r.o.OverlapUntil) <= 0 {
		return true
	}
	r.mu.Lock()
	until, ok := r.recopied[ns]
	r.mu.Unlock()
	return ok && ts.Compare(until) <= 0
}
