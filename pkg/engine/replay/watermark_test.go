package replay

import (
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

func TestWatermarkBatches(t *testing.T) {
	w := NewWatermark(ts(1))
	w.DispatchAll([]Position{{ts(2), 2}, {ts(3), 0}, {ts(4), 1}, {ts(5), 3}})
	w.DoneAll([]bson.Timestamp{ts(4), ts(5), ts(5)}) // one writer's batch
	if got := w.Applied(); got != ts(1) {
		t.Fatalf("applied = %v while ts 2 is in flight, want %v", got, ts(1))
	}
	w.DoneAll([]bson.Timestamp{ts(2), ts(2)})
	if got := w.Applied(); got != ts(4) {
		t.Fatalf("applied = %v with one of ts 5's writes in flight, want %v", got, ts(4))
	}
	w.Dispatch(ts(5), 1) // more writes of the last position: merged
	w.DoneAll([]bson.Timestamp{ts(5), ts(5)})
	if got, n := w.Applied(), w.InFlight(); got != ts(5) || n != 0 {
		t.Fatalf("applied = %v, in flight %d; want %v, 0", got, n, ts(5))
	}
}

// A source whose oplog is not in ts order still drains.
func TestWatermarkOutOfOrder(t *testing.T) {
	w := NewWatermark(ts(1))
	w.DispatchAll([]Position{{ts(5), 1}, {ts(3), 1}, {ts(4), 1}})
	w.DoneAll([]bson.Timestamp{ts(3), ts(4)})
	w.Done(ts(5))
	if got, n := w.Applied(), w.InFlight(); got != ts(4) || n != 0 {
		t.Fatalf("applied = %v, in flight %d; want %v (the last dispatched), 0", got, n, ts(4))
	}
}

// Many positions in flight, finished by several writers in their own
// order: the watermark ends at the last one.
func TestWatermarkManyWriters(t *testing.T) {
	w := NewWatermark(ts(0))
	var ps []Position
	for i := uint32(1); i <= 5000; i++ {
		ps = append(ps, Position{TS: bson.Timestamp{T: 1, I: i}, Writes: 1})
	}
	w.DispatchAll(ps)
	for writer := uint32(3); writer > 0; writer-- {
		var tss []bson.Timestamp
		for i := uint32(1); i <= 5000; i++ {
			if i%3 == writer%3 {
				tss = append(tss, bson.Timestamp{T: 1, I: i})
			}
		}
		w.DoneAll(tss)
	}
	if got, n := w.Applied(), w.InFlight(); got != (bson.Timestamp{T: 1, I: 5000}) || n != 0 {
		t.Fatalf("applied = %v, in flight %d", got, n)
	}
}
