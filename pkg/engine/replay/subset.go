package replay

import (
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/docfilter"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// A namespace with a filter (namespaces.filters) keeps on the target the
// source's matching documents and nothing else. Its route carries the
// filter (route), and its writers turn each entry's writes into those
// that keep the subset (subset):
//   - an insert, or an update that replaces the whole document, is
//     written when the new document matches, and is otherwise a delete
//     by its document key (a no-op when the target never had it, the
//     removal of a document that left the filter when it had);
//   - an update that changes no field the filter reads cannot change
//     whether the document matches: it applies as it is, to the
//     target's copy of a matching document, and matches nothing (it
//     never upserts) for one the target does not hold;
//   - any other update (one that touches a field the filter reads, or
//     an upsert of a user's applyOps) re-reads the document from the
//     source (refetch), and lookup treats a document that does not
//     match as absent: the source's current document is written when
//     it matches, and deleted from the target when it does not or is
//     gone;
//   - a delete applies as it is, by document key.
//
// Transactions and batched writes reach the same path one operation at a
// time (dispatchOp). Change-stream mode replays its events as the
// entries they stand for (oplog.EventToEntry), so it follows the same
// rule.
//
// Why this keeps the subset: for each document, take the last entry
// that decides whether the target holds it (an insert, a replacement, a
// delete, or an update re-read from the source). An insert or
// replacement decides it on the very document the source then had, a
// delete removes it, and a re-read on the document the source has at a
// later point. The entries after it change no field the filter reads,
// so the source's document matches as it did, and they apply to the
// target's copy exactly when it holds one. A re-read may already
// reflect entries that follow it; those apply on top, as they do over
// the full copy, and their conflicts are the overlap's, as for any
// re-read. Documents the filter leaves out never reach the target but
// through a write the next deciding entry undoes.

// ErrTimeSeriesFilter refuses a filter on a time-series collection: its
// writes are bucket writes, many measurements each, which cannot be kept
// or dropped by a measurement's fields. CheckReplayable refuses one the
// source has before anything is written, the replay one created later at
// its first write.
var ErrTimeSeriesFilter = errors.New("a time-series collection cannot be filtered by document")

func errTimeSeriesFilter(ts catalog.Namespace) error {
	return fmt.Errorf("%w: %s is a time-series collection and has a filter (namespaces.filters), "+
		"but its writes are bucket writes of many measurements each: "+
		"remove the filter for %s, or exclude the collection (namespaces.exclude)", ErrTimeSeriesFilter, ts, ts)
}

// routeFilter sets rt's filter: that of the source namespace, or an error
// dispatch returns for its first write (a filtered time-series
// collection, a namespace two filters match).
func (r *Replayer) routeFilter(rt *nsRoute, coll catalog.Namespace, buckets bool) {
	f, err := r.o.Mapper.Filter(coll)
	switch {
	case err != nil:
		rt.err = fmt.Errorf("replay: %w", err)
	case f != nil && buckets:
		rt.err = fmt.Errorf("replay: %w", errTimeSeriesFilter(coll))
	default:
		rt.filter = f
	}
}

// subset returns, for entry op of a filtered namespace (it.filter set),
// the writes that keep the target equal to the source's matching subset
// instead of ws, its translated writes (see the top of this file). It
// reuses ws's memory.
func (r *Replayer) subset(it item, op oplog.Entry, ws []oplog.Write) ([]oplog.Write, error) {
	f := it.filter
	var doc bson.Raw
	switch op.Kind() {
	case oplog.Insert:
		doc = op.O()
	case oplog.Update:
		if op.Upsert() {
			return reread(ws, op, it.key), nil
		}
		var touches bool
		var err error
		if doc, touches, err = r.o.Translator.Changes(op, f.Reads); err != nil {
			return ws, fmt.Errorf("replay: %w", err)
		}
		if doc == nil {
			if touches {
				return reread(ws, op, it.key), nil
			}
			return ws, nil
		}
	default:
		return ws, nil
	}
	ok, err := f.Match(doc)
	if err != nil {
		return ws, fmt.Errorf("replay: %s: %w", op, err)
	}
	if ok {
		return ws, nil
	}
	return append(ws[:0], oplog.Write{NS: op.NS(), Kind: op.Kind(), DocKey: it.key, Model: &mongo.DeleteOneModel{Filter: it.key}}), nil
}

// reread replaces ws with one write that re-reads op's document (key)
// from the source (a nil Model, see refetch).
func reread(ws []oplog.Write, op oplog.Entry, key bson.Raw) []oplog.Write {
	return append(ws[:0], oplog.Write{NS: op.NS(), Kind: op.Kind(), DocKey: key})
}

// inSubset returns doc when it belongs on the target: always for a
// namespace without a filter, and when it matches the filter of src
// otherwise; nil when it does not.
func (r *Replayer) inSubset(src catalog.Namespace, doc bson.Raw) (bson.Raw, error) {
	if doc == nil {
		return nil, nil
	}
	f, err := r.o.Mapper.Filter(src)
	if err != nil || f == nil {
		return doc, err
	}
	ok, err := f.Match(doc)
	if err != nil || !ok {
		return nil, err
	}
	return doc, nil
}

// findQuery is the find query of the documents the target keeps of a
// collection with filter f: f's query, or every document when f is nil.
func findQuery(f *docfilter.Filter) any {
	if f == nil {
		return bson.D{}
	}
	return f.Query()
}
