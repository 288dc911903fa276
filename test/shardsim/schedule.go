package shardsim

import (
	"math/rand/v2"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// OtherNS is a namespace the simulated task leaves out
// (namespaces.exclude: ['other\..*']): topology DDL on it is followed.
const OtherNS = "other.c"

// Stop is a sharding operation the subtasks cannot follow on the task's
// collection (reshardCollection, a resharding, movePrimary of its
// database): each shard that logs it stops there, naming it.
type Stop struct {
	Op, NS string
	// At is each logging shard's entry ts.
	At map[string]bson.Timestamp
}

// Schedule is a seeded random run of the model.
type Schedule struct {
	Seed  uint64
	Model *Model
	// Added and Removed name the shard added and the one removed during
	// the schedule, if any.
	Added, Removed string
	// Stop, when set, is the operation the run must stop at.
	Stop *Stop
}

// Generate builds the schedule of seed: steps random events (user
// inserts, updates and deletes, chunk migrations both ways, some aborted,
// range deletions, shard-key changes (across shards as a prepared
// transaction, within one as an update), one- and multi-shard transactions,
// periodic no-ops, topology DDL the subtasks follow), an idle shard in
// half the seeds, a shard added in half, one removed in a third and, in
// one in eight, a topology change the subtasks must stop at.
func Generate(seed uint64, ns string, steps int) Schedule {
	return GenerateWith(seed, ns, steps, Behaviours{})
}

// GenerateWith is Generate with the behaviours b (behaviours.go): with
// Clocks, wall time passes between steps instead of random no-ops; with
// EmptyMigrations and IDReuse, their events are added to the random ones.
func GenerateWith(seed uint64, ns string, steps int, b Behaviours) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x51a1))
	idle := rng.IntN(2) == 0
	m := NewModel(seed, ns, 3, idle).With(b)
	sc := Schedule{Seed: seed, Model: m}
	addAt, removeAt, stopAt := -1, -1, -1
	if rng.IntN(2) == 0 {
		addAt = rng.IntN(steps)
	}
	if rng.IntN(3) == 0 {
		removeAt = rng.IntN(steps)
	}
	if rng.IntN(8) == 0 {
		stopAt = rng.IntN(steps)
	}
	for i := range 4 {
		m.Insert(int64(rng.IntN(chunkCount * chunkWidth)))
		_ = i
	}
	for step := range steps {
		if step == addAt {
			sc.Added = m.AddShard().Name
		}
		if step == removeAt {
			if act := m.active(); len(act) > 2 || (len(act) == 2 && sc.Added == "") {
				s := act[rng.IntN(len(act))]
				m.RemoveShard(s)
				sc.Removed = s.Name
			}
		}
		if step == stopAt {
			sc.Stop = m.stop(rng)
		}
		if b.EmptyMigrations && rng.IntN(8) == 0 {
			m.emptyMigration(rng)
		}
		if b.IDReuse && rng.IntN(8) == 0 {
			m.reuseID(rng)
		}
		m.randomEvent(rng)
		if b.Clocks {
			m.Elapse(uint32(rng.IntN(4)))
			continue
		}
		for _, s := range m.Shards {
			p := 6
			if s.Idle {
				p = 3
			}
			if !s.Removed && rng.IntN(p) == 0 {
				m.Noop(s)
			}
		}
	}
	m.Finish()
	m.countLogs()
	return sc
}

// randomEvent runs one random event.
func (m *Model) randomEvent(rng *rand.Rand) {
	ids := func() []int64 {
		out := make([]int64, 0, len(m.Docs))
		for c := range chunkCount {
			out = append(out, m.inChunk(c)...)
		}
		return out
	}()
	act := m.active()
	switch p := rng.IntN(100); {
	case p < 22 || len(ids) == 0:
		m.Insert(int64(rng.IntN(chunkCount * chunkWidth)))
	case p < 45:
		m.Update(ids[rng.IntN(len(ids))])
	case p < 52:
		m.Delete(ids[rng.IntN(len(ids))])
	case p < 68:
		c := rng.IntN(chunkCount)
		to := act[rng.IntN(len(act))]
		m.Migrate(c, to, rng.IntN(3), rng.IntN(5) == 0)
	case p < 74:
		s := m.Shards[rng.IntN(len(m.Shards))]
		if !s.Removed {
			m.RangeDelete(s)
		}
	case p < 84:
		id := ids[rng.IntN(len(ids))]
		sk := int64(rng.IntN(chunkCount * chunkWidth))
		var between func()
		switch rng.IntN(3) {
		case 0:
			between = func() {
				if other := ids[rng.IntN(len(ids))]; other != id {
					m.Update(other)
				}
			}
		case 1:
			// A migration of another chunk while the transaction is
			// prepared (a chunk with prepared writes does not move).
			between = func() {
				c := rng.IntN(chunkCount)
				if c != int(m.Docs[id].SK/chunkWidth) && c != int(sk/chunkWidth) {
					m.Migrate(c, act[rng.IntN(len(act))], rng.IntN(2), false)
				}
			}
		}
		if !m.ChangeKey(id, sk, between) {
			m.ChangeKeyInPlace(id, sk)
		}
	case p < 92:
		if len(act) >= 2 {
			i := rng.IntN(len(act))
			j := (i + 1 + rng.IntN(len(act)-1)) % len(act)
			m.MultiShardTxn(act[i], act[j])
		}
	case p < 96:
		m.ShardTxn(act[rng.IntN(len(act))])
	default:
		m.followedDDL(rng)
	}
}

// some returns a random non-empty subset of shards, in order.
func some(rng *rand.Rand, shards []*Shard) []*Shard {
	var out []*Shard
	for _, s := range shards {
		if rng.IntN(2) == 0 {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		out = append(out, shards[rng.IntN(len(shards))])
	}
	return out
}

// followedDDL logs a sharding operation the subtasks follow: the task's
// collection sharded again or its key refined (no document moves), or a
// resharding or movePrimary of what the task leaves out.
func (m *Model) followedDDL(rng *rand.Rand) {
	db, _, _ := strings.Cut(OtherNS, ".")
	ops := []struct{ op, ns string }{
		{"shardCollection", m.NS},
		{"refineCollectionShardKey", m.NS},
		{"reshardCollection", OtherNS},
		{"reshardBegin", OtherNS},
		{"movePrimary", db},
	}
	o := ops[rng.IntN(len(ops))]
	m.Topology(o.op, o.ns, some(rng, m.listed()))
}

// stop logs a sharding operation on the task's collection that the
// subtasks cannot follow, on some of the listed shards: its no-op, or a
// resharding's commit on recipients that were no donors.
func (m *Model) stop(rng *rand.Rand) *Stop {
	db, _, _ := strings.Cut(m.NS, ".")
	ops := []struct{ op, ns string }{
		{"reshardCollection", m.NS},
		{"reshardBegin", m.NS},
		{"movePrimary", db},
	}
	if rng.IntN(4) == 0 {
		return &Stop{Op: "reshardCollection", NS: m.NS, At: m.ReshardCommit(some(rng, m.listed()))}
	}
	o := ops[rng.IntN(len(ops))]
	return &Stop{Op: o.op, NS: o.ns, At: m.Topology(o.op, o.ns, some(rng, m.listed()))}
}

// emptyMigration deletes every document of a chunk (plain deletes), moves
// the empty chunk (the recipient clones nothing) and inserts one of the
// _ids again, now on the recipient.
func (m *Model) emptyMigration(rng *rand.Rand) {
	act := m.active()
	if len(act) < 2 {
		return
	}
	c := rng.IntN(chunkCount)
	ids := m.inChunk(c)
	for _, id := range ids {
		m.Delete(id)
	}
	to := act[rng.IntN(len(act))]
	if to == m.owner[c] {
		return
	}
	m.Migrate(c, to, 0, false)
	if len(ids) > 0 {
		m.InsertID(ids[rng.IntN(len(ids))], int64(c*chunkWidth+rng.IntN(chunkWidth)))
		m.Fired["EmptyMigrations"]++
	}
}

// reuseID deletes a document on its shard and inserts its _id with a
// shard key another shard owns (the application keeps _id unique across
// the shards; the other shard holds no orphan copy of it).
func (m *Model) reuseID(rng *rand.Rand) {
	var ids []int64
	for c := range chunkCount {
		ids = append(ids, m.inChunk(c)...)
	}
	if len(ids) == 0 {
		return
	}
	id := ids[rng.IntN(len(ids))]
	from := m.owner[m.Docs[id].SK/chunkWidth]
	var cs []int
	for c, s := range m.owner {
		if s != from && !m.holdsOrphan(s, id) {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return
	}
	c := cs[rng.IntN(len(cs))]
	m.Delete(id)
	if rng.IntN(2) == 0 {
		m.InsertID(id, int64(c*chunkWidth+rng.IntN(chunkWidth)))
	} else { // from another client: may lie below the delete (Clocks)
		del := m.lastTS
		m.InsertIDUnrelated(id, int64(c*chunkWidth+rng.IntN(chunkWidth)))
		if m.lastTS.Before(del) {
			m.Fired["IDReuseBelowDelete"]++
		}
	}
	m.Fired["IDReuse"]++
}

// holdsOrphan reports whether s keeps an orphan copy of id.
func (m *Model) holdsOrphan(s *Shard, id int64) bool {
	for _, o := range m.orphans[s] {
		if slices.Contains(o.ids, id) {
			return true
		}
	}
	return false
}
