package shardsim

import (
	"math/rand/v2"
)

// Schedule is a seeded random run of the model.
type Schedule struct {
	Seed  uint64
	Model *Model
	// Added and Removed name the shard added and the one removed during
	// the schedule, if any.
	Added, Removed string
}

// Generate builds the schedule of seed: steps random events (user
// inserts, updates and deletes, chunk migrations both ways, some aborted,
// range deletions, shard-key changes, one- and multi-shard transactions,
// periodic no-ops), an idle shard in half the seeds, a shard added in
// half and one removed in a third.
func Generate(seed uint64, ns string, steps int) Schedule {
	rng := rand.New(rand.NewPCG(seed, 0x51a1))
	idle := rng.IntN(2) == 0
	m := NewModel(seed, ns, 3, idle)
	sc := Schedule{Seed: seed, Model: m}
	addAt, removeAt := -1, -1
	if rng.IntN(2) == 0 {
		addAt = rng.IntN(steps)
	}
	if rng.IntN(3) == 0 {
		removeAt = rng.IntN(steps)
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
		m.randomEvent(rng)
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
		m.ChangeKey(id, sk, between)
	case p < 92:
		if len(act) >= 2 {
			i := rng.IntN(len(act))
			j := (i + 1 + rng.IntN(len(act)-1)) % len(act)
			m.MultiShardTxn(act[i], act[j])
		}
	default:
		m.ShardTxn(act[rng.IntN(len(act))])
	}
}
