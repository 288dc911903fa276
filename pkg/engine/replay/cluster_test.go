package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// A small sharded source for the ordering rule's scenarios: each shard's
// oplog written by hand as raw entries (o2/o document keys {sk, _id}),
// one Replayer per shard on a board.MemoryBoard with SaveState, and a
// target that applies writes as a mongod does (an upsert that matches
// nothing inserts, and meets E11000 on an _id that exists).

const clusterNS = "app.users"

// at is the ts of the i-th tick of a scenario.
func at(i uint32) bson.Timestamp { return bson.Timestamp{T: 1000 + i/100, I: i%100 + 1} }

func entry(t *testing.T, ts bson.Timestamp, fields bson.D) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(append(bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}, {Key: "v", Value: int64(2)}}, fields...))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func dkey(id, sk int64) bson.D { return bson.D{{Key: "sk", Value: sk}, {Key: "_id", Value: id}} }

func udoc(id, sk, v int64) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "sk", Value: sk}, {Key: "v", Value: v}}
}

func crudOp(op string, o, o2 bson.D) bson.D {
	d := bson.D{{Key: "op", Value: op}, {Key: "ns", Value: clusterNS}, {Key: "o", Value: o}}
	if o2 != nil {
		d = append(d, bson.E{Key: "o2", Value: o2})
	}
	return d
}

func insOp(id, sk, v int64) bson.D { return crudOp("i", udoc(id, sk, v), dkey(id, sk)) }
func delOp(id, sk int64) bson.D    { return crudOp("d", dkey(id, sk), nil) }

// insOp44 is an insert as a shard logs it before 5.3: no o2.
func insOp44(id, sk, v int64) bson.D { return crudOp("i", udoc(id, sk, v), nil) }

// setOp sets v (and sk, when it changes) of document {sk, _id}.
func setOp(id, sk, newSK, v int64) bson.D {
	u := bson.D{{Key: "v", Value: v}}
	if newSK != sk {
		u = append(u, bson.E{Key: "sk", Value: newSK})
	}
	return crudOp("u", bson.D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: bson.D{{Key: "u", Value: u}}}}, dkey(id, sk))
}

// replOp replaces document {sk, _id} (a replacement update: an upsert
// filtered on the document key).
func replOp(id, sk, v int64) bson.D { return crudOp("u", udoc(id, sk, v), dkey(id, sk)) }

func noopOp() bson.D {
	return bson.D{{Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "periodic noop"}}}}
}

// migrateOp is a fromMigrate copy of a document on the recipient.
func migrateOp(id, sk, v int64) bson.D {
	return append(crudOp("i", udoc(id, sk, v), nil), bson.E{Key: "fromMigrate", Value: true})
}

// rangeTask is the recipient's pending range deletion task (its start
// marker), and rangeTaskDone its deletion after the commit (its end).
func rangeTask(id int32, donor string) bson.D {
	return bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: "config.rangeDeletions"}, {Key: "o", Value: bson.D{
		{Key: "_id", Value: bson.Binary{Subtype: 4, Data: fmt.Appendf(nil, "migration%07d", id)}},
		{Key: "nss", Value: clusterNS}, {Key: "collectionUuid", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}},
		{Key: "donorShardId", Value: donor}, {Key: "range", Value: bson.D{{Key: "min", Value: bson.D{{Key: "sk", Value: int64(0)}}}, {Key: "max", Value: bson.D{{Key: "sk", Value: int64(10)}}}}},
		{Key: "pending", Value: true}, {Key: "whenToClean", Value: "now"}, {Key: "timestamp", Value: bson.Timestamp{T: 1, I: 1}}}}}
}

func rangeTaskDone(id int32) bson.D {
	return bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: "config.rangeDeletions"}, {Key: "o", Value: bson.D{
		{Key: "_id", Value: bson.Binary{Subtype: 4, Data: fmt.Appendf(nil, "migration%07d", id)}}}}}
}

func session(n int64) bson.D {
	return bson.D{{Key: "lsid", Value: bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: fmt.Appendf(nil, "session%09d", n)}}}}, {Key: "txnNumber", Value: n}}
}

func prepareOp(txn int64, ops ...bson.D) bson.D {
	arr := bson.A{}
	for _, op := range ops {
		arr = append(arr, op)
	}
	return append(append(bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
		{Key: "o", Value: bson.D{{Key: "applyOps", Value: arr}, {Key: "prepare", Value: true}}}}, session(txn)...),
		bson.E{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: bson.Timestamp{}}, {Key: "t", Value: int64(-1)}}})
}

func commitOp(txn int64, cts, prepared bson.Timestamp) bson.D {
	return append(append(bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
		{Key: "o", Value: bson.D{{Key: "commitTransaction", Value: int32(1)}, {Key: "commitTimestamp", Value: cts}}}}, session(txn)...),
		bson.E{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: prepared}, {Key: "t", Value: int64(1)}}})
}

func abortOp(txn int64, prepared bson.Timestamp) bson.D {
	return append(append(bson.D{{Key: "op", Value: "c"}, {Key: "ns", Value: "admin.$cmd"},
		{Key: "o", Value: bson.D{{Key: "abortTransaction", Value: int32(1)}}}}, session(txn)...),
		bson.E{Key: "prevOpTime", Value: bson.D{{Key: "ts", Value: prepared}, {Key: "t", Value: int64(1)}}})
}

// oplogs builds shards' oplogs from (shard, tick, entry) lines.
type oplogs map[string][]bson.Raw

func (l oplogs) add(t *testing.T, shard string, tick uint32, fields bson.D) oplogs {
	l[shard] = append(l[shard], entry(t, at(tick), fields))
	return l
}

// docStore is the target: documents by _id.
type docStore struct {
	mu   sync.Mutex
	docs map[int64]bson.D
}

func matches(doc bson.D, filter bson.Raw) bool {
	els, _ := filter.Elements()
	for _, el := range els {
		found := false
		for _, f := range doc {
			if f.Key == el.Key() {
				want, _ := bson.Marshal(bson.D{{Key: "x", Value: f.Value}})
				got, _ := bson.Marshal(bson.D{{Key: "x", Value: el.Value()}})
				found = bytes.Equal(want, got)
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func toD(raw any) bson.D {
	b, _ := bson.Marshal(raw)
	var d bson.D
	_ = bson.Unmarshal(b, &d)
	for i := range d {
		if v, ok := d[i].Value.(int32); ok {
			d[i].Value = int64(v)
		}
	}
	return d
}

func (s *docStore) apply(_ context.Context, _ catalog.Namespace, models []mongo.WriteModel) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.docs == nil {
		s.docs = map[int64]bson.D{}
	}
	for i, m := range models {
		var filter bson.Raw
		switch m := m.(type) {
		case *mongo.ReplaceOneModel:
			filter = m.Filter.(bson.Raw)
		case *mongo.UpdateOneModel:
			filter = m.Filter.(bson.Raw)
		case *mongo.DeleteOneModel:
			filter = m.Filter.(bson.Raw)
		default:
			return fmt.Errorf("unexpected %T", m)
		}
		id := filter.Lookup("_id").AsInt64()
		cur, exists := s.docs[id]
		match := exists && matches(cur, filter)
		switch m := m.(type) {
		case *mongo.ReplaceOneModel:
			if !match && exists {
				return mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{{WriteError: mongo.WriteError{Index: i, Code: 11000,
					Message: fmt.Sprintf("E11000 duplicate key error collection: %s index: _id_ dup key: { _id: %d }", clusterNS, id)}}}}
			}
			if match || m.Upsert != nil && *m.Upsert {
				s.docs[id] = toD(m.Replacement)
			}
		case *mongo.UpdateOneModel:
			if !match {
				continue
			}
			set := m.Update.(bson.Raw).Lookup("$set").Document()
			els, _ := set.Elements()
			next := append(bson.D(nil), cur...)
			for _, el := range els {
				for j := range next {
					if next[j].Key == el.Key() {
						next[j].Value = el.Value().AsInt64()
					}
				}
			}
			s.docs[id] = next
		case *mongo.DeleteOneModel:
			if match {
				delete(s.docs, id)
			}
		}
	}
	return nil
}

// get returns document id as {_id, sk, v}, and whether it exists.
func (s *docStore) get(id int64) (bson.D, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.docs[id]
	return d, ok
}

// feed is one shard's oplog as its reader sees it.
type feed struct {
	log  []bson.Raw
	from bson.Timestamp
	next int
	open func() bool
	slow bool
	// until, when set, stops the feed before its entry at until's first
	// result while until's second is false.
	until func() (int, bool)
}

func (f *feed) Next(ctx context.Context) ([]bson.Raw, error) {
	var out []bson.Raw
	if f.open == nil || f.open() {
		if f.slow {
			// One entry at a time, slowly: a lagging shard.
			time.Sleep(10 * time.Millisecond)
		}
		for ; f.next < len(f.log) && (len(out) < 2 && !f.slow || len(out) < 1); f.next++ {
			if f.until != nil {
				if at, ok := f.until(); f.next >= at && !ok {
					break
				}
			}
			if tsOf(f.log[f.next]).After(f.from) {
				out = append(out, f.log[f.next])
			}
		}
	}
	if len(out) == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return out, nil
}

func (f *feed) Newest(context.Context) (bson.Timestamp, error) { return tsOf(f.log[len(f.log)-1]), nil }

// cluster runs one subtask per shard of logs into one docStore.
type cluster struct {
	t     *testing.T
	logs  oplogs
	board *board.MemoryBoard
	store docStore
	// open, per shard, says when its reader may read (nil: always).
	open  map[string]func() bool
	mu    sync.Mutex
	saved map[string]savedState
	runs  map[string]*clusterRun
	spec  config.Spec
	mp    *catalog.Mapper
	errs  chan error
	// sourceKeys is Options.SourceShardKeys.
	sourceKeys ShardKeys
	// until, per shard, is its feed's until.
	until map[string]func() (int, bool)
}

type savedState struct {
	ts    bson.Timestamp
	state oplog.AssemblerState
}

type clusterRun struct {
	r      *Replayer
	cancel context.CancelFunc
	done   chan error
	dead   *sync.Mutex
	killed *bool
}

func newCluster(t *testing.T, logs oplogs) *cluster {
	c := &cluster{t: t, logs: logs, board: board.NewMemoryBoard(), open: map[string]func() bool{},
		saved: map[string]savedState{}, runs: map[string]*clusterRun{}, errs: make(chan error, 16)}
	c.spec = config.Spec{Threads: config.Threads{Writers: 2}, Cache: config.Cache{BatchSize: 8}}
	c.spec.SetDefaults()
	mp, err := catalog.NewMapper(c.spec.Namespaces, c.spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	c.mp = mp
	return c
}

// start runs every shard's subtask from its start.
func (c *cluster) start(ctx context.Context) {
	for name := range c.logs {
		_ = c.board.Publish(ctx, board.Position{Shard: name})
	}
	for name := range c.logs {
		c.run(ctx, name)
	}
}

// run starts shard name's subtask from its saved checkpoint and state.
func (c *cluster) run(ctx context.Context, name string) {
	c.mu.Lock()
	from := c.saved[name]
	c.mu.Unlock()
	dead, killed := &sync.Mutex{}, new(bool)
	r := New(Options{Task: "rule", Spec: &c.spec, Mapper: c.mp, Reader: &feed{log: c.logs[name], from: from.ts, open: c.open[name], slow: c.open[name] != nil, until: c.until[name]},
		From: from.ts, Recover: from.state, ShardMember: true, Shard: name, Board: fenced{c.board, dead, killed},
		CheckpointInterval: 2 * time.Millisecond, HoldPoll: time.Millisecond, SourceShardKeys: c.sourceKeys,
		SaveState: func(_ context.Context, ts bson.Timestamp, st oplog.AssemblerState) error {
			dead.Lock()
			defer dead.Unlock()
			if !*killed {
				c.mu.Lock()
				c.saved[name] = savedState{ts: ts, state: st}
				c.mu.Unlock()
			}
			return nil
		},
		Apply: func(ctx context.Context, ns catalog.Namespace, models []mongo.WriteModel) error {
			if c.open[name] != nil {
				time.Sleep(20 * time.Millisecond) // a lagging shard's writes are slow too
			}
			dead.Lock()
			defer dead.Unlock()
			if *killed {
				return nil
			}
			return c.store.apply(ctx, ns, models)
		},
	})
	rctx, cancel := context.WithCancel(ctx)
	run := &clusterRun{r: r, cancel: cancel, done: make(chan error, 1), dead: dead, killed: killed}
	c.mu.Lock()
	c.runs[name] = run
	c.mu.Unlock()
	go func() {
		err := r.Run(rctx)
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			c.errs <- fmt.Errorf("shard %s: %w", name, err)
		}
		run.done <- err
	}()
}

// kill stops shard name's subtask as a SIGKILL would (nothing more is
// written, saved or published) and starts it again from what it saved.
func (c *cluster) kill(ctx context.Context, name string) {
	c.mu.Lock()
	run := c.runs[name]
	c.mu.Unlock()
	run.dead.Lock()
	*run.killed = true
	run.dead.Unlock()
	run.cancel()
	<-run.done
	c.run(ctx, name)
}

// fenced drops a killed subtask's publications.
type fenced struct {
	b      board.Board
	dead   *sync.Mutex
	killed *bool
}

func (f fenced) Publish(ctx context.Context, p board.Position) error {
	f.dead.Lock()
	defer f.dead.Unlock()
	if *f.killed {
		return nil
	}
	return f.b.Publish(ctx, p)
}

func (f fenced) Positions(ctx context.Context) ([]board.Position, error) { return f.b.Positions(ctx) }

// wait runs until every subtask has applied its whole oplog, one failed,
// or the timeout; it returns the failure.
func (c *cluster) wait(ctx context.Context, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		select {
		case err := <-c.errs:
			return err
		case <-deadline:
			ps, _ := c.board.Positions(ctx)
			return fmt.Errorf("stuck: board %+v", ps)
		case <-time.After(2 * time.Millisecond):
		}
		ps, _ := c.board.Positions(ctx)
		done := len(ps) == len(c.logs)
		for _, p := range ps {
			l := c.logs[p.Shard]
			done = done && p.Applied == tsOf(l[len(l)-1])
		}
		if done {
			return nil
		}
	}
}

func (c *cluster) stop() {
	for _, run := range c.runs {
		run.cancel()
		<-run.done
	}
}

// readAll reports whether shard name's subtask read its whole oplog.
func (c *cluster) readAll(name string) func() bool {
	return func() bool {
		c.mu.Lock()
		run := c.runs[name]
		c.mu.Unlock()
		if run == nil {
			return false
		}
		l := c.logs[name]
		return run.r.Status().ReadTS == tsOf(l[len(l)-1])
	}
}

// field returns field k of d as an int64.
func field(d bson.D, k string) int64 {
	for _, e := range d {
		if e.Key == k {
			v, _ := e.Value.(int64)
			return v
		}
	}
	return -1
}
