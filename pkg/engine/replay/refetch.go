package replay

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// kindRefetch is the kind of a write that re-reads its document from the
// source and writes it as it is there now.
const kindRefetch = "refetch"

// Server codes of an update whose path no longer fits the document: an
// older entry applied again over a newer document (the copy/replay
// overlap, a resume from a checkpoint a little behind what was applied)
// meets a field whose type has changed since ($set of a.b when a is now 5,
// an array sub-diff on a field that is now a string). mongod's own applier
// sets such a field to null; an update through it fails instead.
const (
	codeBadValue      = 2
	codePathNotViable = 28
	codeTypeMismatch  = 14
)

// stalePath reports whether a bulk write failed on write k because an
// update's path does not fit the target document. Only updates fail so, so
// k is the first update at or after the index the server reports: FerretDB
// reports index 0 wherever the failing write stands (an ordered bulk
// write has applied everything before the failing one, so the writes
// before k are applied whichever it was).
func stalePath(err error, batch []item) (int, bool) {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || len(bwe.WriteErrors) == 0 {
		return 0, false
	}
	we := bwe.WriteErrors[0]
	switch we.Code {
	case codeBadValue, codePathNotViable, codeTypeMismatch:
	default:
		return 0, false
	}
	for k := max(we.Index, 0); k < len(batch); k++ {
		if _, ok := batch[k].model.(*mongo.UpdateOneModel); ok {
			return k, true
		}
	}
	return 0, false
}

// refetch writes one document as the source has it now: replaced, or
// deleted when the source no longer has it (or, in a filtered namespace,
// it no longer matches: lookup). Later entries of the document then
// apply on top, as they do over the full copy.
func (r *Replayer) refetch(ctx context.Context, it item) error {
	var model mongo.WriteModel
	doc, _, err := r.lookup(ctx, it.src, it.ts, it.key)
	switch {
	case err != nil:
		return err
	case doc == nil:
		model = mongo.NewDeleteOneModel().SetFilter(it.key)
	default:
		model = sink.Replace(it.key, doc)
	}
	it.model, it.kind, it.cmd, it.unconfirmed = model, kindRefetch, commandOf(model), false
	if err := r.applyBatch(ctx, []item{it}); err != nil {
		return err
	}
	r.count(kindRefetch, false)
	return nil
}

// lookup reads the source's document of src that matches filter (a
// document key, or {_id}) as it is now, for a write at ts: nil when the
// source has none. at is a cluster time at or past every write the read
// reflects (the $clusterTime the source answered with; zero when it
// sends none, as a server without a cluster clock): a write logged at or
// below it is in the document read. In a namespace with a filter
// (namespaces.filters), a document that does not match is nil as well:
// the target keeps the matching subset, where it is absent (subset.go).
func (r *Replayer) lookup(ctx context.Context, src catalog.Namespace, ts bson.Timestamp, filter bson.Raw) (doc bson.Raw, at bson.Timestamp, err error) {
	doc, at, err = r.lookupAny(ctx, src, ts, filter)
	if err != nil {
		return nil, at, err
	}
	if doc, err = r.inSubset(src, doc); err != nil {
		return nil, at, fmt.Errorf("replay: re-read %s %s from the source: %w", src, filter, err)
	}
	return doc, at, nil
}

// lookupAny is lookup without the namespace's filter.
func (r *Replayer) lookupAny(ctx context.Context, src catalog.Namespace, ts bson.Timestamp, filter bson.Raw) (doc bson.Raw, at bson.Timestamp, err error) {
	if r.o.Lookup != nil {
		doc, at, err := r.o.Lookup(ctx, src, filter)
		if err != nil {
			return nil, at, fmt.Errorf("replay: re-read %s %s from the source: %w", src, filter, err)
		}
		return doc, at, nil
	}
	if r.o.Source == nil {
		return nil, at, fmt.Errorf("replay: %s at %d,%d must be re-read from the source, and there is no source to read it from", src, ts.T, ts.I)
	}
	err = r.o.Source.UseSession(ctx, func(sctx context.Context) error {
		var ferr error
		doc, ferr = r.o.Source.Database(src.DB).Collection(src.Coll).FindOne(sctx, filter).Raw()
		if sess := mongo.SessionFromContext(sctx); sess != nil {
			if ct := sess.ClusterTime(); ct != nil {
				t, i, _ := ct.Lookup("$clusterTime", "clusterTime").TimestampOK()
				at = bson.Timestamp{T: t, I: i}
			}
		}
		return ferr
	})
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, at, nil
	case err != nil:
		return nil, at, fmt.Errorf("replay: re-read %s %s from the source: %w", src, filter, err)
	}
	return doc, at, nil
}

// sourceOf returns the source namespace of a write.
func sourceOf(ns string) catalog.Namespace { return catalog.ParseNamespace(ns) }

// late applies an entry older than one already read: it became visible
// on the source after later entries had been read (a hole in the oplog,
// see source.Tailer.Settle). Its writes cannot be replayed in place, so
// once every queued write is on the target, the current state of each
// document it touched is read from the source and written to the target
// (or the document deleted there when the source no longer has it). Later
// entries then apply on top, as they do over the full copy.
func (r *Replayer) late(ctx, wctx context.Context, e oplog.Entry) error {
	ts := e.TS()
	r.log.Warn("an oplog entry became visible after later ones (a hole in the source's oplog); its documents are re-read from the source",
		"ts", ts, "ns", e.NS(), "op", e.Kind().String())
	if e.Kind() != oplog.Insert && e.Kind() != oplog.Update && e.Kind() != oplog.Delete {
		if skip, _ := r.filter.Skip(e); skip {
			r.count("late", true)
			return nil
		}
		return fmt.Errorf("replay: the source's oplog showed the %s entry at %d,%d after later entries were applied, "+
			"and only inserts, updates and deletes can be applied out of order: resync the task (delete its checkpoint database and run it again)",
			e.Kind(), ts.T, ts.I)
	}
	ws, err := r.o.Translator.Append(nil, e)
	if oplog.NeedsRefetch(err) && e.Kind() == oplog.Update {
		ws, err = []oplog.Write{{NS: e.NS(), Kind: oplog.Update, DocKey: e.O2()}}, nil
	}
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if err := r.drain(ctx, wctx); err != nil {
		return err
	}
	for _, w := range ws {
		rt := r.route(w.NS)
		if w.DDL != nil || !rt.selected {
			continue
		}
		it := item{ts: r.lastTS, ns: rt.target, key: w.DocKey, src: rt.src}
		if it.tk, err = r.targetKeyOf(ctx, it.ns); err != nil {
			return err
		}
		if err := r.refetch(ctx, it); err != nil {
			return err
		}
	}
	return nil
}
