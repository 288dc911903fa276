package shardsim

import (
	"math/rand/v2"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/sourceshardcopy"
)

// CopyOptions switch off parts of the per-shard copy's rule, to show that
// the model finds what each part prevents.
type CopyOptions struct {
	// NoSettle skips the passes that read again the chunks changed since
	// the last ownership read.
	NoSettle bool
	// NoOrphanFilter copies every document a shard holds.
	NoOrphanFilter bool
	// NewOwnersOnly has a settling pass read again only the owners of
	// the changed chunks in the new table.
	NewOwnersOnly bool
}

// CopyPhase is what a schedule's per-shard copy did (GenerateCopy): the
// start positions replay begins at, the documents the copy left on the
// target, and counts for messages.
type CopyPhase struct {
	// From are the shards' start positions, recorded before the
	// ownership was read and before anything was copied.
	From map[string]bson.Timestamp
	// Docs are the target's documents once the copy is done.
	Docs map[int64]Doc
	// Reads are the batches read, Kills the readers killed mid-range
	// (their range read again from its start), Orphans the documents
	// left out by the ownership filter.
	Reads, Kills, Orphans int
	// Migrations during the copy: committed, aborted, empty (nothing to
	// clone); RangeDeletions runs of a range deleter during it.
	Migrations, Aborted, Empty, RangeDeletions int
	// Passes are the settling passes after the first read of every
	// range, Recopied the changed chunks that started them, Rescanned the
	// shards they read again (each shard a migration committed into
	// since the ownership read before, whole).
	Passes, Recopied, Rescanned int
}

// readTask is one range a reader copies: an _id range of its shard,
// filtered by an ownership table.
type readTask struct {
	shard    *Shard
	lo, hi   int64 // _id range [lo, hi); hi 0: unbounded
	after    int64 // the last _id copied
	table    *sourceshardcopy.Table
	finished bool
}

// copier runs the copy phase inside a schedule's generation.
type copier struct {
	m       *Model
	rng     *rand.Rand
	opt     CopyOptions
	cp      *CopyPhase
	states  map[string]*shardState
	version [chunkCount]uint32
	// received are the shards a migration committed into since the last
	// ownership read: each one a settling pass reads again.
	received []string
	// copied are every version of each _id the readers wrote.
	copied map[int64][]Doc
	// quiet stops migrations once the settling passes run long.
	quiet bool
}

// table returns the model's chunk ownership now as config.chunks shows
// it: chunk c is [c*chunkWidth, (c+1)*chunkWidth), the first from MinKey,
// the last to MaxKey; a committed migration raises its version.
func (cp *copier) table() *sourceshardcopy.Table {
	bound := func(c int) bson.Raw {
		var v any = int64(c * chunkWidth)
		switch c {
		case 0:
			v = bson.MinKey{}
		case chunkCount:
			v = bson.MaxKey{}
		}
		b, _ := bson.Marshal(bson.D{{Key: "sk", Value: v}})
		return b
	}
	var chunks []sourceshardcopy.Chunk
	for c := range chunkCount {
		chunks = append(chunks, sourceshardcopy.Chunk{Min: bound(c), Max: bound(c + 1), Shard: cp.m.owner[c].Name,
			Version: bson.Timestamp{T: cp.version[c] + 1}})
	}
	key, _ := bson.Marshal(bson.D{{Key: "sk", Value: 1}})
	t, err := sourceshardcopy.NewTable(key, chunks)
	if err != nil {
		panic(err)
	}
	return t
}

// observe runs f and raises the version of every chunk whose owner it
// changed (a migration's commit).
func (cp *copier) observe(f func()) {
	before := cp.m.owner
	f()
	for c := range cp.m.owner {
		if cp.m.owner[c] != before[c] {
			cp.version[c]++
			if name := cp.m.owner[c].Name; !slices.Contains(cp.received, name) {
				cp.received = append(cp.received, name)
			}
		}
	}
}

// read copies the task's next batch of documents from its shard as the
// shard holds them now, in _id order.
func (cp *copier) read(t *readTask) {
	st := cp.states[t.shard.Name]
	st.advance(cp.m.NS, t.shard)
	var ids []int64
	for id := range st.docs {
		if id <= t.after {
			continue
		}
		if id < t.lo || t.hi != 0 && id >= t.hi {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	const batch = 2
	cp.cp.Reads++
	for i, id := range ids {
		if i == batch {
			return
		}
		d := st.docs[id]
		t.after = id
		if !cp.opt.NoOrphanFilter && !t.table.Owns(t.shard.Name, rawDoc(d)) {
			cp.cp.Orphans++
			continue
		}
		cp.copied[id] = append(cp.copied[id], d)
	}
	t.finished = true // fewer than a batch left: the range is recorded done
}

func rawDoc(d Doc) bson.Raw {
	b, _ := bson.Marshal(d.raw())
	return b
}

// step does one thing while tasks are being read: a read, a reader
// killed, a random event, a migration with reads between its steps, or a
// range deleter's run.
func (cp *copier) step(tasks []*readTask) {
	m, rng := cp.m, cp.rng
	var open []*readTask
	for _, t := range tasks {
		if !t.finished {
			open = append(open, t)
		}
	}
	if len(open) == 0 {
		return
	}
	t := open[rng.IntN(len(open))]
	switch p := rng.IntN(100); {
	case p < 45:
		cp.read(t)
	case p < 52:
		t.after = t.lo - 1 // killed: the next reader starts the range again
		cp.cp.Kills++
	case p < 72 && !cp.quiet:
		cp.observe(func() { m.randomEvent(rng) })
		cp.pass()
	case p < 92 && !cp.quiet:
		cp.migrate(tasks)
	case p < 92: // quiet: no more events, the passes settle
		cp.read(t)
	default:
		s := m.Shards[rng.IntN(len(m.Shards))]
		if len(m.orphans[s]) > 0 {
			cp.cp.RangeDeletions++
		}
		m.RangeDelete(s)
	}
}

// pass lets time pass: periodic no-ops (Clocks: wall seconds).
func (cp *copier) pass() {
	m, rng := cp.m, cp.rng
	if m.B.Clocks {
		m.Elapse(uint32(rng.IntN(4)))
		return
	}
	for _, s := range m.Shards {
		if !s.Removed && rng.IntN(6) == 0 {
			m.Noop(s)
		}
	}
}

// migrate moves a random chunk (empty or not) to another shard step by
// step, with reads of the tasks between the clone's batches and around
// the commit or abort (one in four).
func (cp *copier) migrate(tasks []*readTask) {
	m, rng := cp.m, cp.rng
	act := m.active()
	c := rng.IntN(chunkCount)
	to := act[rng.IntN(len(act))]
	if m.owner[c] == to {
		return
	}
	readSome := func() {
		for _, t := range tasks {
			if !t.finished && rng.IntN(3) == 0 {
				cp.read(t)
			}
		}
	}
	g := m.StartMigration(c, to)
	if len(g.ids) == 0 {
		cp.cp.Empty++
	}
	for g.next < len(g.ids) {
		readSome()
		if rng.IntN(2) == 0 {
			g.donorWrite()
		}
		g.Clone(1 + rng.IntN(2))
	}
	g.Transfer()
	readSome()
	if rng.IntN(4) == 0 {
		g.Abort()
		cp.cp.Aborted++
	} else {
		cp.observe(g.Commit)
		cp.cp.Migrations++
	}
	readSome()
}

// runTasks reads the tasks to their end, with the cluster going on.
func (cp *copier) runTasks(tasks []*readTask) {
	for slices.ContainsFunc(tasks, func(t *readTask) bool { return !t.finished }) {
		cp.step(tasks)
	}
}

// idRanges returns the read tasks of shard s: three _id ranges, the last
// unbounded, filtered by the ownership table t.
func idRanges(s *Shard, nextID int64, t *sourceshardcopy.Table) []*readTask {
	third := max(1, nextID/3)
	var out []*readTask
	for _, r := range [][2]int64{{1, third}, {third, 2 * third}, {2 * third, 0}} {
		out = append(out, &readTask{shard: s, lo: r[0], hi: r[1], after: r[0] - 1, table: t})
	}
	return out
}

// GenerateCopy builds seed's schedule with a per-shard copy in it: steps/2
// random events, then the copy's start (every shard's start position, then
// the chunk ownership), per-shard readers over three _id ranges of each
// shard, filtered by that ownership, while the cluster goes on (user
// writes, migrations both ways with reads between their steps, empty and
// aborted ones, range deletions, readers killed mid-range); then the
// settling passes (docs/sharded.md, "Per-shard copy"); then steps/2 more
// events. The copy's writes land in any order: each _id ends as one of the
// versions read of it, picked by the seed.
func GenerateCopy(seed uint64, ns string, steps int, b Behaviours, opt CopyOptions) (Schedule, *CopyPhase) {
	rng := rand.New(rand.NewPCG(seed, 0xc0b1))
	m := NewModel(seed, ns, 3, rng.IntN(2) == 0).With(b)
	cp := newCopier(m, rng, opt)
	for range 8 {
		m.Insert(int64(rng.IntN(chunkCount * chunkWidth)))
	}
	for range steps / 2 {
		cp.observe(func() { m.randomEvent(rng) })
		cp.pass()
	}
	prev := cp.begin()
	var tasks []*readTask
	for _, s := range m.Shards {
		tasks = append(tasks, idRanges(s, m.nextID, prev)...)
	}
	cp.runTasks(tasks)
	if !opt.NoSettle {
		cp.settle(prev)
	}
	cp.land()
	for range steps / 2 {
		cp.observe(func() { m.randomEvent(rng) })
		cp.pass()
	}
	return cp.finish(seed), cp.cp
}

func newCopier(m *Model, rng *rand.Rand, opt CopyOptions) *copier {
	return &copier{m: m, rng: rng, opt: opt, cp: &CopyPhase{From: map[string]bson.Timestamp{}, Docs: map[int64]Doc{}},
		states: map[string]*shardState{}, copied: map[int64][]Doc{}}
}

// begin records every shard's start position, then reads the ownership.
func (cp *copier) begin() *sourceshardcopy.Table {
	for _, s := range cp.m.Shards {
		cp.cp.From[s.Name] = s.Last()
		cp.states[s.Name] = newShardState()
	}
	cp.received = nil
	return cp.table()
}

// settle runs passes until the ownership read after one equals the one
// read before it: each pass reads again, whole, every shard a migration
// committed into since the last read (with NewOwnersOnly, the owners of
// the changed chunks in the new table).
func (cp *copier) settle(prev *sourceshardcopy.Table) {
	for {
		now := cp.table()
		changed := sourceshardcopy.Changed(prev, now)
		if len(changed) == 0 {
			return
		}
		cp.cp.Passes++
		cp.quiet = cp.quiet || cp.cp.Passes > 3
		again := cp.received
		if cp.opt.NewOwnersOnly {
			again = nil
			for _, c := range changed {
				if !slices.Contains(again, c.Shard) {
					again = append(again, c.Shard)
				}
			}
		}
		var tasks []*readTask
		for _, name := range again {
			tasks = append(tasks, idRanges(cp.m.Shard(name), cp.m.nextID, now)...)
		}
		cp.cp.Recopied += len(changed)
		cp.cp.Rescanned += len(again)
		cp.received = nil
		cp.runTasks(tasks)
		prev = now
	}
}

// land writes the copy's documents to the target: each _id ends as one of
// the versions read of it (the writes land in any order).
func (cp *copier) land() {
	for id, vs := range cp.copied {
		cp.cp.Docs[id] = vs[cp.rng.IntN(len(vs))]
	}
}

// finish ends the schedule: every orphan deleted, last no-ops, and the
// writes at or before the start positions left to the copy.
func (cp *copier) finish(seed uint64) Schedule {
	m := cp.m
	m.Finish()
	m.countLogs()
	for k := range m.Writes {
		if !k.TS.After(cp.cp.From[k.Shard]) {
			delete(m.Writes, k) // in the copy: replay starts after it
		}
	}
	return Schedule{Seed: seed, Model: m}
}

// NewCopyRecorder returns a target holding the copy's documents.
func NewCopyRecorder(m *Model, cp *CopyPhase) *Recorder {
	r := NewRecorder(m)
	for id, d := range cp.Docs {
		r.docs[id] = d
	}
	return r
}
