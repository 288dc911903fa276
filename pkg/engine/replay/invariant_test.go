package replay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// TestCheckpointInvariantUnderKills checks the checkpoint's invariant
// (docs/architecture.md) on random schedules: a random oplog of every
// shape a replica set writes (inserts, replacements, $v:2 diffs, deletes,
// no-ops, a user's applyOps, one-entry transactions mixing DDL and CRUD,
// partialTxn chains, prepared transactions committed or aborted, drops
// and creates) is replayed by the real Replayer into a model of a target
// that stalls, fails writes (at random, after applying part of an ordered
// command or none of it) and dies with the process. The process is
// "killed" at random moments: whatever it saved last is the position the
// next run starts after, and nothing it does after the kill counts. After
// a last run without faults, the target holds exactly the source's
// documents.
//
// What stands in for what: the source is the generated oplog and the
// state it leads to (modelled here, applying each write as mongod does:
// whole documents, $set and $unset of top-level fields, deletes by _id);
// the target is an in-memory store taking the Replayer's write models
// (Options.Apply) and DDL (Options.ApplyDDL). Late entries (a source whose
// oplog shows holes) are covered on FerretDB by
// TestLateEntryNotLostAcrossRestart.
//
// REPLAY_INVARIANT_SCHEDULES sets the number of schedules (make test-long
// runs 10,000), REPLAY_INVARIANT_FIRST the first seed.
func TestCheckpointInvariantUnderKills(t *testing.T) {
	n := 150
	if testing.Short() {
		n = 40
	}
	if v, err := strconv.Atoi(os.Getenv("REPLAY_INVARIANT_SCHEDULES")); err == nil && v > 0 {
		n = v
	}
	first := uint64(1)
	if v, err := strconv.ParseUint(os.Getenv("REPLAY_INVARIANT_FIRST"), 10, 64); err == nil {
		first = v
	}
	var kills, failures, runs, entries int
	started := time.Now()
	for seed := first; seed < first+uint64(n); seed++ {
		st := runSchedule(t, seed)
		kills, failures, runs, entries = kills+st.kills, failures+st.failures, runs+st.runs, entries+st.entries
		if t.Failed() {
			t.Fatalf("seed %d failed (rerun it alone with REPLAY_INVARIANT_FIRST=%d REPLAY_INVARIANT_SCHEDULES=1)", seed, seed)
		}
	}
	t.Logf("%d schedules (seeds %d-%d), %d oplog entries, %d runs, %d kills, %d failed writes that stopped a run: 0 lost or extra writes, in %s",
		n, first, first+uint64(n)-1, entries, runs, kills, failures, time.Since(started).Round(time.Millisecond))
}

type scheduleStats struct{ kills, failures, runs, entries int }

// runSchedule replays one random oplog with kills and failures, then
// compares the target with the source.
func runSchedule(t *testing.T, seed uint64) scheduleStats {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	gen := newOplogGen(rng)
	gen.generate(5 + rng.IntN(60))
	st := scheduleStats{entries: len(gen.entries)}
	last := tsOf(gen.entries[len(gen.entries)-1])

	spec := config.Spec{Threads: config.Threads{Writers: 1 + rng.IntN(4)}, Cache: config.Cache{BatchSize: 1 + rng.IntN(8)}}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	target := &modelTarget{docs: map[string]map[int32]bson.D{}}
	saved := bson.Timestamp{}
	for run := 0; ; run++ {
		final := run >= 1+rng.IntN(5)
		st.runs++
		var (
			mu      sync.Mutex
			killed  atomic.Bool
			calls   atomic.Int64
			savedAt = saved
		)
		killAt := int64(-1)
		failAt := int64(-1)
		if !final {
			switch rng.IntN(3) {
			case 0:
				failAt = int64(rng.IntN(10))
			default:
				killAt = int64(rng.IntN(12))
			}
		}
		stall := rng.IntN(3) == 0
		ctx, cancel := context.WithCancel(context.Background())
		kill := func() {
			if killed.CompareAndSwap(false, true) {
				cancel()
			}
		}
		applyRng := rand.New(rand.NewPCG(seed, uint64(run)))
		var rngMu sync.Mutex
		coin := func(p float64) bool {
			rngMu.Lock()
			defer rngMu.Unlock()
			return applyRng.Float64() < p
		}
		r := New(Options{Task: "inv", Spec: &spec, Reader: &randomBatches{entries: gen.entries, from: saved, rng: rand.New(rand.NewPCG(seed, uint64(run)+99))},
			Mapper: mapper, From: saved, CheckpointInterval: time.Millisecond,
			SaveApplied: func(_ context.Context, ts bson.Timestamp) error {
				mu.Lock()
				defer mu.Unlock()
				if !killed.Load() {
					savedAt = ts
				}
				return nil
			},
			Apply: func(_ context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
				if killed.Load() {
					return errors.New("the process is dead")
				}
				k := calls.Add(1) - 1
				if stall && coin(0.3) {
					time.Sleep(time.Millisecond)
				}
				switch k {
				case killAt:
					// Killed while this command was on its way: the
					// server may have applied it, or not.
					if coin(0.5) {
						_ = target.apply(t, ns, models, len(models))
					}
					kill()
					return errors.New("the process is dead")
				case failAt:
					// The target fails the command after applying part
					// of it (an ordered command stops at a write).
					rngMu.Lock()
					part := applyRng.IntN(len(models) + 1)
					rngMu.Unlock()
					if _, ok := models[0].(*mongo.InsertOneModel); !ok {
						_ = target.apply(t, ns, models, part)
					}
					return mongo.CommandError{Code: 8000, Name: "AtlasError", Message: "the target failed the command"}
				}
				return target.apply(t, ns, models, len(models))
			},
			ApplyDDL: func(_ context.Context, d oplog.DDL) error {
				if killed.Load() {
					return errors.New("the process is dead")
				}
				target.ddl(d)
				return nil
			},
		})
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		var runErr error
		deadline := time.After(20 * time.Second)
	wait:
		for {
			select {
			case runErr = <-done:
				break wait
			case <-deadline:
				cancel()
				t.Fatalf("seed %d run %d: replay did not finish (checkpoint %v, last entry %v)", seed, run, r.Checkpoint(), last)
			case <-time.After(time.Millisecond):
				if r.Checkpoint() == last {
					if final {
						cancel()
					} else {
						kill() // the fault came too late: the process dies at the end
					}
				}
			}
		}
		switch {
		case killed.Load():
			st.kills++
		case runErr != nil && !errors.Is(runErr, context.Canceled):
			if failAt < 0 {
				for _, e := range gen.entries {
					t.Log(e)
				}
				t.Fatalf("seed %d run %d (from %v): replay failed: %v", seed, run, saved, runErr)
			}
			st.failures++
		}
		mu.Lock()
		saved = savedAt
		mu.Unlock()
		if final {
			break
		}
	}
	if saved != last {
		t.Errorf("seed %d: the last run saved %v, want the last entry %v", seed, saved, last)
	}
	target.mu.Lock()
	defer target.mu.Unlock()
	for ns, want := range gen.state {
		got := target.docs[ns]
		for id, doc := range want {
			g, ok := got[id]
			switch {
			case !ok:
				t.Errorf("seed %d: %s _id %d lost on the target; the source has %v", seed, ns, id, doc)
			case !equalDocs(g, doc):
				t.Errorf("seed %d: %s _id %d is %v on the target, %v on the source", seed, ns, id, g, doc)
			}
		}
		for id, doc := range got {
			if _, ok := want[id]; !ok {
				t.Errorf("seed %d: %s _id %d extra on the target: %v", seed, ns, id, doc)
			}
		}
	}
	for ns, got := range target.docs {
		if _, ok := gen.state[ns]; !ok && len(got) > 0 {
			t.Errorf("seed %d: %s extra on the target: %d documents", seed, ns, len(got))
		}
	}
	if t.Failed() {
		t.Logf("seed %d oplog:", seed)
		for _, e := range gen.entries {
			t.Log(e)
		}
	}
	return st
}

func equalDocs(a, b bson.D) bool {
	x, err1 := bson.Marshal(a)
	y, err2 := bson.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

// randomBatches is an OplogReader handing out the entries after from in
// batches of random size.
type randomBatches struct {
	mu      sync.Mutex
	entries []bson.Raw
	from    bson.Timestamp
	next    int
	rng     *rand.Rand
}

func (b *randomBatches) Next(ctx context.Context) ([]bson.Raw, error) {
	b.mu.Lock()
	for b.next < len(b.entries) && tsOf(b.entries[b.next]).Compare(b.from) <= 0 {
		b.next++
	}
	n := min(1+b.rng.IntN(6), len(b.entries)-b.next)
	out := b.entries[b.next : b.next+n]
	b.next += n
	b.mu.Unlock()
	if n == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return out, nil
}

func (b *randomBatches) Newest(context.Context) (bson.Timestamp, error) {
	return tsOf(b.entries[len(b.entries)-1]), nil
}

// modelTarget is the target: documents by namespace and _id.
type modelTarget struct {
	mu   sync.Mutex
	docs map[string]map[int32]bson.D
}

// apply applies the first n of models, as a server applies a command:
// inserts unordered (an existing _id is a duplicate key at its index),
// the rest in order.
func (m *modelTarget) apply(t *testing.T, ns catalog.Namespace, models []mongo.WriteModel, n int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	coll := m.docs[ns.String()]
	if coll == nil {
		coll = map[int32]bson.D{}
		m.docs[ns.String()] = coll
	}
	var dups []mongo.BulkWriteError
	for i, model := range models[:n] {
		switch w := model.(type) {
		case *mongo.InsertOneModel:
			doc := asDoc(t, w.Document)
			id := modelID(t, doc[:1])
			if _, ok := coll[id]; ok {
				dups = append(dups, mongo.BulkWriteError{WriteError: mongo.WriteError{Index: i, Code: 11000, Message: "E11000 duplicate key"}, Request: model})
				continue
			}
			coll[id] = doc
		case *mongo.ReplaceOneModel:
			id := modelID(t, asDoc(t, w.Filter))
			if _, ok := coll[id]; ok || (w.Upsert != nil && *w.Upsert) {
				doc := asDoc(t, w.Replacement)
				if len(doc) == 0 || doc[0].Key != "_id" {
					doc = append(bson.D{{Key: "_id", Value: id}}, doc...)
				}
				coll[id] = doc
			}
		case *mongo.UpdateOneModel:
			id := modelID(t, asDoc(t, w.Filter))
			doc, ok := coll[id]
			if !ok {
				if w.Upsert == nil || !*w.Upsert {
					continue
				}
				doc = bson.D{{Key: "_id", Value: id}}
			}
			coll[id] = applyUpdate(t, doc, asDoc(t, w.Update))
		case *mongo.DeleteOneModel:
			delete(coll, modelID(t, asDoc(t, w.Filter)))
		default:
			t.Errorf("the model target does not take %T", model)
		}
	}
	if len(dups) > 0 {
		return mongo.BulkWriteException{WriteErrors: dups}
	}
	return nil
}

func (m *modelTarget) ddl(d oplog.DDL) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d.Class == oplog.CmdDrop {
		delete(m.docs, d.NS.String())
	}
}

func asDoc(t *testing.T, v any) bson.D {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Errorf("marshal %v: %v", v, err)
	}
	var d bson.D
	if err := bson.Unmarshal(b, &d); err != nil {
		t.Error(err)
	}
	return d
}

func modelID(t *testing.T, filter bson.D) int32 {
	t.Helper()
	if len(filter) != 1 || filter[0].Key != "_id" {
		t.Errorf("the model target filters on _id alone, not %v", filter)
		return -1
	}
	id, ok := filter[0].Value.(int32)
	if !ok {
		t.Errorf("_id %v is not an int32", filter[0].Value)
	}
	return id
}

// applyUpdate applies an update document of $set and $unset on top-level
// fields, as mongod does: a field set in place, or appended when new; an
// unset field removed.
func applyUpdate(t *testing.T, doc, update bson.D) bson.D {
	t.Helper()
	out := append(bson.D(nil), doc...)
	for _, op := range update {
		fields, ok := op.Value.(bson.D)
		if !ok {
			t.Errorf("update %v: %s is not a document", update, op.Key)
			continue
		}
		for _, f := range fields {
			switch op.Key {
			case "$set":
				out = setField(out, f.Key, f.Value)
			case "$unset":
				out = unsetField(out, f.Key)
			default:
				t.Errorf("the model target does not take %s (update %v)", op.Key, update)
			}
		}
	}
	return out
}

func setField(d bson.D, k string, v any) bson.D {
	for i := range d {
		if d[i].Key == k {
			d[i].Value = v
			return d
		}
	}
	return append(d, bson.E{Key: k, Value: v})
}

func unsetField(d bson.D, k string) bson.D {
	for i := range d {
		if d[i].Key == k {
			return append(d[:i:i], d[i+1:]...)
		}
	}
	return d
}

// oplogGen writes a random replica-set oplog and keeps the state it
// leads to (state), applying each write as mongod does.
type oplogGen struct {
	rng     *rand.Rand
	entries []bson.Raw
	state   map[string]map[int32]bson.D
	clock   uint32
	txn     int64
}

var genNamespaces = []string{"shop.orders", "shop.users"}

func newOplogGen(rng *rand.Rand) *oplogGen {
	return &oplogGen{rng: rng, state: map[string]map[int32]bson.D{}, clock: 0}
}

func (g *oplogGen) next() bson.Timestamp {
	g.clock++
	return bson.Timestamp{T: 1000 + g.clock/3, I: g.clock}
}

func (g *oplogGen) emit(d bson.D) {
	b, err := bson.Marshal(d)
	if err != nil {
		panic(err)
	}
	g.entries = append(g.entries, b)
}

// op returns a random CRUD operation valid on state (the operation's
// fields, without ts) and applies it there. ok is false when none fits.
func (g *oplogGen) op(state map[string]map[int32]bson.D) bson.D {
	ns := genNamespaces[g.rng.IntN(len(genNamespaces))]
	coll := state[ns]
	if coll == nil {
		coll = map[int32]bson.D{}
		state[ns] = coll
	}
	id := int32(g.rng.IntN(6))
	doc, exists := coll[id]
	if !exists {
		doc = bson.D{{Key: "_id", Value: id}, {Key: "n", Value: int32(g.rng.IntN(1000))}, {Key: "s", Value: fmt.Sprintf("v%d", g.rng.IntN(100))}}
		coll[id] = doc
		return bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: ns}, {Key: "o", Value: doc}}
	}
	key := bson.D{{Key: "_id", Value: id}}
	switch g.rng.IntN(4) {
	case 0:
		delete(coll, id)
		return bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: ns}, {Key: "o", Value: key}}
	case 1:
		repl := bson.D{{Key: "_id", Value: id}, {Key: "n", Value: int32(g.rng.IntN(1000))}}
		if g.rng.IntN(2) == 0 {
			repl = append(repl, bson.E{Key: "s", Value: "r"})
		}
		coll[id] = repl
		return bson.D{{Key: "op", Value: "u"}, {Key: "ns", Value: ns}, {Key: "o", Value: repl}, {Key: "o2", Value: key}}
	case 2:
		if _, has := fieldOf(doc, "s"); has {
			coll[id] = unsetField(append(bson.D(nil), doc...), "s")
			return bson.D{{Key: "op", Value: "u"}, {Key: "ns", Value: ns},
				{Key: "o", Value: bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{{Key: "d", Value: bson.D{{Key: "s", Value: false}}}}}}}, {Key: "o2", Value: key}}
		}
	}
	v := int32(g.rng.IntN(1000))
	coll[id] = setField(append(bson.D(nil), doc...), "n", v)
	return bson.D{{Key: "op", Value: "u"}, {Key: "ns", Value: ns},
		{Key: "o", Value: bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "n", Value: v}}}}}}}, {Key: "o2", Value: key}}
}

func fieldOf(d bson.D, k string) (any, bool) {
	for _, e := range d {
		if e.Key == k {
			return e.Value, true
		}
	}
	return nil, false
}

// cloneState copies a state deeply enough for ops to change the copy.
func cloneState(s map[string]map[int32]bson.D) map[string]map[int32]bson.D {
	out := make(map[string]map[int32]bson.D, len(s))
	for ns, c := range s {
		m := make(map[int32]bson.D, len(c))
		for id, d := range c {
			m[id] = d
		}
		out[ns] = m
	}
	return out
}

func (g *oplogGen) txnFields(n int64, prev bson.Timestamp) bson.D {
	return bson.D{{Key: "lsid", Value: bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: []byte(fmt.Sprintf("%016d", n%7))}}}},
		{Key: "txnNumber", Value: n}, {Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: prev}, {Key: "t", Value: int64(1)}}}}
}

func command(ts bson.Timestamp, o bson.D, extra ...bson.E) bson.D {
	return append(bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"}, {Key: "o", Value: o}}, extra...)
}

// generate writes about n entries, ending with a no-op.
func (g *oplogGen) generate(n int) {
	for len(g.entries) < n {
		switch g.rng.IntN(11) {
		case 0, 1, 2, 3:
			g.emit(append(bson.D{{Key: "ts", Value: g.next()}, {Key: "t", Value: int64(1)}}, g.op(g.state)...))
		case 4:
			g.emit(bson.D{{Key: "ts", Value: g.next()}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "periodic noop"}}}})
		case 5: // a user's applyOps
			ops := bson.A{}
			for range 2 + g.rng.IntN(3) {
				ops = append(ops, g.op(g.state))
			}
			g.emit(command(g.next(), bson.D{{Key: "applyOps", Value: ops}}))
		case 6: // a one-entry transaction, DDL among its operations
			g.txn++
			ops := bson.A{}
			for i := range 2 + g.rng.IntN(3) {
				if i == g.rng.IntN(3) {
					ns := genNamespaces[g.rng.IntN(len(genNamespaces))]
					ops = append(ops, bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "shop.$cmd"},
						{Key: "o", Value: bson.D{{Key: "createIndexes", Value: ns[len("shop."):]}, {Key: "v", Value: int32(2)},
							{Key: "key", Value: bson.D{{Key: "n", Value: int32(1)}}}, {Key: "name", Value: "n_1"}}}})
				}
				ops = append(ops, g.op(g.state))
			}
			g.emit(command(g.next(), bson.D{{Key: "applyOps", Value: ops}}, g.txnFields(g.txn, bson.Timestamp{})...))
		case 7: // a partialTxn chain
			g.txn++
			prev := bson.Timestamp{}
			links := 2 + g.rng.IntN(2)
			for i := range links {
				ops := bson.A{}
				for range 1 + g.rng.IntN(2) {
					ops = append(ops, g.op(g.state))
				}
				o := bson.D{{Key: "applyOps", Value: ops}}
				if i < links-1 {
					o = append(o, bson.E{Key: "partialTxn", Value: true})
				} else {
					o = append(o, bson.E{Key: "count", Value: int64(links)})
				}
				ts := g.next()
				g.emit(command(ts, o, g.txnFields(g.txn, prev)...))
				prev = ts
			}
		case 8, 9: // a prepared transaction, committed or aborted
			g.txn++
			commit := g.rng.IntN(3) > 0
			state := g.state
			if !commit {
				state = cloneState(g.state)
			}
			ops := bson.A{}
			for range 1 + g.rng.IntN(3) {
				ops = append(ops, g.op(state))
			}
			prep := g.next()
			g.emit(command(prep, bson.D{{Key: "applyOps", Value: ops}, {Key: "prepare", Value: true}}, g.txnFields(g.txn, bson.Timestamp{})...))
			for range g.rng.IntN(3) {
				g.emit(bson.D{{Key: "ts", Value: g.next()}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "periodic noop"}}}})
			}
			ts := g.next()
			if commit {
				g.emit(command(ts, bson.D{{Key: "commitTransaction", Value: int32(1)}, {Key: "commitTimestamp", Value: ts}}, g.txnFields(g.txn, prep)...))
			} else {
				g.emit(command(ts, bson.D{{Key: "abortTransaction", Value: int32(1)}}, g.txnFields(g.txn, prep)...))
			}
		case 10: // a collection dropped (then written again by later entries)
			ns := genNamespaces[g.rng.IntN(len(genNamespaces))]
			delete(g.state, ns)
			g.emit(bson.D{{Key: "ts", Value: g.next()}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "c"}, {Key: "ns", Value: "shop.$cmd"},
				{Key: "o", Value: bson.D{{Key: "drop", Value: ns[len("shop."):]}}}})
		}
	}
	g.emit(bson.D{{Key: "ts", Value: g.next()}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "periodic noop"}}}})
	for ns, c := range g.state {
		if len(c) == 0 {
			delete(g.state, ns)
		}
	}
}
