package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// fetchChunk is the number of _ids looked up with one $in query.
const fetchChunk = 256

// sampleUnsupported are the error codes of a server without $sample:
// NotImplemented (FerretDB), CommandNotSupported, and MongoDB's
// "Unrecognized pipeline stage name" (old and new).
var sampleUnsupported = []int{238, 115, 16436, 40324}

// sample compares the counts of both sides and SampleSize source documents,
// picked at random, with the target's documents of the same _id.
func (v *verifier) sample(ctx context.Context, c catalog.Collection, r *NamespaceResult, p *progress) error {
	if err := v.count(ctx, c, r); err != nil {
		return err
	}
	n := int64(v.opts.SampleSize)
	cmp := &comparer{target: v.coll(c, targetSide), p: p,
		missing: examples{max: v.opts.MaxExamples}, changed: examples{max: v.opts.MaxExamples}}
	p.start(PassSample, 1, min(n, r.SourceCount))

	var err error
	switch {
	case r.SourceCount <= n:
		// The whole collection is the sample.
		err = v.scan(ctx, c, sourceSide, nil, nil, func(doc bson.Raw) error { return cmp.add(ctx, doc) })
	default:
		var used bool
		if used, err = v.sampleStage(ctx, c, n, cmp); err == nil && !used {
			err = v.reservoir(ctx, c, n, r.SourceCount, p, cmp)
		}
	}
	if err == nil {
		err = cmp.flush(ctx)
	}
	if err != nil {
		return fmt.Errorf("sample: %w", err)
	}
	r.Sampled = cmp.compared
	r.MissingCount, r.Missing = cmp.missing.count, cmp.missing.strings()
	r.ChangedCount, r.Changed = cmp.changed.count, cmp.changed.strings()
	r.OK = r.SourceCount == r.TargetCount && r.MissingCount == 0 && r.ChangedCount == 0
	return nil
}

// sampleStage feeds up to n distinct random source documents from $sample
// to cmp. used is false when the server has no $sample; nothing was fed
// then.
func (v *verifier) sampleStage(ctx context.Context, c catalog.Collection, n int64, cmp *comparer) (used bool, err error) {
	if v.noSample.Load() {
		return false, nil
	}
	pipeline := mongo.Pipeline{{{Key: "$sample", Value: bson.D{{Key: "size", Value: n}}}}}
	if c.Filter != nil {
		pipeline = append(mongo.Pipeline{{{Key: "$match", Value: c.Filter.Query()}}}, pipeline...)
	}
	cur, err := v.coll(c, sourceSide).Aggregate(ctx, pipeline, options.Aggregate().SetBatchSize(fetchChunk))
	if err != nil {
		return false, v.sampleError(ctx, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	// $sample may return a document more than once.
	seen := make(map[idKey]struct{}, n)
	for cur.Next(ctx) {
		k, err := keyOf(cur.Current)
		if err != nil {
			return true, err
		}
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		if err := cmp.add(ctx, cur.Current); err != nil {
			return true, err
		}
	}
	if err := cur.Err(); err != nil {
		if len(seen) == 0 {
			return false, v.sampleError(ctx, err)
		}
		return true, fmt.Errorf("$sample on source: %w", err)
	}
	return true, nil
}

// sampleError returns nil for an error the server answered with (the
// caller then samples by scanning), and err for anything else (network,
// cancellation). A server that says it lacks $sample is not asked again.
func (v *verifier) sampleError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return fmt.Errorf("$sample on source: %w", err)
	}
	if slices.ContainsFunc(sampleUnsupported, se.HasErrorCode) {
		v.noSample.Store(true)
	}
	return nil
}

// reservoir picks n random _ids in one scan of the source's _ids (reservoir
// sampling), then feeds their documents to cmp.
func (v *verifier) reservoir(ctx context.Context, c catalog.Collection, n, count int64, p *progress, cmp *comparer) error {
	p.start(PassSampleIDs, 1, count)
	ids := make([]idKey, 0, n)
	var seen int64
	proj := options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}})
	err := v.scan(ctx, c, sourceSide, p, proj, func(doc bson.Raw) error {
		k, err := keyOf(doc)
		if err != nil {
			return err
		}
		if _, ok := k.rawValue(); !ok {
			return nil // cannot be fetched by _id
		}
		seen++
		switch {
		case int64(len(ids)) < n:
			ids = append(ids, k)
		default:
			if j := rand.Int64N(seen); j < n {
				ids[j] = k
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.start(PassSample, 1, int64(len(ids)))
	src := v.coll(c, sourceSide)
	for chunk := range slices.Chunk(ids, fetchChunk) {
		cur, err := src.Find(ctx, byID(c, sourceSide, chunk), options.Find().SetBatchSize(fetchChunk))
		if err != nil {
			return fmt.Errorf("fetch source documents: %w", err)
		}
		for cur.Next(ctx) {
			if err := cmp.add(ctx, cur.Current); err != nil {
				_ = cur.Close(context.WithoutCancel(ctx))
				return err
			}
		}
		err = cur.Err()
		_ = cur.Close(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("fetch source documents: %w", err)
		}
	}
	return nil
}

// inFilter selects the documents with the given _ids.
func inFilter(keys []idKey) bson.D {
	in := make(bson.A, 0, len(keys))
	for _, k := range keys {
		if v, ok := k.rawValue(); ok {
			in = append(in, v)
		}
	}
	return bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: in}}}}
}

// comparer looks source documents up on the target by _id, a chunk at a
// time, and compares their bytes.
type comparer struct {
	target           *mongo.Collection
	p                *progress
	buf              []bson.Raw
	compared         int64
	missing, changed examples
}

// add queues a copy of a source document for comparison.
func (c *comparer) add(ctx context.Context, doc bson.Raw) error {
	c.buf = append(c.buf, slices.Clone(doc))
	if len(c.buf) >= fetchChunk {
		return c.flush(ctx)
	}
	return nil
}

// flush compares the queued documents.
func (c *comparer) flush(ctx context.Context) error {
	if len(c.buf) == 0 {
		return nil
	}
	keys := make([]idKey, 0, len(c.buf))
	want := make(map[idKey]bson.Raw, len(c.buf))
	for _, doc := range c.buf {
		k, err := keyOf(doc)
		if err != nil {
			return err
		}
		if _, ok := k.rawValue(); !ok {
			continue // no _id to look it up by
		}
		keys = append(keys, k)
		want[k] = doc
	}
	cur, err := c.target.Find(ctx, inFilter(keys), options.Find().SetBatchSize(fetchChunk))
	if err != nil {
		return fmt.Errorf("fetch target documents: %w", err)
	}
	found := make(map[idKey]bool, len(keys))
	// $in matches _ids that compare equal, such as int64 1 for int32 1; such
	// a document is not found under the source's exact key.
	otherTypes := false
	for cur.Next(ctx) {
		k, err := keyOf(cur.Current)
		if err != nil {
			_ = cur.Close(context.WithoutCancel(ctx))
			return err
		}
		src, ok := want[k]
		if !ok {
			otherTypes = true
			continue
		}
		found[k] = bytes.Equal(src, cur.Current)
	}
	err = cur.Err()
	_ = cur.Close(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("fetch target documents: %w", err)
	}
	for _, k := range keys {
		equal, ok := found[k]
		switch {
		case ok && equal:
		case ok:
			c.changed.add(k)
		case !otherTypes:
			c.missing.add(k)
		default:
			// Ask for this _id alone: a document found is one whose _id
			// differs in type only, so it is changed.
			v, _ := k.rawValue()
			err := c.target.FindOne(ctx, bson.D{{Key: "_id", Value: v}}).Err()
			switch {
			case errors.Is(err, mongo.ErrNoDocuments):
				c.missing.add(k)
			case err != nil:
				return fmt.Errorf("fetch target document %s: %w", k, err)
			default:
				c.changed.add(k)
			}
		}
	}
	c.compared += int64(len(keys))
	c.p.add(int64(len(c.buf)))
	clear(c.buf)
	c.buf = c.buf[:0]
	return nil
}
