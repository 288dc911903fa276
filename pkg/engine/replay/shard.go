package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// The ordering rule of a subtask of a sharded source (Options.Board set)
// is written out, with its conditions and the argument that no cycle of
// waits forms, in docs/sharded.md ("The ordering guarantee and its
// cost"). Its parts: migration.go recognises migrations into the shard by
// their config.* markers; holds.go holds the writes they, and fromMigrate
// entries, could order wrongly; this file sends writes or holds them and
// makes a transaction's inserting part wait at its commit for the
// participants participants.go finds; stale.go steps over a write
// applied again past a newer version of its document; the checkpoint
// (checkpoint.go) saves open transactions, migrations and commit
// decisions as state, so a subtask's durable position reaches the entry
// it waits at.

// errRetired ends a retired subtask's dispatch.
var errRetired = errors.New("shard retired")

// send queues a write for its writer, or holds it (Options.Board).
// Writes wait in the dispatcher's pending slice of their writer until
// sendBatch of them are there, the reader's batch ends (flush), or the
// dispatcher waits for the writers (drain). A subtask of a sharded
// source sends each write at once: held writes, released by holdLoop,
// must never overtake a write pending here.
func (r *Replayer) send(ctx context.Context, it item) error {
	if r.budget.InUse()+it.bytes > r.budget.Limit() {
		// Acquire may wait for the writers: give them what is pending
		// first. Only the dispatcher acquires, so a budget that fits now
		// still fits below.
		if err := r.flush(ctx); err != nil {
			return err
		}
	}
	if err := r.budget.Acquire(ctx, it.bytes); err != nil {
		return err
	}
	if r.o.Board != nil && r.hs.hold(it) {
		return nil
	}
	q := r.bucket(&it)
	p := r.pending[q]
	*p = append(*p, it)
	if len(*p) >= sendBatch || r.o.Board != nil {
		return r.flushQueue(ctx, q)
	}
	return nil
}

// sendBatch is the most writes the dispatcher sends a writer at once.
const sendBatch = 64

// flush sends every pending write to its writer.
func (r *Replayer) flush(ctx context.Context) error {
	for q := range r.pending {
		if err := r.flushQueue(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// flushQueue sends writer q's pending writes.
func (r *Replayer) flushQueue(ctx context.Context, q int) error {
	its := r.pending[q]
	if len(*its) == 0 {
		return nil
	}
	r.pending[q] = getItems()
	return r.put(ctx, q, its)
}

// put queues items whose bytes are acquired.
func (r *Replayer) put(ctx context.Context, q int, its *[]item) error {
	select {
	case r.queues[q] <- its:
		return nil
	case <-ctx.Done():
		for _, it := range *its {
			r.budget.Release(it.bytes)
		}
		return ctx.Err()
	}
}

// itemSlices recycles the slices writes travel in.
var itemSlices = sync.Pool{New: func() any { s := make([]item, 0, sendBatch); return &s }}

func getItems() *[]item { return itemSlices.Get().(*[]item) }

// putItems recycles a slice once its items are copied out.
func putItems(its *[]item) {
	clear(*its)
	*its = (*its)[:0]
	itemSlices.Put(its)
}

// noteSkip notes an entry skipped for reason; a subtask bars a namespace
// after a migration's entry.
func (r *Replayer) noteSkip(e oplog.Entry, ts bson.Timestamp, reason string) {
	if r.o.Board == nil {
		return
	}
	if reason == oplog.ReasonInternal {
		r.hs.marker(e, ts, r.o.Shard)
		return
	}
	if reason != oplog.ReasonFromMigrate {
		return
	}
	ns := e.Namespace()
	if e.Op() == oplog.OpCommand {
		ns = catalog.Namespace{} // an applyOps: every namespace
	}
	r.hs.migrated(ns, ts)
}

// holdLoop releases held writes as the other subtasks' positions allow.
func (r *Replayer) holdLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.pollInterval()):
		}
		ps, err := r.o.Board.Positions(ctx)
		if err != nil {
			r.log.Warn("shard positions not read; retrying", "shard", r.o.Shard, "err", err)
			continue
		}
		its := r.hs.release(r.o.Shard, ps)
		for _, it := range its {
			if err := r.put(ctx, r.bucket(&it), &[]item{it}); err != nil {
				return err
			}
		}
		if len(its) > 0 {
			r.log.Debug("held writes released", "shard", r.o.Shard, "writes", len(its))
			r.hs.sent(its)
		}
		if err := r.runRechecks(ctx, ps); err != nil {
			return err
		}
	}
}

// pollInterval is how often holds look at the board.
func (r *Replayer) pollInterval() time.Duration {
	if r.o.HoldPoll > 0 {
		return r.o.HoldPoll
	}
	return min(r.o.CheckpointInterval/4, 250*time.Millisecond)
}

// insertsDocuments reports whether a unit inserts a document.
func insertsDocuments(u oplog.Unit) bool {
	for _, op := range u.Ops {
		if op.Kind() == oplog.Insert {
			return true
		}
	}
	return false
}

// commitTS returns a commitTransaction entry's commitTimestamp, the same
// on every shard of the transaction (its own ts when absent).
func commitTS(e oplog.Entry) bson.Timestamp {
	if t, i, ok := e.O().Lookup("commitTimestamp").TimestampOK(); ok {
		return bson.Timestamp{T: t, I: i}
	}
	return e.TS()
}

// waitCommit holds a multi-shard transaction's part that inserts
// documents until every other participant's subtask has applied what
// precedes its commit timestamp cts: the participants the coordinator's
// decision names (participants.go), every other subtask while no
// decision for it is on the board. While it waits, the part's entries
// are saved with the checkpoint (Options.SaveState), which reaches just
// below the commit entry: a subtask waiting on this one's position at or
// below cts goes on.
func (r *Replayer) waitCommit(ctx, wctx context.Context, u oplog.Unit, cts bson.Timestamp) error {
	r.hs.mu.Lock()
	r.hs.waiting, r.hs.first, r.hs.needs = cts, u.FirstTS, cts
	if r.o.SaveState != nil {
		r.hs.first = u.TS
	}
	r.hs.commitWait++
	r.hs.mu.Unlock()
	started := time.Now()
	defer func() {
		r.hs.mu.Lock()
		r.hs.waiting, r.hs.first, r.hs.needs = bson.Timestamp{}, bson.Timestamp{}, bson.Timestamp{}
		r.hs.waitTime += time.Since(started)
		r.hs.mu.Unlock()
	}()
	var id string
	r.mu.Lock()
	if r.applying != nil {
		id = r.applying.id
	}
	r.mu.Unlock()
	for {
		ps, err := r.o.Board.Positions(ctx)
		var waitOn []board.Position
		subset := false
		if err == nil {
			waitOn, subset = commitWaitsFor(r.o.Shard, ps, r.hs.decisions(), id, cts)
		}
		if err == nil && reachedBy(r.o.Shard, waitOn, cts, cts) {
			r.hs.mu.Lock()
			r.hs.needs = u.TS
			r.hs.mu.Unlock()
			if !applyingPart(r.o.Shard, ps, id, u.TS) {
				if !subset {
					r.hs.mu.Lock()
					r.hs.commitWaitAll++
					r.hs.mu.Unlock()
				}
				return nil
			}
		}
		if err != nil {
			r.log.Warn("shard positions not read; retrying", "shard", r.o.Shard, "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wctx.Done():
			return fmt.Errorf("writer stopped: %w", context.Cause(wctx))
		case <-time.After(r.pollInterval()):
		}
	}
}

// applyingPart reports whether another subtask is about to apply its
// own part of transaction id, this subtask's part waiting at its commit
// entry at ts: it has the transaction prepared and does not wait for
// this subtask to pass ts (its Needs is not past ts; at ts, the shard
// whose name sorts first goes on). The parts then
// apply one after the other, the other's first: a target whose delete is
// not atomic on the filter (FerretDB v1 removes by _id a document the
// rest of the filter no longer matches) never sees an old shard's delete
// of a shard-key change land after the new shard's insert. This wait is
// in no cycle (docs/sharded.md): the other subtask reaches and applies
// its part without this one, or it waits for this one, which then goes
// on.
func applyingPart(self string, ps []board.Position, id string, ts bson.Timestamp) bool {
	if id == "" {
		return false
	}
	for _, p := range ps {
		// Two parts that wait at the same ts (shards' clocks may
		// agree): the one on the shard whose name sorts first goes on.
		past := p.Needs.After(ts) || p.Needs.Equal(ts) && p.Shard > self
		if p.Shard != self && !p.Retired && !p.Drained && slices.Contains(p.Prepared, id) && !past {
			return true
		}
	}
	return false
}

// publish puts the subtask's position on the board.
func (r *Replayer) publish(ctx context.Context, retired bool) error {
	r.mu.Lock()
	p := board.Position{Shard: r.o.Shard, Read: r.readTS, Applied: r.savedTS, Retired: retired || r.drainedOut.Load(),
		Prepared: r.asm.Prepared()}
	if a := r.applying; a != nil && a.id != "" {
		p.Prepared = append(p.Prepared, a.id)
	}
	if r.oldestOpen != nil {
		p.OpenFrom = *r.oldestOpen
	}
	if a := r.applying; a != nil && (p.OpenFrom.IsZero() || a.first.Before(p.OpenFrom)) {
		p.OpenFrom = a.first
	}
	r.mu.Unlock()
	p.Needs = r.hs.blockedOn()
	p.Decided = r.hs.decisions()
	r.hs.mu.Lock()
	if !r.hs.waiting.IsZero() && p.Applied.Compare(board.Prev(r.hs.first)) >= 0 {
		p.Waiting = r.hs.waiting
	}
	r.hs.mu.Unlock()
	if err := r.o.Board.Publish(ctx, p); err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	return nil
}

// Retire ends a subtask whose shard was removed: once its reader has
// nothing more to read and every write is applied, Run saves the
// checkpoint, publishes the position as retired (it holds nobody back
// any more) and returns nil.
func (r *Replayer) Retire() {
	r.hs.mu.Lock()
	r.hs.retire = true
	r.hs.mu.Unlock()
}

func (r *Replayer) retiring() bool {
	r.hs.mu.Lock()
	defer r.hs.mu.Unlock()
	return r.hs.retire
}
