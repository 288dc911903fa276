package verify

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// fakePositions is a source whose position is a counter and a replay
// whose applied position the test sets: it stands in for the engine's
// replay status (or the task's checkpoint) in the recheck logic.
type fakePositions struct {
	now, applied uint32
}

func (f *fakePositions) pos() Position {
	return Position{TS: bson.Timestamp{T: f.now}, At: time.Unix(int64(f.now), 0)}
}

func (f *fakePositions) passed(p Position) bool { return p.TS.T <= f.applied }

// TestPendingRechecks walks one document's mismatch through its rechecks:
// each step sets the source's position and replay's applied one, says how
// the document compares if it is rechecked, and what the step must
// report.
func TestPendingRechecks(t *testing.T) {
	type step struct {
		now, applied uint32
		compare      diffKind // how a recheck at this step finds the document
		wantDue      bool     // replay has passed the recorded position
		wantReport   diffKind // reported as persisting at this step
	}
	cases := []struct {
		name     string
		rechecks int
		first    diffKind // the mismatch the scan saw at position 10
		steps    []step
		left     int // entries still pending at the end
	}{
		{"in flight: equal once replay passed it", 3, kindMissing, []step{
			{now: 11, applied: 5, wantDue: false},
			{now: 12, applied: 10, compare: 0, wantDue: true},
		}, 0},
		{"corrupted: persists through every recheck", 3, kindChanged, []step{
			{now: 11, applied: 10, compare: kindChanged, wantDue: true}, // recorded again at 11
			{now: 12, applied: 10, wantDue: false},                      // replay has not passed 11
			{now: 12, applied: 11, compare: kindChanged, wantDue: true}, // recorded again at 12
			{now: 13, applied: 12, compare: kindChanged, wantDue: true, wantReport: kindChanged},
		}, 0},
		{"changed again and again, then equal", 3, kindChanged, []step{
			{now: 11, applied: 10, compare: kindChanged, wantDue: true},
			{now: 12, applied: 11, compare: kindChanged, wantDue: true},
			{now: 13, applied: 12, compare: 0, wantDue: true},
		}, 0},
		{"kind moves from missing to changed: reported as last seen", 2, kindMissing, []step{
			{now: 11, applied: 10, compare: kindChanged, wantDue: true},
			{now: 12, applied: 11, compare: kindChanged, wantDue: true, wantReport: kindChanged},
		}, 0},
		{"replay stalls: never rechecked, still pending", 1, kindExtra, []step{
			{now: 11, applied: 9, wantDue: false},
			{now: 12, applied: 9, wantDue: false},
		}, 1},
		{"one recheck: reported at once when it persists", 1, kindExtra, []step{
			{now: 11, applied: 10, compare: kindExtra, wantDue: true, wantReport: kindExtra},
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePositions{now: 10}
			s := newPendingSet(1<<20, tc.rechecks)
			k := pendingKey{ns: 0, id: idKey("\x10\x01\x00\x00\x00")}
			if !s.add(k, tc.first, f.pos()) {
				t.Fatal("add refused with room to spare")
			}
			for i, st := range tc.steps {
				f.now, f.applied = st.now, st.applied
				due := s.due(f.passed, 0)
				if st.wantDue != (len(due) == 1) {
					t.Fatalf("step %d: due %v, want due %v", i, due, st.wantDue)
				}
				var got diffKind
				if len(due) == 1 {
					got = s.settle(due[0], st.compare, f.pos())
				}
				if got != st.wantReport {
					t.Fatalf("step %d: reported %v, want %v", i, got, st.wantReport)
				}
			}
			if s.len() != tc.left {
				t.Errorf("%d pending at the end, want %d", s.len(), tc.left)
			}
			if tc.left == 0 && s.bytes != 0 {
				t.Errorf("%d bytes accounted with nothing pending", s.bytes)
			}
		})
	}
}

// TestPendingBudget fills the recheck budget: the entry that does not fit
// is refused and counted, never dropped silently, and room comes back
// when a recheck settles an entry.
func TestPendingBudget(t *testing.T) {
	f := &fakePositions{now: 1, applied: 1}
	id := func(b byte) pendingKey { return pendingKey{id: idKey([]byte{0x10, b, 0, 0, 0})} }
	budget := 2 * entrySize(id(0))
	cases := []struct {
		name         string
		adds         int
		settleFirst  bool
		wantPending  int
		wantOverflow int64
		wantFull     bool
	}{
		{"within budget", 2, false, 2, 0, false},
		{"one over", 3, false, 2, 1, true},
		{"room after a recheck", 3, true, 2, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newPendingSet(budget, 3)
			for i := range tc.adds {
				if tc.settleFirst && !s.room(id(byte(i))) {
					s.settle(id(0), 0, f.pos())
				}
				s.add(id(byte(i)), kindChanged, f.pos())
			}
			if s.len() != tc.wantPending || s.overflow != tc.wantOverflow || s.full != tc.wantFull {
				t.Errorf("pending %d, overflow %d, full %v; want %d, %d, %v",
					s.len(), s.overflow, s.full, tc.wantPending, tc.wantOverflow, tc.wantFull)
			}
			if s.bytes > budget {
				t.Errorf("%d bytes pending over the %d budget", s.bytes, budget)
			}
		})
	}
}
