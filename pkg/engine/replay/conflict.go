package replay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// An _id on two shards. MongoDB enforces _id uniqueness per shard only:
// with a shard key that does not start with _id, an application may
// delete _id X on one shard and insert another document X with another
// shard-key value on another shard (the way to change a shard key before
// 4.2, still common), and a shard-key change across shards does the same
// in one transaction. Two subtasks apply the two writes in either order.
//
// Every write of a shard's subtask is filtered on its whole document key
// (an insert's too: srckey.go), so an update or a delete of one shard's
// document never touches another shard's document with the same _id. A
// write that meets such a document, an upsert that fails on the _id
// index (E11000), waits until every other subtask has applied everything
// of its shard below the write's ts (waitConflict), then goes again. If
// it still meets it, that document is either newer than the write, or
// older with its delete above the write in cluster time (two clients,
// two routers: settleConflict); the source, read by the write's document
// key, tells which. A newer one stays and the write is stepped over and
// counted; its document's later writes, filtered on its key, then match
// nothing, and the newer document's writes bring it where the source has
// it. An older one is removed and the write's document written as the
// source has it. Nothing waits unless a write meets a conflict, and a
// wait asks for nothing past the
// write's own ts (docs/sharded.md, "Why no cycle of waits forms").

// Parking. A write that meets another shard's document waits without
// holding anything else: its document is parked (park), with its writes
// from that one on, and the writers go on with the other documents; a
// goroutine of its own (unpark) waits for the other subtasks, applies
// the parked writes in order, waiting and stepping over inline, and
// unparks the document. A later write of a parked document joins the
// parked ones (parkedOut) instead of going out before them. The
// subtask's durable position stays below the first parked write until
// it is applied, and nothing else waits: a wait that held the writer,
// and with it the other writers' batches it sends (gate.go), could keep
// this subtask's position below a write another subtask waits for while
// that one's position is what this wait needs.

// parking is a subtask's parked documents.
type parking struct {
	mu   sync.Mutex
	docs map[docID]*[]item
	n    atomic.Int64 // len(docs), read without mu on the common path
	// run starts an unpark with the writers (their errgroup).
	run func(func() error)
}

// docID is a document as the writers partition it: its namespace and
// the hash of its key (see bucket).
type docID struct {
	ns   catalog.Namespace
	hash uint64
}

func idOf(it item) docID { return docID{ns: it.ns, hash: it.hash} }

// park parks the document of its[0], with its[0] and the writes after it
// of that document in its (a command's writes from the one that met the
// conflict). It moves them, marked parked (writer.finish leaves them),
// to the end of its, in place: its shares its array with the writes the
// writer finishes. It returns the others, to apply now.
func (r *Replayer) park(its []item) []item {
	d := idOf(its[0])
	rest, mine := partition(its, func(it item) bool { return idOf(it) == d })
	p := &r.parked
	p.mu.Lock()
	if p.docs == nil {
		p.docs = map[docID]*[]item{}
	}
	if l := p.docs[d]; l != nil {
		*l = append(*l, mine...) // parked already: after the others
		p.mu.Unlock()
		return rest
	}
	p.docs[d] = &mine
	p.n.Add(1)
	p.mu.Unlock()
	p.run(func() error { return r.unpark(d) })
	return rest
}

// parkedOut parks the writes of its whose document is parked, after its
// parked writes, as park does, and returns the others (its itself when
// nothing is parked: the common path).
func (r *Replayer) parkedOut(its []item) []item {
	p := &r.parked
	if p.n.Load() == 0 {
		return its
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rest, parked := partition(its, func(it item) bool { return p.docs[idOf(it)] != nil })
	for _, it := range parked {
		l := p.docs[idOf(it)]
		*l = append(*l, it)
	}
	return rest
}

// partition moves the writes of its that out picks to its end, in
// order, marked parked, and returns the others (its front) and copies
// of those picked, unmarked.
func partition(its []item, out func(item) bool) (rest, picked []item) {
	n := 0
	for _, it := range its {
		if out(it) {
			picked = append(picked, it)
			continue
		}
		its[n] = it
		n++
	}
	if len(picked) == 0 {
		return its, nil
	}
	for i, it := range picked {
		it.parked = true
		its[n+i] = it
	}
	return its[:n], picked
}

// unpark waits, then applies document d's parked writes in order, until
// none is left; then the document is unparked.
func (r *Replayer) unpark(d docID) error {
	ctx := r.runCtx
	p := &r.parked
	first := true
	for {
		p.mu.Lock()
		l := p.docs[d]
		if len(*l) == 0 {
			delete(p.docs, d)
			p.n.Add(-1)
			p.mu.Unlock()
			return nil
		}
		it := (*l)[0]
		*l = (*l)[1:]
		p.mu.Unlock()
		waited := first
		if first {
			if err := r.waitConflict(ctx, it); err != nil {
				r.budget.Release(it.bytes)
				return err
			}
			first = false
		}
		// The first write waited for its own ts; a later one that meets
		// another document waits for its own.
		one := []item{it}
		err := r.applyParked(ctx, one, waited)
		r.finishItems(one, err, nil)
		if err != nil {
			return err
		}
	}
}

// conflictOnID reports whether a duplicate key error is an upsert of a
// shard's subtask, filtered on _id and more (its document key), that met
// on the _id index a document with its _id and another shard-key value.
func conflictOnID(it item, we mongo.BulkWriteError) bool {
	f, upsert := filterOf(it.model)
	if !upsert || f == nil {
		return false
	}
	if els, err := f.Elements(); err != nil || len(els) < 2 {
		return false
	}
	if _, err := f.LookupErr("_id"); err != nil {
		return false
	}
	return onID(we)
}

// waitConflict waits, with the writer that applies it, until every other
// subtask's shard is settled below it.ts (board.Position.Settled):
// applied up to it, with no transaction begun before it still to apply.
// While it waits, the subtask publishes it.ts as what it needs, and its
// durable position stays below it.ts (the write is not applied).
func (r *Replayer) waitConflict(ctx context.Context, it item) error {
	if r.o.Board == nil {
		return nil
	}
	// The writers outlive the run's context to drain on a clean stop: a
	// wait ends with the run, its write unapplied.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(r.runCtx, cancel)()
	started := time.Now()
	r.hs.conflictWait(it.ts, true)
	defer func() {
		r.hs.conflictWait(it.ts, false)
		r.hs.mu.Lock()
		r.hs.conflictWaits++
		r.hs.conflictTime += time.Since(started)
		r.hs.mu.Unlock()
	}()
	for {
		ps, err := r.o.Board.Positions(ctx)
		if err == nil && settled(r.o.Shard, ps, it.ts) {
			return nil
		}
		if err != nil {
			r.log.Warn("shard positions not read; retrying", "shard", r.o.Shard, "err", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replay: a write waiting for the other shards (an _id on two shards): %w", ctx.Err())
		case <-time.After(r.pollInterval()):
		}
	}
}

// settled reports whether every other subtask's shard is settled below
// ts.
func settled(self string, ps []board.Position, ts bson.Timestamp) bool {
	for _, p := range ps {
		if p.Shard != self && !p.Settled(self, ts) {
			return false
		}
	}
	return true
}

// conflictWait records that a writer waits at ts (on), or no longer
// does.
func (h *holds) conflictWait(ts bson.Timestamp, on bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conflicts == nil {
		h.conflicts = map[bson.Timestamp]int{}
	}
	if on {
		h.conflicts[ts]++
		return
	}
	if h.conflicts[ts]--; h.conflicts[ts] <= 0 {
		delete(h.conflicts, ts)
	}
}

// lowestConflict returns the lowest ts a writer waits at, with h.mu held.
func (h *holds) lowestConflict() bson.Timestamp {
	var low bson.Timestamp
	for ts := range h.conflicts {
		if low.IsZero() || ts.Before(low) {
			low = ts
		}
	}
	return low
}
