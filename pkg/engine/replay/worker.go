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
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// writer applies one writer's queue. It takes what is queued, up to
// cache.batchSize writes, translates the entries among them (expand), and
// submits the writes to the gate, which sends them at once or with other
// writers' batches in a fuller command. Whichever writer sends a command
// reorders its writes into runs of one command kind per namespace
// (planner) and sends each run as one command, or all of them as one
// bulkWrite command where the target has it. Its buffers serve from one
// batch to the next.
type writer struct {
	r        *Replayer
	q        chan *[]item
	max      int
	batch    []item // received
	carry    []item // received beyond max, for the next batch
	expanded []item // batch's writes
	ws       []oplog.Write
	tss      []bson.Timestamp
	p        planner
	lot      lot    // expanded, in the gate
	combined []item // the writes of the lots this writer sends together
}

func (r *Replayer) newWriter(q chan *[]item) *writer {
	batchMax := r.writeBatchMax()
	return &writer{r: r, q: q, max: batchMax, lot: lot{signal: make(chan lotSignal, 1)}}
}

// writeBatchMax is the most writes of one command: cache.batchSize, or
// MaxWriteBatch when lower.
func (r *Replayer) writeBatchMax() int {
	n := r.o.Spec.Cache.BatchSize
	if m := r.o.MaxWriteBatch; m > 0 && m < n {
		n = m
	}
	return n
}

// run applies the queue until it is closed.
func (w *writer) run(ctx context.Context) error {
	r := w.r
	for {
		if !w.receive() {
			return nil
		}
		var err error
		w.expanded, w.ws, err = r.expand(w.batch, w.expanded[:0], w.ws)
		if err != nil {
			return err
		}
		if len(w.expanded) == 0 {
			continue
		}
		w.lot.items = w.expanded
		err = r.gate.submit(ctx, &w.lot, func(take []*lot) error { return w.send(ctx, take) })
		w.lot.items = nil
		if err != nil {
			return err
		}
	}
}

// send applies the writes of take's lots, one writer's batch each, as
// one command where the target takes it (bulkWrite), or one command per
// run. The lots hold writes of different documents, so their writes
// commute; each lot's own writes keep their order through the planner.
func (w *writer) send(ctx context.Context, take []*lot) error {
	r := w.r
	items := take[0].items
	if len(take) > 1 {
		w.combined = w.combined[:0]
		for _, l := range take {
			w.combined = append(w.combined, l.items...)
		}
		items = w.combined
		defer clear(w.combined)
	}
	if items = r.parkedOut(items); len(items) == 0 {
		return nil
	}
	runs := w.p.plan(items)
	if r.bulkWrite != nil && len(runs) > 1 {
		err := r.applyBulk(ctx, runs)
		w.finish(items, err)
		return err
	}
	for _, rn := range runs {
		err := r.applyRun(ctx, rn)
		w.finish(rn.items, err)
		if err != nil {
			return err
		}
	}
	return nil
}

// receive fills batch with up to max writes: what was carried over or
// one slice (waiting for it), then whatever else is queued. It reports
// false once the queue is closed and nothing is left.
func (w *writer) receive() bool {
	w.batch = append(w.batch[:0], w.carry...)
	w.carry = w.carry[:0]
	if len(w.batch) == 0 {
		s, ok := <-w.q
		if !ok {
			return false
		}
		w.take(s)
	}
fill:
	for len(w.batch) < w.max {
		select {
		case s, ok := <-w.q:
			if !ok {
				break fill
			}
			w.take(s)
		default:
			break fill
		}
	}
	if len(w.batch) > w.max {
		w.carry = append(w.carry, w.batch[w.max:]...)
		clear(w.batch[w.max:])
		w.batch = w.batch[:w.max]
	}
	return true
}

func (w *writer) take(s *[]item) {
	w.batch = append(w.batch, *s...)
	putItems(s)
}

// finish releases the bytes of applied (or failed) writes and, when err
// is nil, marks them done.
func (w *writer) finish(items []item, err error) { w.tss = w.r.finishItems(items, err, w.tss) }

// finishItems is writer.finish, with tss as scratch space (returned);
// parked writes (conflict.go) are left to their unpark.
func (r *Replayer) finishItems(items []item, err error, tss []bson.Timestamp) []bson.Timestamp {
	var bytes int64
	for _, it := range items {
		if !it.parked {
			bytes += it.bytes
		}
	}
	r.budget.Release(bytes)
	if err != nil {
		return tss
	}
	tss = tss[:0]
	for _, it := range items {
		if !it.extra && !it.parked {
			tss = append(tss, it.ts)
		}
	}
	r.wm.DoneAll(tss)
	r.mu.Lock()
	n := 0
	for i := 0; i < len(items); {
		j := i + 1
		for j < len(items) && items[j].kind == items[i].kind && items[j].parked == items[i].parked {
			j++
		}
		if !items[i].parked {
			r.counts[items[i].kind] += int64(j - i)
			n += j - i
		}
		i = j
	}
	r.rate.add(n)
	r.lastAppliedWall = time.Now()
	r.mu.Unlock()
	return tss
}

// expand appends batch's writes to out: an item that carries its entry
// (dispatchCRUD) becomes the writes Translator makes of it, in order, all
// of its document; the others are taken as they are. An entry that makes
// no write is done here. ws is scratch space, returned for reuse.
func (r *Replayer) expand(batch, out []item, ws []oplog.Write) ([]item, []oplog.Write, error) {
	for _, it := range batch {
		if it.op.Op() == 0 {
			out = append(out, it)
			continue
		}
		op := it.op
		it.op = oplog.Entry{}
		var err error
		ws, err = r.o.Translator.Append(ws[:0], op)
		if oplog.NeedsRefetch(err) && op.Kind() == oplog.Update {
			// A field name no update path can address ($setField on a
			// name with '.' or '$'), a binary diff of a compressed
			// bucket: the document is re-read from the source.
			it.kind, it.cmd = kindRefetch, cmdRefetch
			out = append(out, it)
			continue
		}
		if err == nil && it.filter != nil && len(ws) > 0 {
			ws, err = r.subset(it, op, ws)
		}
		if err != nil {
			r.budget.Release(it.bytes)
			return out, ws, fmt.Errorf("replay: %w", err)
		}
		if len(ws) == 0 {
			r.budget.Release(it.bytes)
			r.wm.Done(it.ts)
			continue
		}
		ws = shardKeyed(it.tk, ws)
		for j, w := range ws {
			if r.o.ShardMember {
				w = keyed(w, it.key)
			}
			x := it
			x.model, x.cmd = w.Model, commandOf(w.Model)
			x.unconfirmed = w.Unconfirmed && !r.o.ShardMember
			if j < len(ws)-1 {
				x.extra, x.bytes = true, 0
			}
			out = append(out, x)
		}
	}
	clear(ws)
	return out, ws, nil
}

// applyRun applies one run.
func (r *Replayer) applyRun(ctx context.Context, rn run) error {
	if rn.items = r.parkedOut(rn.items); len(rn.items) == 0 {
		return nil
	}
	switch rn.cmd {
	case cmdRefetch:
		for _, it := range rn.items {
			if err := r.refetch(ctx, it); err != nil {
				return err
			}
		}
		return nil
	case cmdInsert:
		return r.applyInserts(ctx, rn.items)
	case cmdUpdate:
		return r.applyUpdates(ctx, rn.items)
	}
	return r.applyBatch(ctx, rn.items)
}

// applyInserts inserts a run's documents in one unordered command. A
// document that exists already (the copy/replay overlap, a resume) is
// then replaced by its key with the inserted version: later writes bring
// it where the source has it, as they do over the full copy.
func (r *Replayer) applyInserts(ctx context.Context, batch []item) error {
	var rt retry
	for {
		_, err := r.command(ctx, cmdInsert, batch)
		if err == nil {
			return nil
		}
		if dup, ok := duplicates(err, len(batch)); ok {
			return r.replaceExisting(ctx, batch, dup)
		}
		if r.classify(err) != sink.Retryable || ctx.Err() != nil {
			return fmt.Errorf("replay into %s: %w", batch[0].ns, err)
		}
		r.log.Warn("retrying replay batch", "ns", batch[0].ns.String(), "attempt", rt.n()+1, "err", err)
		if !rt.wait(ctx, err) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("replay into %s: %w", batch[0].ns, err)
		}
		// The whole run again: inserts that landed meet a duplicate key
		// and are replaced with the same document.
	}
}

// duplicates returns the indexes of the writes of an unordered insert
// command that met a duplicate key, when those are its only errors.
func duplicates(err error, n int) ([]int, bool) {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || len(bwe.WriteErrors) == 0 || bwe.WriteConcernError != nil {
		return nil, false
	}
	idx := make([]int, 0, len(bwe.WriteErrors))
	for _, we := range bwe.WriteErrors {
		if we.Code != sink.CodeDuplicateKey || we.Index < 0 || we.Index >= n {
			return nil, false
		}
		idx = append(idx, we.Index)
	}
	return idx, true
}

// replaceExisting replaces, in order, the documents of the inserts at idx
// by their keys, as upserts. A duplicate key there (a unique secondary
// index) is the overlap's to tolerate or an error (applyBatch).
func (r *Replayer) replaceExisting(ctx context.Context, batch []item, idx []int) error {
	items := make([]item, len(idx))
	for i, k := range idx {
		it := batch[k]
		doc, ok := sink.RawDocument(it.model.(*mongo.InsertOneModel).Document)
		if !ok {
			return fmt.Errorf("replay into %s: an insert's document is not raw BSON", it.ns)
		}
		it.model = sink.Replace(it.key, doc)
		it.cmd = cmdUpdate
		items[i] = it
	}
	r.log.Debug("inserts met existing documents; replaced them", "ns", batch[0].ns.String(), "documents", len(items))
	return r.applyBatch(ctx, items)
}

// applyBatch writes a run of one kind in order, retrying retryable
// errors and stepping over duplicate keys of the copy/replay overlap.
func (r *Replayer) applyBatch(ctx context.Context, batch []item) error {
	return r.applyOrdered(ctx, batch, false, false)
}

// applyParked is applyBatch for a parked document's writes, on its own
// goroutine (conflict.go): a write that meets another document with its
// _id waits where it is, unless waited (batch[0] has waited already),
// and is stepped over if it meets it again after its wait.
func (r *Replayer) applyParked(ctx context.Context, batch []item, waited bool) error {
	return r.applyOrdered(ctx, batch, true, waited)
}

// applyOrdered is applyBatch; inline: a write that meets a document with
// its _id waits where it is instead of parking its document; waited:
// batch[0] has waited already.
func (r *Replayer) applyOrdered(ctx context.Context, batch []item, inline, waited bool) error {
	_, err := r.applyOrderedN(ctx, batch, inline, waited)
	return err
}

// applyOrderedN is applyOrdered, returning the documents its delete
// commands removed (known: every command's reply was read).
func (r *Replayer) applyOrderedN(ctx context.Context, batch []item, inline, waited bool) (reply, error) {
	var rt retry
	removed := reply{known: true}
	for len(batch) > 0 {
		rep, err := r.command(ctx, batch[0].cmd, batch)
		removed.known = removed.known && rep.known
		removed.n += rep.n
		if cerr := r.confirm(ctx, batch, rep); cerr != nil {
			return removed, cerr
		}
		if err == nil {
			return removed, nil
		}
		switch r.classify(err) {
		case sink.Retryable:
			if ctx.Err() != nil {
				return removed, fmt.Errorf("replay into %s: %w", batch[0].ns, err)
			}
			r.log.Warn("retrying replay batch", "ns", batch[0].ns.String(), "attempt", rt.n()+1, "err", err)
			if !rt.wait(ctx, err) {
				if ctx.Err() != nil {
					return removed, ctx.Err()
				}
				return removed, fmt.Errorf("replay into %s: %w", batch[0].ns, err)
			}
			continue // writes are idempotent: the whole batch again
		case sink.Conflict:
			var bwe mongo.BulkWriteException
			if !errors.As(err, &bwe) || len(bwe.WriteErrors) == 0 {
				return removed, fmt.Errorf("replay into %s: %w", batch[0].ns, err)
			}
			k := bwe.WriteErrors[0].Index
			it := batch[k]
			if r.o.ShardMember && conflictOnID(it, bwe.WriteErrors[0]) {
				// Writes before k were applied (ordered). k waits for
				// the other subtasks once, then goes again; if it still
				// meets the other document, that one is newer.
				if k > 0 || !waited {
					r.hs.met()
					if !inline && r.o.Board != nil {
						batch, waited = r.park(batch[k:]), false
						continue
					}
					if err := r.waitConflict(ctx, it); err != nil {
						return removed, err
					}
					batch, waited = batch[k:], true
					continue
				}
				if err := r.settleConflict(ctx, it); err != nil {
					return removed, err
				}
				batch, waited = batch[1:], false
				continue
			}
			if !r.inOverlap(it.ns, it.ts) {
				return removed, fmt.Errorf("replay into %s at %d,%d: %w: a unique index on the target refuses a write the source accepted; "+
					"the target holds documents the source does not (written outside this task?)", it.ns, it.ts.T, it.ts.I, err)
			}
			// Overlap: the copy already holds a newer state; later entries
			// bring the document where the source has it. Writes before k
			// were applied (ordered); k is stepped over; the rest go again.
			r.mu.Lock()
			r.tolerated++
			r.mu.Unlock()
			r.log.Debug("duplicate key tolerated in the copy/replay overlap", "ns", it.ns.String(), "ts", it.ts)
			batch, waited = batch[k+1:], false
			continue
		default:
			if k, ok := stalePath(err, batch); ok {
				// Writes before k were applied (ordered); the document of
				// k is written as the source has it now, and the rest go
				// again.
				r.log.Info("an update does not fit the target's newer document (an older entry applied again); the document is re-read from the source",
					"ns", batch[k].ns.String(), "ts", batch[k].ts, "err", err)
				if err := r.refetch(ctx, batch[k]); err != nil {
					return removed, err
				}
				batch, waited = batch[k+1:], false
				continue
			}
			return removed, fmt.Errorf("replay into %s: %w", batch[0].ns, err)
		}
	}
	return removed, nil
}

// classify is sink.Classify, with an abandoned attempt retryable.
func (r *Replayer) classify(err error) sink.Class {
	if errors.Is(err, errWriteTimeout) {
		return sink.Retryable
	}
	return sink.Classify(err)
}

// command sends one command: batch's writes, all of kind cmd and of one
// namespace (an insert command unordered, the others ordered), within
// the write timeout. It counts the command and observes its duration.
func (r *Replayer) command(ctx context.Context, cmd cmdKind, batch []item) (reply, error) {
	models := make([]mongo.WriteModel, len(batch))
	for i, it := range batch {
		models[i] = it.model
	}
	if err := r.routeWrites(ctx, batch, models); err != nil {
		return reply{}, err
	}
	if len(models) == 1 && models[0] == nil {
		return reply{}, nil // nothing to send (routeWrites)
	}
	r.sent(cmd, len(batch))
	started := time.Now()
	actx, cancel := context.WithTimeout(ctx, r.writeTimeout())
	rep, err := r.apply(actx, batch[0].ns, cmd, models, batch)
	if err != nil && actx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w: no answer within %s", errWriteTimeout, r.writeTimeout())
	}
	cancel()
	if r.o.ObserveWrite != nil {
		r.o.ObserveWrite(batch[0].kind, time.Since(started))
	}
	return rep, err
}

// sent counts a command and the writes it carries.
func (r *Replayer) sent(cmd cmdKind, writes int) {
	r.commands[cmd].Add(1)
	r.writesSent[cmd].Add(int64(writes))
}

// applier returns what sends a command: Options.ApplyAt, Options.Apply
// or a bulk write on the target; with Options.SerialUpdates, update and
// delete commands to one database wait for their turn (a FerretDB v1
// target: its SQLite takes one write at a time, and concurrent deletes
// by _id cost more than the same deletes one after the other: 20 of them
// on 50,000 documents took 10.3-12.0 s from 4 clients, 8.3-8.7 s from
// one, load average 8).
func (r *Replayer) applier() func(ctx context.Context, ns catalog.Namespace, cmd cmdKind, models []mongo.WriteModel, batch []item) (reply, error) {
	apply := r.sender()
	if !r.o.SerialUpdates {
		return apply
	}
	return func(ctx context.Context, ns catalog.Namespace, cmd cmdKind, models []mongo.WriteModel, batch []item) (reply, error) {
		if cmd != cmdUpdate && cmd != cmdDelete {
			return apply(ctx, ns, cmd, models, batch)
		}
		release, err := r.updateTurns.Take(ctx, ns.DB)
		if err != nil {
			return reply{}, err
		}
		defer release()
		return apply(ctx, ns, cmd, models, batch)
	}
}

// sender returns what sends a command: Options.ApplyAt, Options.Apply or
// a bulk write on the target, with what the reply tells (nothing through
// Apply and ApplyAt).
func (r *Replayer) sender() func(ctx context.Context, ns catalog.Namespace, cmd cmdKind, models []mongo.WriteModel, batch []item) (reply, error) {
	switch {
	case r.o.ApplyAt != nil:
		return func(ctx context.Context, ns catalog.Namespace, _ cmdKind, models []mongo.WriteModel, batch []item) (reply, error) {
			at := make([]bson.Timestamp, len(batch))
			for i, it := range batch {
				at[i] = it.ts
			}
			return reply{}, r.o.ApplyAt(ctx, ns, models, at)
		}
	case r.o.Apply != nil:
		return func(ctx context.Context, ns catalog.Namespace, _ cmdKind, models []mongo.WriteModel, _ []item) (reply, error) {
			return reply{}, r.o.Apply(ctx, ns, models)
		}
	}
	// Commands built from the raw documents (sink.AppendWriteCommand),
	// except on a sharded target: a write there may change a document's
	// shard-key value, which a cluster takes only as a retryable write
	// (with a txnNumber, which only the driver's BulkWrite adds).
	raw := r.o.ShardKeys == nil
	return func(ctx context.Context, ns catalog.Namespace, cmd cmdKind, models []mongo.WriteModel, _ []item) (reply, error) {
		if raw {
			if sent, rep, err := r.rawCommand(ctx, ns, cmd, models); sent {
				return rep, err
			}
		}
		res, err := r.o.Target.Database(ns.DB).Collection(ns.Coll).BulkWrite(ctx, models,
			options.BulkWrite().SetOrdered(cmd != cmdInsert).SetBypassDocumentValidation(true))
		return bulkReply(res), err
	}
}

// rawCommand sends models as one insert (unordered), update or delete
// command built from their raw documents, and reports false (having sent
// nothing) when the builder does not cover them, with what its reply
// tells. Its errors are those of the driver's BulkWrite (write errors as
// a mongo.BulkWriteException).
func (r *Replayer) rawCommand(ctx context.Context, ns catalog.Namespace, cmd cmdKind, models []mongo.WriteModel) (bool, reply, error) {
	kind := sink.InsertCommand
	switch cmd {
	case cmdUpdate:
		kind = sink.UpdateCommand
	case cmdDelete:
		kind = sink.DeleteCommand
	}
	buf := getCmdBuf()
	defer putCmdBuf(buf)
	b, ok := sink.AppendWriteCommand((*buf)[:0], ns.Coll, kind, models, cmd != cmdInsert, r.o.WriteConcern)
	*buf = b
	if !ok {
		return false, reply{}, nil
	}
	raw, err := sink.RunWriteCommand(ctx, r.o.Target.Database(ns.DB), b, models)
	return true, replyOf(cmd, raw), err
}

// errWriteTimeout marks a bulk write abandoned after WriteTimeout.
var errWriteTimeout = errors.New("write batch timed out")

func (r *Replayer) writeTimeout() time.Duration {
	if r.o.WriteTimeout > 0 {
		return r.o.WriteTimeout
	}
	return 2 * time.Minute
}
