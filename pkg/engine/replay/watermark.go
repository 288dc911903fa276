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
// The replayer registers and finishes positions in batches (DispatchAll,
// DoneAll), one lock per batch; a position is found by binary search,
// since the positions in flight ascend, or by a scan when a source
// delivered them out of order.
type Watermark struct {
	mu sync.Mutex
	// queue[head:] are the positions in flight, in dispatch order
	// (ascending unless the source was out of order), with their
	// unfinished writes.
	queue   []pendingTS
	head    int
	applied bson.Timestamp
}

type pendingTS struct {
	ts      bson.Timestamp
	pending int
}

// Position is a dispatched position and the number of writes it produced.
type Position struct {
	TS     bson.Timestamp
	Writes int
}

// NewWatermark starts at an applied position.
func NewWatermark(applied bson.Timestamp) *Watermark { return &Watermark{applied: applied} }

// Dispatch registers position ts with n writes in flight; ts must not be
// lower than any earlier one.
func (w *Watermark) Dispatch(ts bson.Timestamp, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.dispatch(ts, n)
	w.advance()
}

// DispatchAll registers positions in order, as Dispatch does one by one.
func (w *Watermark) DispatchAll(ps []Position) {
	if len(ps) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range ps {
		w.dispatch(p.TS, p.Writes)
	}
	w.advance()
}

func (w *Watermark) dispatch(ts bson.Timestamp, n int) {
	if k := len(w.queue); k > w.head && w.queue[k-1].ts == ts {
		w.queue[k-1].pending += n
		return
	}
	w.queue = append(w.queue, pendingTS{ts: ts, pending: n})
}

// Done marks one write of position ts as applied.
func (w *Watermark) Done(ts bson.Timestamp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done(ts, w.head)
	w.advance()
}

// DoneAll marks one write of each position in tss as applied; tss ascends
// (repeats allowed), as the writes of one writer do.
func (w *Watermark) DoneAll(tss []bson.Timestamp) {
	if len(tss) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	from := w.head
	for _, ts := range tss {
		from = w.done(ts, from)
	}
	w.advance()
}

// done finds ts at or after index from and counts one write of it done;
// it returns where to search for a later position.
func (w *Watermark) done(ts bson.Timestamp, from int) int {
	q := w.queue[from:]
	i := sort.Search(len(q), func(i int) bool { return q[i].ts.Compare(ts) >= 0 })
	if i < len(q) && q[i].ts == ts && q[i].pending > 0 {
		q[i].pending--
		return from + i
	}
	// Positions dispatched out of order (a source whose oplog is not in ts
	// order) are not sorted: look at every position in flight, the first
	// one of ts still waiting for writes.
	for i := w.head; i < len(w.queue); i++ {
		if w.queue[i].ts == ts && w.queue[i].pending > 0 {
			w.queue[i].pending--
			break
		}
	}
	return w.head
}

// Applied returns the checkpoint position.
func (w *Watermark) Applied() bson.Timestamp {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.applied
}

// InFlight returns the number of positions not yet applied.
func (w *Watermark) InFlight() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.queue) - w.head
}

func (w *Watermark) advance() {
	for w.head < len(w.queue) && w.queue[w.head].pending <= 0 {
		w.applied = w.queue[w.head].ts
		w.head++
	}
	if w.head > 1024 && w.head*2 > len(w.queue) {
		w.queue = append(w.queue[:0], w.queue[w.head:]...)
		w.head = 0
	}
}
