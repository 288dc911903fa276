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
