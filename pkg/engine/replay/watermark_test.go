package replay

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func ts(t uint32) bson.Timestamp { return bson.Timestamp{T: t, I: 1} }

func TestWatermarkAdvancesOnlyPastFinishedPositions(t *testing.T) {
	w := NewWatermark(ts(1))
	w.Dispatch(ts(2), 2) // two writes
	w.Dispatch(ts(3), 1)
	w.Dispatch(ts(4), 0) // a no-op: nothing to write
	if got := w.Applied(); got != ts(1) {
		t.Fatalf("applied = %v before anything finished, want %v", got, ts(1))
	}
	w.Done(ts(3)) // a later position finishes first
	if got := w.Applied(); got != ts(1) {
		t.Fatalf("applied = %v while ts 2 is in flight, want %v", got, ts(1))
	}
	w.Done(ts(2))
	if got := w.Applied(); got != ts(1) {
		t.Fatalf("applied = %v with one of ts 2's writes in flight, want %v", got, ts(1))
	}
	w.Done(ts(2))
	if got := w.Applied(); got != ts(4) {
		t.Fatalf("applied = %v after everything finished, want %v", got, ts(4))
	}
	if w.InFlight() != 0 {
		t.Fatalf("in flight = %d", w.InFlight())
	}
}

func TestWatermarkNeverMovesBackForEntriesReadAgain(t *testing.T) {
	w := NewWatermark(ts(10))
	w.Dispatch(ts(7), 1) // read again from before the start position
	w.Dispatch(ts(8), 0)
	w.Done(ts(7))
	if got := w.Applied(); got != ts(10) {
		t.Fatalf("applied = %v after entries below the start, want %v", got, ts(10))
	}
	w.Dispatch(ts(11), 1)
	w.Done(ts(11))
	if got := w.Applied(); got != ts(11) {
		t.Fatalf("applied = %v, want %v", got, ts(11))
	}
}

func TestWatermarkManyInFlight(t *testing.T) {
	const n = 5000
	w := NewWatermark(bson.Timestamp{})
	for i := uint32(1); i <= n; i++ {
		w.Dispatch(ts(i), 1)
	}
	// Finished in reverse: nothing moves until the first one is done.
	for i := uint32(n); i > 1; i-- {
		w.Done(ts(i))
	}
	if got := w.Applied(); !got.IsZero() {
		t.Fatalf("applied = %v with ts 1 in flight", got)
	}
	w.Done(ts(1))
	if got := w.Applied(); got != ts(n) || w.InFlight() != 0 {
		t.Fatalf("applied = %v, in flight %d, want %v and 0", got, w.InFlight(), ts(n))
	}
}

// TestWatermarkDoneAllInAnyOrder marks writes done in batches whose
// positions come in runs, out of order and repeated (as a writer's
// reordered batch has them), and checks after each batch that the
// watermark is the highest position at or below which every write is
// done: never past a write still in flight.
func TestWatermarkDoneAllInAnyOrder(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 3))
			w := NewWatermark(ts(1))
			pending := map[uint32]int{}
			var writes []uint32
			for p := uint32(2); p < 2000; p++ {
				n := rng.IntN(3) // 0: an entry with no write
				w.Dispatch(ts(p), n)
				pending[p] = n
				for range n {
					writes = append(writes, p)
				}
			}
			rng.Shuffle(len(writes), func(i, j int) { writes[i], writes[j] = writes[j], writes[i] })
			for len(writes) > 0 {
				k := min(1+rng.IntN(300), len(writes))
				batch := slices.Clone(writes[:k])
				writes = writes[k:]
				// Runs in order, as the planner makes them.
				for i := 0; i < len(batch); {
					j := min(i+1+rng.IntN(40), len(batch))
					slices.Sort(batch[i:j])
					i = j
				}
				tss := make([]bson.Timestamp, len(batch))
				for i, p := range batch {
					tss[i] = ts(p)
					pending[p]--
				}
				w.DoneAll(tss)
				want := uint32(1)
				for p := uint32(2); p < 2000 && pending[p] == 0; p++ {
					want = p
				}
				if got := w.Applied(); got != ts(want) {
					t.Fatalf("watermark %v, want %v", got, ts(want))
				}
			}
		})
	}
}

// TestWatermarkOpenPositionHoldsBack: an entry's writes are dispatched
// one after another (an applyOps, DDL between them draining the writers);
// while its position is open, finishing the writes dispatched so far
// does not pass it.
func TestWatermarkOpenPositionHoldsBack(t *testing.T) {
	w := NewWatermark(ts(1))
	w.Open(ts(2))
	w.Dispatch(ts(2), 1)
	w.Done(ts(2))
	w.Dispatch(ts(2), 0) // DDL applied
	if got := w.Applied(); got != ts(1) {
		t.Fatalf("applied = %v with ts 2 still being dispatched, want %v", got, ts(1))
	}
	if w.Writes() != 0 {
		t.Fatalf("writes = %d, want 0", w.Writes())
	}
	w.Dispatch(ts(2), 1) // the insert after the DDL
	w.Close(ts(2))
	if got := w.Applied(); got != ts(1) {
		t.Fatalf("applied = %v with a write of ts 2 in flight, want %v", got, ts(1))
	}
	w.Done(ts(2))
	if got := w.Applied(); got != ts(2) {
		t.Fatalf("applied = %v, want %v", got, ts(2))
	}
	w.Open(ts(3)) // an entry that makes no write (a no-op, an abort)
	w.Close(ts(3))
	if got := w.Applied(); got != ts(3) {
		t.Fatalf("applied = %v, want %v", got, ts(3))
	}
}
