package replay

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/docfilter"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// dispatch reads entries, assembles transactions, translates and hands
// writes to the writers.
func (r *Replayer) dispatch(ctx, wctx context.Context) error {
	failures := 0
	for {
		// Asked before reading: an empty read after Retire means the
		// end of the removed shard's oplog.
		retiring := r.o.Board != nil && r.retiring()
		raws, err := r.o.Reader.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failures++
			if failures > 10 {
				return fmt.Errorf("read oplog: %w", err)
			}
			r.log.Warn("oplog read failed; retrying", "err", err, "attempt", failures)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(failures) * 500 * time.Millisecond):
			}
			continue
		}
		failures = 0
		if len(raws) == 0 && retiring {
			if err := r.drain(ctx, wctx); err != nil {
				return err
			}
			if err := r.retireRechecks(ctx); err != nil {
				return err
			}
			r.log.Info("removed shard read to its end; subtask retired", "shard", r.o.Shard)
			return errRetired
		}
		for _, raw := range raws {
			if r.o.Board != nil {
				// Everything read before raw is dispatched or buffered:
				// the checkpoint may reach just below it while raw waits.
				r.mu.Lock()
				r.seen = maxTS(r.seen, before(tsOf(raw)))
				r.mu.Unlock()
			}
			if err := r.entry(ctx, wctx, raw); err != nil {
				return err
			}
			if r.o.Board != nil {
				r.mu.Lock()
				r.seen = maxTS(r.seen, r.lastTS)
				r.mu.Unlock()
			}
		}
		// Before the next read, which may wait for new entries.
		if err := r.flush(ctx); err != nil {
			return err
		}
		if err := wctx.Err(); err != nil {
			return fmt.Errorf("writer stopped: %w", context.Cause(wctx))
		}
	}
}

func (r *Replayer) entry(ctx, wctx context.Context, raw bson.Raw) error {
	e, err := oplog.Parse(raw)
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if last := r.lastRaw; last != nil {
		switch c := e.TS().Compare(r.lastTS); {
		case c == 0 && bytes.Equal(raw, last):
			r.count("duplicate", true) // a reader repeating itself
			return nil
		case c < 0:
			return r.late(ctx, wctx, e)
		}
	}
	r.lastRaw, r.lastTS = raw, e.TS()
	r.mu.Lock()
	r.readTS = e.TS()
	r.mu.Unlock()
	// The entry's position stays open until all of it is queued: the
	// checkpoint passes it only once every write it makes is applied,
	// however many operations it holds and whatever drains the writers
	// between them. An entry that fails stays open, so the checkpoint
	// saved when the run stops stays below it.
	r.wm.Open(e.TS())
	if err := r.dispatchEntry(ctx, wctx, e); err != nil {
		return err
	}
	r.wm.Close(e.TS())
	r.mu.Lock()
	if a := r.applying; a != nil && a.ts == e.TS() {
		// The unit this entry completed is applied and the watermark is
		// at its position: the checkpoint may pass its first entry now,
		// and never lands between its first entry and its last (a
		// restart from there would read the commit without the prepare).
		r.applying = nil
	}
	r.mu.Unlock()
	return nil
}

// dispatchEntry queues the writes of entry e, read in order, with its
// position open (see entry).
func (r *Replayer) dispatchEntry(ctx, wctx context.Context, e oplog.Entry) error {
	if err := r.checkTopology(e); err != nil {
		return err
	}
	if skip, reason := r.filter.Skip(e); skip {
		r.count(reason, true)
		r.noteSkip(e, e.TS(), reason)
		r.wm.Dispatch(e.TS(), 0)
		return nil
	}
	if oplog.Single(e) {
		// A plain write, a no-op or DDL: its own unit, with every
		// operation at its ts (see below); the Assembler, and what the
		// checkpoint reads of it, stay as they are.
		return r.dispatchOp(ctx, wctx, e, e.TS())
	}
	unit, ok, err := r.assemble(e)
	if err != nil || !ok {
		return err // !ok: buffered, a transaction still open
	}
	if r.o.Board != nil && e.Command() == oplog.CmdCommitTransaction && insertsDocuments(unit) {
		if err := r.waitCommit(ctx, wctx, unit, commitTS(e)); err != nil {
			return err
		}
	}
	if unit.FirstTS != unit.TS {
		// A chain of entries: the checkpoint must stay below its first
		// entry until all of it is applied.
		return r.applyBarrier(ctx, wctx, unit)
	}
	// One entry (a plain write, a one-entry transaction, a batched write
	// of 8.0, a user's applyOps): its operations all carry its ts, so the
	// watermark passes it only once all are applied, and each document's
	// writes stay in order on its writer. DDL inside is a barrier of its
	// own (dispatchOp).
	if unit.Txn {
		r.count("transaction", false)
	}
	for _, op := range unit.Ops {
		if err := r.dispatchOp(ctx, wctx, op, unit.TS); err != nil {
			return err
		}
	}
	return nil
}

// assemble adds an entry of a transaction or a batched write to the
// Assembler and returns the unit it completes, if any. The Assembler is
// read by the checkpoint (its state is saved with it), under r.mu.
func (r *Replayer) assemble(e oplog.Entry) (oplog.Unit, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	unit, ok, err := r.asm.Add(e)
	if err != nil {
		return unit, false, fmt.Errorf("replay: %w", err)
	}
	oldest, open := r.asm.OldestBufferedTS()
	r.oldestOpen = nil
	if open {
		r.oldestOpen = &oldest
	}
	if ok && unit.FirstTS != unit.TS {
		// The unit's first entries are no longer buffered: from here
		// until it is applied (applyBarrier), the checkpoint stays below
		// it, with its entries saved (or below its first entry), with no
		// gap in which a checkpoint could pass them.
		r.applying = &applyingUnit{ts: unit.TS, first: unit.FirstTS, entries: unit.Buffered}
		if e.Command() == oplog.CmdCommitTransaction {
			r.applying.id, _ = oplog.TxnID(e)
		}
	}
	return unit, ok, nil
}

// dispatchOp translates one operation and queues its writes; DDL is a
// barrier.
func (r *Replayer) dispatchOp(ctx, wctx context.Context, op oplog.Entry, ts bson.Timestamp) error {
	if skip, reason := r.filter.Skip(op); skip {
		r.count(reason, true)
		r.noteSkip(op, ts, reason)
		r.wm.Dispatch(ts, 0)
		return nil
	}
	if k := op.Kind(); k == oplog.Insert || k == oplog.Update || k == oplog.Delete {
		if rt := r.route(op.NS()); !rt.views {
			return r.dispatchCRUD(ctx, op, ts, rt)
		}
	}
	ws, err := r.o.Translator.Append(nil, op)
	if oplog.NeedsRefetch(err) && op.Kind() == oplog.Update {
		// A field name no update path can address ($setField on a name
		// with '.' or '$'), a binary diff of a compressed bucket: the
		// document is re-read from the source when its writer reaches
		// this point.
		ws, err = []oplog.Write{{NS: op.NS(), Kind: oplog.Update, DocKey: op.O2()}}, nil
	}
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	var items []item
	for _, w := range ws {
		if w.DDL != nil {
			if err := r.flushAndDDL(ctx, wctx, items, *w.DDL, ts); err != nil {
				return err
			}
			items = nil
			continue
		}
		src := sourceOf(w.NS)
		if !r.o.Mapper.Selected(src) {
			r.count("filtered", true)
			continue
		}
		it := item{ts: ts, ns: r.o.Mapper.Target(src), src: src, key: w.DocKey, kind: w.Kind.String(), model: w.Model, bytes: int64(len(op.Raw()))}
		if w.Model == nil {
			it.kind = kindRefetch
		}
		it.cmd = commandOf(w.Model)
		items = append(items, it)
	}
	if len(items) == 0 {
		r.wm.Dispatch(ts, 0)
		return nil
	}
	r.wm.Dispatch(ts, len(items))
	for _, it := range items {
		if err := r.send(ctx, it); err != nil {
			return err
		}
	}
	return nil
}

// nsRoute is what dispatch needs to know of a source namespace.
type nsRoute struct {
	src, target catalog.Namespace
	selected    bool
	views       bool // system.views: its writes are DDL
	// filter keeps the namespace's matching documents (subset.go); nil
	// for a namespace copied whole. err refuses its writes.
	filter *docfilter.Filter
	err    error
}

// route returns the route of a source namespace ("db.coll"), from a cache
// the dispatch goroutine keeps (the Mapper never changes).
func (r *Replayer) route(ns string) nsRoute {
	if rt, ok := r.routes[ns]; ok {
		return rt
	}
	src := sourceOf(ns)
	rt := nsRoute{src: src, target: r.o.Mapper.Target(src), selected: r.o.Mapper.Selected(src), views: oplog.IsViews(src)}
	if ts, ok := oplog.BucketsOf(src); ok {
		// A time-series collection's buckets: selected with it, written
		// to its buckets on the target (timeseries.go).
		rt.target, rt.selected = r.bucketsTarget(ts), r.o.Mapper.Selected(ts)
		r.routeFilter(&rt, ts, true)
	} else if !rt.views {
		r.routeFilter(&rt, src, false)
	}
	if len(r.routes) >= 10_000 {
		clear(r.routes) // a bound on memory with very many namespaces
	}
	r.routes[ns] = rt
	return rt
}

// dispatchCRUD queues an insert, update or delete for its writer, which
// translates it (expand): translation runs on the writers in parallel.
func (r *Replayer) dispatchCRUD(ctx context.Context, op oplog.Entry, ts bson.Timestamp, rt nsRoute) error {
	if !rt.selected {
		r.count("filtered", true)
		r.wm.Dispatch(ts, 0)
		return nil
	}
	if rt.err != nil {
		return rt.err
	}
	key, err := op.DocKey()
	if err != nil {
		return fmt.Errorf("replay: %s: %w", op, err)
	}
	if key, err = r.insertKey(ctx, op, rt.src, key); err != nil {
		return err
	}
	tk, err := r.targetKeyOf(ctx, rt.target)
	if err != nil {
		return err
	}
	it := item{ts: ts, ns: rt.target, src: rt.src, key: key, kind: op.Kind().String(), bytes: int64(len(op.Raw())), op: op, tk: tk, filter: rt.filter}
	r.wm.Dispatch(ts, 1)
	return r.send(ctx, it)
}

// bucket picks the writer for a write: by (namespace, document key), or by
// namespace alone for collections with a unique secondary index. It
// records the hash and the choice in it (see planner).
func (r *Replayer) bucket(it *item) int {
	var h maphash.Hash
	h.SetSeed(r.seed)
	_, _ = h.WriteString(it.ns.DB)
	_ = h.WriteByte('.')
	_, _ = h.WriteString(it.ns.Coll)
	r.mu.Lock()
	serial := r.unique[it.ns]
	r.mu.Unlock()
	if !serial {
		hashDocument(&h, it.key)
	}
	it.hash, it.serial = h.Sum64(), serial
	return int(it.hash % uint64(len(r.queues)))
}

// drain waits until every queued write is applied.
func (r *Replayer) drain(ctx, wctx context.Context) error {
	if err := r.flush(ctx); err != nil {
		return err
	}
	for r.wm.Writes() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wctx.Done():
			return fmt.Errorf("writer stopped: %w", context.Cause(wctx))
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// applyBarrier applies a transaction unit as one: the writers are
// drained, its operations applied in order, and the checkpoint is held
// below its first entry until it is complete.
func (r *Replayer) applyBarrier(ctx, wctx context.Context, unit oplog.Unit) error {
	if err := r.drain(ctx, wctx); err != nil {
		return err
	}
	// r.applying stays set until the unit's own position is passed
	// (entry): a unit cut short by an error keeps the checkpoint Run
	// saves on stop below its first entry, so the restart reads the whole
	// unit again.
	for _, op := range unit.Ops {
		if err := r.dispatchOp(ctx, wctx, op, unit.TS); err != nil {
			return err
		}
		// One operation at a time: a transaction's writes may touch one
		// document twice, on any writer.
		if err := r.drain(ctx, wctx); err != nil {
			return err
		}
	}
	r.count("transaction", false)
	r.wm.Dispatch(unit.TS, 0)
	return nil
}

// flushAndDDL queues pending items, drains, applies a DDL command once.
func (r *Replayer) flushAndDDL(ctx, wctx context.Context, pending []item, ddl oplog.DDL, ts bson.Timestamp) error {
	if len(pending) > 0 {
		r.wm.Dispatch(ts, len(pending))
		for _, it := range pending {
			if err := r.send(ctx, it); err != nil {
				return err
			}
		}
	}
	if err := r.drain(ctx, wctx); err != nil {
		return err
	}
	if err := r.applyDDL(ctx, ddl); err != nil {
		return err
	}
	r.forgetTargetKeys()
	r.forgetSourceKey(catalog.Namespace{})
	r.count("ddl", false)
	r.wm.Dispatch(ts, 0)
	return nil
}
