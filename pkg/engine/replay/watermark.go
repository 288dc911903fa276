package replay

import (
	"sort"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Watermark tracks which oplog positions are applied. Entries are
// dispatched in oplog order; each is done once every write it produced is
// on the target (or at once when it produced none). Applied returns the
// highest position at or below which everything is done: the checkpoint.
//
// It is the one place that keeps the replay's invariant (docs/architecture.md,
// "The checkpoint's invariant"): Applied never passes a position until
// every write of its entry, and of every entry before it, is acknowledged
// by the target. An entry's writes are not all known at once (an applyOps
// holds several operations, DDL among them drains the writers between
// them), so the dispatcher opens the entry's position before it queues
// anything (Open) and closes it once all of it is queued (Close): an
// open position is never passed, whatever of its writes are done.
type Watermark struct {
	mu sync.Mutex
	// pending counts unfinished writes per dispatched position, in order.
	queue   []pendingTS
	head    int
	applied bson.Timestamp
	// writes counts the writes dispatched and not yet done, over every
	// position (drain waits for it to reach zero).
	writes int
}

type pendingTS struct {
	ts      bson.Timestamp
	pending int
	open    bool // its entry is still being dispatched (Open)
}

// NewWatermark starts at an applied position.
func NewWatermark(applied bson.Timestamp) *Watermark { return &Watermark{applied: applied} }

// Dispatch registers position ts with n writes in flight; ts must not be
// lower than any earlier one.
func (w *Watermark) Dispatch(ts bson.Timestamp, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.add(ts, n, false)
	w.advance()
}

// Open registers position ts as an entry being dispatched: Applied does
// not pass it, whatever of its writes are done, until Close. ts must not
// be lower than any earlier position.
func (w *Watermark) Open(ts bson.Timestamp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.add(ts, 0, true)
}

// Close ends what Open began: every write of the entry at ts is
// dispatched, and the position is done once they are.
func (w *Watermark) Close(ts bson.Timestamp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	open := w.queue[w.head:]
	i := sort.Search(len(open), func(i int) bool { return open[i].ts.Compare(ts) >= 0 })
	if i < len(open) && open[i].ts == ts {
		open[i].open = false
	}
	w.advance()
}

// add counts n writes at ts, opening the position when open is set.
func (w *Watermark) add(ts bson.Timestamp, n int, open bool) {
	w.writes += n
	if k := len(w.queue); k > w.head && w.queue[k-1].ts == ts {
		w.queue[k-1].pending += n
		w.queue[k-1].open = w.queue[k-1].open || open
		return
	}
	w.queue = append(w.queue, pendingTS{ts: ts, pending: n, open: open})
}

// Done marks one write of position ts as applied.
func (w *Watermark) Done(ts bson.Timestamp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done(ts)
	w.advance()
}

// DoneAll is Done for each of tss, under one lock.
func (w *Watermark) DoneAll(tss []bson.Timestamp) {
	if len(tss) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	at := 0
	for _, ts := range tss {
		at = w.doneFrom(ts, at)
	}
	w.advance()
}

func (w *Watermark) done(ts bson.Timestamp) { w.doneFrom(ts, 0) }

// doneFrom marks one write of ts done and returns where ts lies among the
// open positions, to start the next search from: a batch's writes are
// mostly in ts order, a few positions apart.
func (w *Watermark) doneFrom(ts bson.Timestamp, at int) int {
	// The queue is in ts order: find ts by binary search, so a writer far
	// ahead of the slowest one does not scan everything in flight; from
	// at, by growing steps first, when ts lies at or after it.
	open := w.queue[w.head:]
	lo, hi := 0, len(open)
	if at < len(open) && open[at].ts.Compare(ts) <= 0 {
		lo = at
		for step := 1; ; step *= 2 {
			if lo+step >= len(open) || open[lo+step].ts.Compare(ts) >= 0 {
				hi = min(lo+step+1, len(open))
				break
			}
			lo += step
		}
	}
	i := lo + sort.Search(hi-lo, func(i int) bool { return open[lo+i].ts.Compare(ts) >= 0 })
	if i < len(open) && open[i].ts == ts {
		open[i].pending--
		w.writes--
	}
	return i
}

// Applied returns the checkpoint position.
func (w *Watermark) Applied() bson.Timestamp {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applied
}

// Frontier is Applied, or the position just below the first position not
// yet done when that is higher: positions are dispatched in oplog order,
// so everything read below it is done.
func (w *Watermark) Frontier() bson.Timestamp {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.head < len(w.queue) {
		if p := before(w.queue[w.head].ts); p.Compare(w.applied) > 0 {
			return p
		}
	}
	return w.applied
}

// InFlight returns the number of positions not yet applied.
func (w *Watermark) InFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) - w.head
}

// Writes returns the number of writes dispatched and not yet done.
func (w *Watermark) Writes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

func (w *Watermark) advance() {
	for w.head < len(w.queue) && w.queue[w.head].pending <= 0 && !w.queue[w.head].open {
		// Entries at or below the start position (read again) never
		// move the checkpoint back.
		if w.queue[w.head].ts.Compare(w.applied) > 0 {
			w.applied = w.queue[w.head].ts
		}
		w.head++
	}
	if w.head > 1024 && w.head*2 > len(w.queue) {
		w.queue = append(w.queue[:0], w.queue[w.head:]...)
		w.head = 0
	}
}
