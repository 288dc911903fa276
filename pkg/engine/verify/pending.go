package verify

import (
	"cmp"
	"context"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Position is a point in the source's history, as the streaming verifier
// records it with a mismatch: TS is at or above every source write a read
// that finished before it was taken could see, and At is when it was taken.
type Position struct {
	TS bson.Timestamp
	At time.Time
}

// Positions tells the streaming verifier where the source and replay are.
// The engine answers from its running replay, `ferry verify --streaming`
// from the task's checkpoint on the target; tests give a fake.
type Positions interface {
	// Now returns the source's current position.
	Now(ctx context.Context) (Position, error)
	// Passed reports whether the target has every source write up to p
	// applied (replay's applied position is at or past p.TS, or replay
	// was caught up with a newest position read after p.At).
	Passed(ctx context.Context, p Position) (bool, error)
}

// diffKind is how a document differs.
type diffKind uint8

const (
	kindMissing diffKind = iota + 1 // on the source only
	kindExtra                       // on the target only
	kindChanged                     // on both, other bytes
)

func (k diffKind) String() string {
	switch k {
	case kindMissing:
		return "missing"
	case kindExtra:
		return "extra"
	case kindChanged:
		return "changed"
	}
	return "equal"
}

// pendingKey names one document: the namespace's index in the pass and
// its _id.
type pendingKey struct {
	ns int
	id idKey
}

// pendingEntry is a mismatch waiting for its recheck.
type pendingEntry struct {
	kind diffKind
	// at is the source's position when the mismatch was last seen: the
	// recheck waits until replay has passed it.
	at Position
	// checks counts the rechecks that still found it differing.
	checks int
}

// entryOverhead approximates what one pending entry costs besides its
// _id's bytes: the map slot, the key and entry structs and the string
// header.
const entryOverhead = 112

func entrySize(k pendingKey) int64 { return int64(len(k.id)) + entryOverhead }

// pendingSet holds the mismatches waiting for a recheck, within a byte
// budget. It keeps no documents, only _ids and positions, so its state
// stays small; a full set refuses new entries and counts them (overflow)
// rather than growing or dropping any silently.
type pendingSet struct {
	budget   int64
	rechecks int
	bytes    int64
	m        map[pendingKey]*pendingEntry
	// overflow counts mismatches refused because the set was full: they
	// were not rechecked.
	overflow int64
	// full is set once the set refused an entry.
	full bool
}

func newPendingSet(budget int64, rechecks int) *pendingSet {
	return &pendingSet{budget: budget, rechecks: max(rechecks, 1), m: map[pendingKey]*pendingEntry{}}
}

// add records a first-seen mismatch. It returns false, and counts it as
// overflow, when the budget has no room for it. A document already
// pending keeps its entry.
func (s *pendingSet) add(k pendingKey, kind diffKind, at Position) bool {
	if _, ok := s.m[k]; ok {
		return true
	}
	n := entrySize(k)
	if s.bytes+n > s.budget {
		s.overflow++
		s.full = true
		return false
	}
	s.m[k] = &pendingEntry{kind: kind, at: at}
	s.bytes += n
	return true
}

// room reports whether k fits in the budget (or is pending already).
func (s *pendingSet) room(k pendingKey) bool {
	_, ok := s.m[k]
	return ok || s.bytes+entrySize(k) <= s.budget
}

// len returns the number of pending mismatches.
func (s *pendingSet) len() int { return len(s.m) }

// due returns up to limit pending keys whose position passed says replay
// has passed, ordered by namespace and _id bytes (so rechecks are
// deterministic and batch by namespace).
func (s *pendingSet) due(passed func(Position) bool, limit int) []pendingKey {
	var out []pendingKey
	verdict := map[Position]bool{}
	for k, e := range s.m {
		ok, asked := verdict[e.at]
		if !asked {
			ok = passed(e.at)
			verdict[e.at] = ok
		}
		if ok {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b pendingKey) int {
		return cmp.Or(cmp.Compare(a.ns, b.ns), cmp.Compare(a.id, b.id))
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// settle records the outcome of a recheck of k: now is how the document
// compares at position at (0 when equal). It returns the kind of a
// mismatch that persisted through every recheck (the entry is removed
// then, as it is when the documents became equal), or 0.
func (s *pendingSet) settle(k pendingKey, now diffKind, at Position) diffKind {
	e, ok := s.m[k]
	if !ok {
		return 0
	}
	if now == 0 {
		s.remove(k)
		return 0
	}
	e.checks++
	if e.checks >= s.rechecks {
		s.remove(k)
		return now
	}
	e.kind, e.at = now, at
	return 0
}

// drop removes every entry, for a pass that ends before replay passed
// them; it returns how many there were.
func (s *pendingSet) drop() int {
	n := len(s.m)
	clear(s.m)
	s.bytes = 0
	return n
}

func (s *pendingSet) remove(k pendingKey) {
	delete(s.m, k)
	s.bytes -= entrySize(k)
}
