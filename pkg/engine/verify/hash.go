package verify

import (
	"context"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// hash compares the digests of both sides and, when they differ, lists the
// differing documents.
func (v *verifier) hash(ctx context.Context, c catalog.Collection, r *NamespaceResult, p *progress) error {
	p.start(PassHash, 2, 0)
	stop := v.estimate(ctx, c, p, 2) // both sides, assuming they are alike
	defer stop()
	var digests [2]Digest
	err := both(ctx, func(ctx context.Context, s side) error {
		d := &digests[s]
		return v.scan(ctx, c, s, p, nil, func(doc bson.Raw) error {
			d.Add(doc)
			return nil
		})
	})
	stop() // the estimate is the hash pass's: none may reach the diff's
	if err != nil {
		return err
	}
	src, tgt := digests[sourceSide], digests[targetSide]
	r.SourceCount, r.TargetCount = src.Count, tgt.Count
	r.SourceHash, r.TargetHash = src.Hex(), tgt.Hex()
	if src == tgt {
		r.OK = true
		return nil
	}
	return v.diff(ctx, c, r, p)
}

// diff reads both sides again and finds the documents that differ: it
// keeps a map from _id (idKey) to document hash of the side with fewer
// documents, then scans the other side against it. Documents found on the
// scanned side only, or with another hash, are counted as they come; what
// is left in the map is on the first side only.
//
// The map holds one entry per document of one side in memory (the _id's
// bytes, a 16-byte hash and the map's overhead, roughly 60-100 bytes per
// document), so a collection of a hundred million documents needs several
// GiB here. Hashing per _id range on both sides, and diffing only the
// ranges whose digests differ, would bound that; it is the candidate for
// later.
func (v *verifier) diff(ctx context.Context, c catalog.Collection, r *NamespaceResult, p *progress) error {
	build, other, size := sourceSide, targetSide, r.SourceCount
	if r.TargetCount < r.SourceCount {
		build, other, size = targetSide, sourceSide, r.TargetCount
	}
	p.start(PassDiff, 2, 0)
	p.total.Add(r.SourceCount + r.TargetCount)
	p.report()

	seen := make(map[idKey]docHash, min(size, 1<<20))
	var key []byte
	err := v.scan(ctx, c, build, p, nil, func(doc bson.Raw) error {
		var err error
		if key, err = appendKey(key[:0], doc); err != nil {
			return err
		}
		seen[idKey(key)] = hashDoc(doc)
		return nil
	})
	if err != nil {
		return fmt.Errorf("diff: %w", err)
	}

	limit := v.opts.MaxExamples
	onlyOther := examples{max: limit}
	changed := examples{max: limit}
	err = v.scan(ctx, c, other, p, nil, func(doc bson.Raw) error {
		var err error
		if key, err = appendKey(key[:0], doc); err != nil {
			return err
		}
		h, ok := seen[idKey(key)]
		switch {
		case !ok:
			onlyOther.addBytes(key)
		case h != hashDoc(doc):
			changed.addBytes(key)
			delete(seen, idKey(key))
		default:
			delete(seen, idKey(key))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("diff: %w", err)
	}

	// What is left was not on the other side. Keep the smallest _ids as
	// examples, so that the report does not depend on map order.
	onlyBuild := examples{max: limit, count: int64(len(seen))}
	for k := range seen {
		onlyBuild.ids = keepSmallest(onlyBuild.ids, k, limit)
	}

	missing, extra := onlyBuild, onlyOther
	if build == targetSide {
		missing, extra = onlyOther, onlyBuild
	}
	r.MissingCount, r.Missing = missing.count, missing.strings()
	r.ExtraCount, r.Extra = extra.count, extra.strings()
	r.ChangedCount, r.Changed = changed.count, changed.strings()
	if r.MissingCount+r.ExtraCount+r.ChangedCount == 0 {
		// Possible when the data changed between the two passes, or when one
		// side holds a duplicate _id (no _id index).
		r.Note = "digests differ but a second pass found no differing _id: was the data changing?"
	}
	return nil
}

// keepSmallest inserts k into ids, sorted ascending, keeping at most limit.
func keepSmallest(ids []idKey, k idKey, limit int) []idKey {
	if len(ids) >= limit && (limit <= 0 || k >= ids[len(ids)-1]) {
		return ids
	}
	i, _ := slices.BinarySearch(ids, k)
	if len(ids) >= limit {
		ids = ids[:len(ids)-1]
	}
	return slices.Insert(ids, i, k)
}
