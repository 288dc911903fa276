package replaybench

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
)

// DefaultMigrateEvery is how many entries apart ShardConfig puts a chunk
// migration's fromMigrate entry by default.
const DefaultMigrateEvery = 250_000

// ShardConfig is a run over a sharded source: one Replayer per shard.
type ShardConfig struct {
	Config
	// Shards is the number of shards; each document lives on the shard
	// its _id hashes to.
	Shards int
	// MigrateEvery puts a migration of the namespace of every
	// MigrateEvery-th entry on one shard, the shards in turn: its start
	// marker, a fromMigrate entry (a copy) and, MigrateEvery/10 entries
	// later, its end marker. That shard then holds the namespace's
	// writes until the others' positions pass them. DefaultMigrateEvery when zero, none when
	// negative.
	MigrateEvery int64
	// Publish is the subtasks' checkpoint and publication interval;
	// 200ms when zero.
	Publish time.Duration
	// Rehome, with an Input with a ShardKey, is the share of the run's
	// entries (0 to 1) whose document the application moves to another
	// shard (rehome.go).
	Rehome float64
}

// ShardResult is what a sharded run measured.
type ShardResult struct {
	Result
	// HeldWrites are the writes held after migrations, Migrations the
	// fromMigrate entries read, over all shards.
	HeldWrites, Migrations int64
	// HoldSeconds is the time namespaces spent held, summed over shards.
	HoldSeconds float64
	// Moves are the documents moved to another shard (ShardConfig.Rehome).
	Moves int64
}

// shardPlan assigns the pool's entries to shards.
type shardPlan struct {
	in     *Input
	ops    int64
	shards int
	every  int64
	of     []uint8 // the shard of each pool entry
	// moved marks the pool's inserts whose document comes from another
	// shard (rehome.go); moves counts them over the run's entries.
	moved []bool
	moves int64
}

// ts is the position of entry k of a sharded run: entries get
// increments of four so that a migration's entry (extra) and a moved
// document's earlier insert and delete (rehome.go) fit just before one.
func (p *shardPlan) ts(k int64, extra bool) bson.Timestamp {
	sub := uint32(0)
	if extra {
		sub = 1
	}
	return p.tsBefore(k, sub)
}

// tsBefore is the position sub slots before entry k's.
func (p *shardPlan) tsBefore(k int64, sub uint32) bson.Timestamp {
	return bson.Timestamp{T: p.in.From.T + uint32(k/10_000), I: uint32(k%10_000)*4 + 4 - sub}
}

// What a migration into a shard logs there, each entry just before one
// of the pool's: its start marker (the recipient's pending range
// deletion task in config.rangeDeletions), a fromMigrate copy one entry
// later and its end marker (the task's deletion after the commit)
// migrationSpan entries later, during which the migration is open.
const (
	extraNone = iota
	extraStart
	extraCopy
	extraEnd
)

// migrationSpan is how many entries a migration stays open: a tenth of
// the interval between migrations.
func (p *shardPlan) migrationSpan() int64 { return max(p.every/10, 2) }

// extraAt returns the migration entry shard s logs just before entry k.
func (p *shardPlan) extraAt(k int64, s int) int {
	if p.every <= 0 {
		return extraNone
	}
	for kind, d := range []int64{0, 1, p.migrationSpan()} {
		j := k - d
		if j > 0 && j%p.every == 0 && int((j/p.every)%int64(p.shards)) == s {
			return kind + 1
		}
	}
	return extraNone
}

// end is the position of the no-op every shard logs after its entries,
// as mongod's periodic no-op writer does on a shard without writes: it
// takes every subtask past the run's last write, so that writes held
// until the others pass them (an insert held for _id reuse near the end
// of a shard's entries) are released.
func (p *shardPlan) end() bson.Timestamp { return p.ts(p.ops, false) }

// noop returns the no-op entry at end.
func (p *shardPlan) noop() bson.Raw {
	ts := p.end()
	return bson.Raw(bsoncore.NewDocumentBuilder().AppendTimestamp("ts", ts.T, ts.I).AppendInt64("t", 1).
		AppendString("op", "n").AppendString("ns", "").
		AppendDocument("o", bsoncore.NewDocumentBuilder().AppendString("msg", "periodic noop").Build()).Build())
}

func newShardPlan(in *Input, ops int64, shards int, every int64) (*shardPlan, error) {
	p := &shardPlan{in: in, ops: ops, shards: shards, every: every, of: make([]uint8, len(in.Entries))}
	seed := maphash.MakeSeed()
	for i, raw := range in.Entries {
		e, err := oplog.Parse(raw)
		if err != nil {
			return nil, err
		}
		key := e.O()
		if e.Kind() == oplog.Update {
			key = e.O2()
		}
		id, err := key.LookupErr("_id")
		if err != nil {
			return nil, fmt.Errorf("pool entry %d: %w", i, err)
		}
		p.of[i] = uint8(maphash.Bytes(seed, id.Value) % uint64(shards))
	}
	return p, nil
}

// shardReader serves one shard's entries of a plan.
type shardReader struct {
	p     *shardPlan
	s     int
	batch int

	mu   sync.Mutex
	next int64
	// ended is set once the no-op at end is served.
	ended bool
}

// Next implements source.OplogReader.
func (r *shardReader) Next(ctx context.Context) ([]bson.Raw, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pool := int64(len(r.p.in.Entries))
	var out []bson.Raw
	for ; r.next < r.p.ops && len(out) < r.batch; r.next++ {
		k := r.next
		i := k % pool
		if r.p.moved != nil && r.p.moved[i] && r.p.home(i) == r.s {
			out = r.p.earlier(out, i, k)
		}
		switch x := r.p.extraAt(k, r.s); x {
		case extraCopy:
			out = append(out, r.p.stamp(i, k, true))
		case extraStart, extraEnd:
			out = append(out, r.p.marker(i, k, x))
		}
		if int(r.p.of[i]) == r.s {
			out = append(out, r.p.stamp(i, k, false))
		}
	}
	if r.next == r.p.ops && !r.ended && len(out) < r.batch {
		out, r.ended = append(out, r.p.noop()), true
	}
	if len(out) == 0 {
		r.mu.Unlock()
		<-ctx.Done()
		r.mu.Lock()
		return nil, ctx.Err()
	}
	return out, nil
}

// stamp copies pool entry i with the position of entry k, as a
// migration's fromMigrate entry when extra.
func (p *shardPlan) stamp(i, k int64, extra bool) bson.Raw {
	src := p.in.Entries[i]
	var buf []byte
	if extra {
		// The same document, with fromMigrate: true at the end.
		buf = make([]byte, 0, len(src)+len("\x08fromMigrate\x00\x01"))
		buf = append(buf, src[:len(src)-1]...)
		buf = bsoncore.AppendBooleanElement(buf, "fromMigrate", true)
		buf = append(buf, 0)
		binary.LittleEndian.PutUint32(buf, uint32(len(buf)))
	} else {
		buf = append(make([]byte, 0, len(src)), src...)
	}
	ts := p.ts(k, extra)
	at := p.in.tsAt[i]
	binary.LittleEndian.PutUint32(buf[at:], ts.I)
	binary.LittleEndian.PutUint32(buf[at+4:], ts.T)
	return buf
}

// marker returns the start or end marker of the migration that entry
// k's extra slot belongs to, of pool entry i's namespace.
func (p *shardPlan) marker(i, k int64, kind int) bson.Raw {
	ts := p.ts(k, true)
	m := k
	if kind == extraEnd {
		m = k - p.migrationSpan()
	}
	id := bsoncore.AppendStringElement(nil, "_id", "bench-migration-"+strconv.FormatInt(m/p.every, 10))
	b := bsoncore.NewDocumentBuilder().AppendTimestamp("ts", ts.T, ts.I).AppendInt64("t", 1)
	if kind == extraEnd {
		return bson.Raw(b.AppendString("op", "d").AppendString("ns", "config.rangeDeletions").
			AppendDocument("o", bsoncore.BuildDocument(nil, id)).Build())
	}
	e, err := oplog.Parse(p.in.Entries[i])
	ns := "bench.c"
	if err == nil {
		ns = e.NS()
	}
	o := bsoncore.BuildDocument(nil, append(append(id, bsoncore.AppendStringElement(nil, "nss", ns)...),
		append(bsoncore.AppendStringElement(nil, "donorShardId", "another"), bsoncore.AppendBooleanElement(nil, "pending", true)...)...))
	return bson.Raw(b.AppendString("op", "i").AppendString("ns", "config.rangeDeletions").AppendDocument("o", o).Build())
}

// Newest implements source.OplogReader.
func (r *shardReader) Newest(context.Context) (bson.Timestamp, error) {
	return r.p.end(), nil
}

// RunShards replays c.Ops entries of in as a sharded source would log
// them: each entry on the shard its document's _id hashes to, with a
// migration's fromMigrate entry every c.MigrateEvery entries; one real
// Replayer per shard (ShardMember, a shared board.MemoryBoard) applies its
// shard's entries into one Sink. It stops once the sink has every write
// and checks that every subtask's checkpoint reaches its shard's last
// entry.
func RunShards(ctx context.Context, in *Input, c ShardConfig) (ShardResult, error) {
	if c.Shards < 1 || c.Shards > 255 {
		return ShardResult{}, fmt.Errorf("shards must be between 1 and 255, got %d", c.Shards)
	}
	every := c.MigrateEvery
	if every == 0 {
		every = DefaultMigrateEvery
	}
	publish := c.Publish
	if publish == 0 {
		publish = 200 * time.Millisecond
	}
	spec := config.Spec{Threads: config.Threads{Writers: c.Writers}, Cache: config.Cache{BatchSize: c.BatchSize}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		return ShardResult{}, err
	}
	ops := c.Ops
	if ops <= 0 {
		ops = int64(len(in.Entries))
	}
	plan, err := newShardPlan(in, ops, c.Shards, every)
	if err != nil {
		return ShardResult{}, err
	}
	if err := plan.rehome(c.Rehome); err != nil {
		return ShardResult{}, err
	}
	batch := c.ReadBatch
	if batch <= 0 {
		batch = DefaultReadBatch
	}
	want := in.Counts(ops)
	want.Inserts += plan.moves // each moved document's earlier insert and delete
	want.Deletes += plan.moves
	sink := NewSink(want.Writes())
	res := ShardResult{Result: Result{Ops: ops, Writers: spec.Threads.Writers, BatchSize: spec.Cache.BatchSize}}
	positions := board.NewMemoryBoard()
	rs := make([]*replay.Replayer, c.Shards)
	for s := range rs {
		name := "shard" + strconv.Itoa(s)
		if err := positions.Publish(ctx, board.Position{Shard: name, Applied: in.From}); err != nil {
			return res, err
		}
		rs[s] = replay.New(replay.Options{
			Task: "bench-replay", Spec: &spec, Reader: &shardReader{p: plan, s: s, batch: batch},
			Mapper: mapper, From: in.From, Apply: sink.Apply,
			ShardMember: true, Shard: name, Board: positions, CheckpointInterval: publish,
			// As a task's subtasks do: the checkpoint passes open
			// migrations with their markers saved (here, nowhere).
			SaveState: func(context.Context, bson.Timestamp, oplog.AssemblerState) error { return nil },
		})
	}

	stop, err := runUntilApplied(ctx, rs, sink, want.Writes(), &res.Result, "a subtask stopped")
	if err != nil {
		return res, err
	}
	lag := checkpointsReachEnd(rs, plan, publish)
	for _, r := range rs {
		st := r.Status()
		res.HeldWrites += st.Holds.HeldWrites
		res.HoldSeconds += st.Holds.HoldSeconds
		res.Migrations += st.Skipped[oplog.ReasonFromMigrate]
		res.Moves = plan.moves
		res.addCommands(st)
	}
	if err := stop(); err != nil {
		return res, err
	}
	res.Sink = sink.Counts()
	if err := checkShardSink(res.Sink, want); err != nil {
		return res, err
	}
	return res, lag
}

// checkpointsReachEnd waits until every subtask's checkpoint reaches its
// shard's last entry, as it does once the last migrations are released
// (a publication interval or two), and reports one that does not within
// ten intervals.
func checkpointsReachEnd(rs []*replay.Replayer, plan *shardPlan, publish time.Duration) error {
	var lag error
	for deadline := time.Now().Add(10 * publish); ; time.Sleep(publish / 10) {
		lag = nil
		for s, r := range rs {
			if cp, last := r.Checkpoint(), plan.end(); cp != last {
				lag = fmt.Errorf("shard %d's checkpoint is %d.%d after the run, want its last entry's %d.%d", s, cp.T, cp.I, last.T, last.I)
			}
		}
		if lag == nil || time.Now().After(deadline) {
			return lag
		}
	}
}

// checkShardSink checks what the sink saw of a run of subtasks: every
// write, inserts as replacements (a shard's inserts are upserts).
func checkShardSink(s SinkCounts, want Counts) error {
	switch {
	case s.Writes != want.Writes():
		return fmt.Errorf("the sink saw %d writes, want %d", s.Writes, want.Writes())
	case s.Replaces != want.Inserts || s.Updates != want.Updates || s.Deletes != want.Deletes:
		return fmt.Errorf("the sink saw %d replaces, %d updates, %d deletes; want %d, %d, %d",
			s.Replaces, s.Updates, s.Deletes, want.Inserts, want.Updates, want.Deletes)
	}
	return nil
}
