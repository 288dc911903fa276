package replay

import (
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// holds is a subtask's held writes and what holds them: the migrations
// into its shard it read (migration.go) and the fromMigrate entries.
//
// A write of namespace N at tw needs every other non-retired subtask's
// durable position at or past Prev(need), where need is the highest of
//
//   - for each migration of N read before tw: tw while the migration is
//     open, min(tw, its end) once its end marker is read;
//   - the ts of the last fromMigrate entry of N (or of an applyOps of
//     them, any namespace) read before tw.
//
// need is never above tw: the no-cycle argument of docs/sharded.md rests
// on it. Writes of N leave in their order: one held keeps the later ones
// of N behind it.
type holds struct {
	mu sync.Mutex
	// migrations are the migrations read and not yet released, by marker
	// key; byNS indexes them.
	migrations map[string]*migration
	byNS       map[catalog.Namespace][]*migration
	// fromMigrate are, per source namespace, the ts of the fromMigrate
	// entries read and not yet passed by every other subtask, ascending;
	// the zero Namespace stands for all (a fromMigrate applyOps).
	fromMigrate map[catalog.Namespace][]bson.Timestamp
	// held are the writes waiting, in dispatch order; pending counts them
	// per source namespace, with those being handed to the writers.
	held    []heldItem
	pending map[catalog.Namespace]int
	since   map[catalog.Namespace]time.Time
	// conflicts are the ts of the writes waiting for the other subtasks
	// after meeting a document with their _id (conflict.go), with how
	// many writers wait at each.
	conflicts map[bson.Timestamp]int
	// waiting is the commit ts of a transaction part waiting for the
	// others, first its first entry's.
	waiting, first bson.Timestamp
	// needs is what a commit wait needs (board.Position.Needs).
	needs bson.Timestamp
	// decided are the commit decisions of the transactions the shard
	// coordinates, read and not yet passed (participants.go), by
	// transaction.
	decided map[string]decided
	retire  bool

	heldTotal  int64
	holdTime   time.Duration
	commitWait int64
	// commitWaitAll counts the commit waits that found no decision
	// naming their participants and waited for every subtask.
	commitWaitAll int64
	waitTime      time.Duration
	// conflictWaits counts the writes that waited after meeting a
	// document with their _id, conflictTime their waiting time;
	// conflictsMet the writes that met one, stepped over those still
	// meeting it after the wait.
	conflictWaits, conflictsMet, steppedOver, reread int64
	conflictTime                                     time.Duration
	// rechecks are the documents to read from the source again once
	// every subtask is past their point (recheck.go), by document;
	// rechecked counts the reads done.
	rechecks  map[string]*recheck
	rechecked int64
}

// heldItem is a held write and the fromMigrate entries it waits for (the
// last of its namespace and of all namespaces when it was held).
type heldItem struct {
	it              item
	needNS, needAll bson.Timestamp
}

// migrated records a fromMigrate entry of ns (zero: every namespace) at
// ts.
func (h *holds) migrated(ns catalog.Namespace, ts bson.Timestamp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fromMigrate == nil {
		h.fromMigrate = map[catalog.Namespace][]bson.Timestamp{}
	}
	b := h.fromMigrate[ns]
	if n := len(b); n > 0 && !ts.After(b[n-1]) {
		return
	}
	h.fromMigrate[ns] = append(b, ts)
}

// lastFrom returns the last fromMigrate entry of ns read, capped at ts
// (one read again after a restart may lie above a write).
func (h *holds) lastFrom(ns catalog.Namespace, ts bson.Timestamp) bson.Timestamp {
	b := h.fromMigrate[ns]
	if len(b) == 0 {
		return bson.Timestamp{}
	}
	return minTS(b[len(b)-1], ts)
}

// need returns what a write of ns at ts waits for from the migrations
// (zero: nothing), with h.mu held.
func (h *holds) need(ns catalog.Namespace, ts bson.Timestamp) bson.Timestamp {
	var n bson.Timestamp
	for _, m := range h.byNS[ns] {
		if !m.start.Before(ts) {
			continue
		}
		x := ts
		if !m.end.IsZero() && m.end.Before(ts) {
			x = m.end
		}
		n = maxTS(n, x)
	}
	return n
}

// hold keeps it back when it must wait; it reports whether it did.
func (h *holds) hold(it item) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	needNS := h.lastFrom(it.src, it.ts)
	needAll := h.lastFrom(catalog.Namespace{}, it.ts)
	if needNS.IsZero() && needAll.IsZero() && h.pending[it.src] == 0 &&
		h.need(it.src, it.ts).IsZero() {
		return false
	}
	if h.pending == nil {
		h.pending, h.since = map[catalog.Namespace]int{}, map[catalog.Namespace]time.Time{}
	}
	if h.pending[it.src] == 0 {
		h.since[it.src] = time.Now()
	}
	h.pending[it.src]++
	h.held = append(h.held, heldItem{it: it, needNS: needNS, needAll: needAll})
	h.heldTotal++
	return true
}

// cap returns the highest checkpoint that keeps every migration and
// fromMigrate entry not yet released above it: what a subtask that
// saves no state (Options.SaveState nil) reads again after a restart.
func (h *holds) cap(ts bson.Timestamp) bson.Timestamp {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.migrations {
		ts = minTS(ts, board.Prev(m.start))
	}
	for _, b := range h.fromMigrate {
		ts = minTS(ts, board.Prev(b[0]))
	}
	return ts
}

// release drops what every other subtask has passed and returns the held
// writes free to go, in order.
func (h *holds) release(self string, ps []board.Position) []item {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ns, b := range h.fromMigrate {
		n := 0
		for n < len(b) && reachedBy(self, ps, b[n], bson.Timestamp{}) {
			n++
		}
		if n == len(b) {
			delete(h.fromMigrate, ns)
		} else if n > 0 {
			h.fromMigrate[ns] = b[n:]
		}
	}
	for key, m := range h.migrations {
		if !m.end.IsZero() && reachedBy(self, ps, m.end, bson.Timestamp{}) {
			h.drop(key)
		}
	}
	h.dropDecided(self, ps)
	if len(h.held) == 0 {
		return nil
	}
	var out []item
	var blocked map[catalog.Namespace]bool
	keep := h.held[:0]
	for _, hi := range h.held {
		ns := hi.it.src
		// The fromMigrate entries it waits for are checked on the
		// positions themselves: after a restart the list holds only the
		// last one saved, and an earlier one may be missing from it.
		need := maxTS(h.need(ns, hi.it.ts), maxTS(hi.needNS, hi.needAll))
		if blocked[ns] || !need.IsZero() && !reachedBy(self, ps, need, bson.Timestamp{}) {
			if blocked == nil {
				blocked = map[catalog.Namespace]bool{}
			}
			blocked[ns] = true
			keep = append(keep, hi)
			continue
		}
		out = append(out, hi.it)
	}
	clear(h.held[len(keep):])
	h.held = keep
	return out
}

// blockedOn returns what the subtask waits for (board.Position.Needs):
// the lowest of its commit wait's, its writers' conflict waits' and the
// needs of the first held write of each namespace. A held write behind
// another of its namespace waits for that one, not for its own need: its
// need, lower or already met, would let another subtask take this one
// for running when it waits past that subtask's position (the cycle of
// docs/sharded.md's commit wait).
func (h *holds) blockedOn() bson.Timestamp {
	h.mu.Lock()
	defer h.mu.Unlock()
	low := h.needs
	lower := func(n bson.Timestamp) {
		if !n.IsZero() && (low.IsZero() || n.Before(low)) {
			low = n
		}
	}
	lower(h.lowestConflict())
	var seen map[catalog.Namespace]bool
	for _, hi := range h.held {
		if seen[hi.it.src] {
			continue
		}
		if seen == nil {
			seen = map[catalog.Namespace]bool{}
		}
		seen[hi.it.src] = true
		lower(maxTS(maxTS(hi.needNS, hi.needAll), h.need(hi.it.src, hi.it.ts)))
	}
	return low
}

// sent counts writes handed to the writers.
func (h *holds) sent(its []item) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, it := range its {
		h.pending[it.src]--
		if h.pending[it.src] == 0 {
			h.holdTime += time.Since(h.since[it.src])
			delete(h.pending, it.src)
			delete(h.since, it.src)
		}
	}
}

// reachedBy reports whether every other subtask's position reaches ts.
func reachedBy(self string, ps []board.Position, ts, waitingOn bson.Timestamp) bool {
	for _, p := range ps {
		if p.Shard != self && !p.Reaches(ts, waitingOn) {
			return false
		}
	}
	return true
}

// HoldStatus is what a subtask held for the ordering rule.
type HoldStatus struct {
	// HeldWrites counts writes held after a migration; HeldNow those held
	// at the moment; HoldSeconds the time namespaces spent held, summed.
	HeldWrites  int64   `json:"heldWrites"`
	HeldNow     int     `json:"heldNow"`
	HoldSeconds float64 `json:"holdSeconds"`
	// CommitWaits counts multi-shard transaction parts that waited for
	// the other subtasks; CommitWaitSeconds their waiting time.
	CommitWaits       int64   `json:"commitWaits"`
	CommitWaitSeconds float64 `json:"commitWaitSeconds"`
	// CommitWaitsAll counts the commit waits that waited for every
	// subtask: no decision of the transaction's coordinator naming its
	// participants was on the board (docs/sharded.md).
	CommitWaitsAll int64 `json:"commitWaitsAll,omitempty"`
	// Conflicts counts writes that met a document with their _id and
	// another shard-key value on the target (an _id on two shards of the
	// source, or a write applied again after a restart); ConflictWaits
	// those that waited for the other subtasks before going again,
	// ConflictWaitSeconds their waiting time, and SteppedOver the ones
	// that still met it after the wait while the source holds no
	// document with the _id (stepped over, docs/sharded.md), and
	// ConflictsReRead those that met it while the source holds one: the
	// target's document is replaced by the source's (settleConflict).
	Conflicts           int64   `json:"conflicts"`
	ConflictWaits       int64   `json:"conflictWaits"`
	ConflictWaitSeconds float64 `json:"conflictWaitSeconds"`
	SteppedOver         int64   `json:"steppedOver"`
	ConflictsReRead     int64   `json:"conflictsReRead,omitempty"`
	// Rechecks is the number of documents written from the source ahead
	// of the subtasks that are still to be read again once every subtask
	// is past the read (recheck.go): a subtask is caught up only when it
	// is 0. Rechecked counts those reads.
	Rechecks  int   `json:"rechecks,omitempty"`
	Rechecked int64 `json:"rechecked,omitempty"`
	// Barriers is the number of namespaces held at the moment;
	// Migrations the migrations into the shard not yet released.
	Barriers   int `json:"barriers"`
	Migrations int `json:"migrations,omitempty"`
}

func (h *holds) status() HoldStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	nss := map[catalog.Namespace]bool{}
	for ns := range h.fromMigrate {
		nss[ns] = true
	}
	for ns := range h.byNS {
		nss[ns] = true
	}
	return HoldStatus{HeldWrites: h.heldTotal, HeldNow: len(h.held), HoldSeconds: h.holdTime.Seconds(),
		CommitWaits: h.commitWait, CommitWaitSeconds: h.waitTime.Seconds(), CommitWaitsAll: h.commitWaitAll, Barriers: len(nss), Migrations: len(h.migrations),
		Conflicts: h.conflictsMet, ConflictWaits: h.conflictWaits, ConflictWaitSeconds: h.conflictTime.Seconds(), SteppedOver: h.steppedOver,
		ConflictsReRead: h.reread, Rechecks: len(h.rechecks), Rechecked: h.rechecked}
}
