package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/wiresim"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/board"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
	"github.com/mongoferry/mongoferry/pkg/engine/replay"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// replSet stands in for a MongoDB replica set as a client of its primary
// sees it, to fail it over: the wire stand-in (internal/wiresim) serves
// the primary's oplog and reports its majority commit point in hello
// (lastWrite.majorityOpTime). Its documents are what its oplog says: the
// source's data is the result of applying the current primary's oplog
// from the start, so a rolled-back write is gone from the source as it
// is on mongod.
//
// Writes are acknowledged with w: 1: they enter the primary's oplog at
// once; a replicated write also reaches a majority, which moves the
// commit point to it. Replication is in order: once a write is not
// replicated (the secondaries cut off), no later one is until the
// failover. Failover does what mongod does (rollback_impl.cpp): the new
// primary holds the entries up to the common point, the last one a
// majority had; the old primary's entries after it are removed; the new
// primary writes a no-op in the next term and continues that term, at
// timestamps the rolled-back entries had used.
type replSet struct {
	name string
	srv  *wiresim.Server
	mu   sync.Mutex
	log  *wiresim.MemOplog
	// entries mirror log; term is the current primary's, next the
	// increment of the next entry's ts (second 2000).
	entries []bson.Raw
	term    int64
	next    uint32
	// commit is the index of the last majority-committed entry (-1:
	// none); cut is set while writes are not replicated.
	commit int
	cut    bool
}

const replSetSecond = 2000

func startReplSet(t *testing.T, name string) *replSet {
	t.Helper()
	rs := &replSet{name: name, log: wiresim.NewMemOplog(), term: 1, next: 1, commit: -1}
	srv, err := wiresim.Start(wiresim.Options{Oplog: rs.log, SetName: name, Commit: rs.commitPoint})
	if err != nil {
		t.Fatal(err)
	}
	rs.srv = srv
	t.Cleanup(func() { _ = srv.Close() })
	return rs
}

// commitPoint is what the primary's hello reports.
func (rs *replSet) commitPoint() (bson.Timestamp, int64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.commit < 0 {
		return bson.Timestamp{}, rs.term
	}
	e := rs.entries[rs.commit]
	t, i, _ := e.Lookup("ts").TimestampOK()
	term, _ := e.Lookup("t").AsInt64OK()
	return bson.Timestamp{T: t, I: i}, term
}

// write logs one operation on the primary: op "i" inserts doc, "u"
// replaces the document with doc's _id by doc, "d" deletes it.
func (rs *replSet) write(t *testing.T, op string, doc bson.D) {
	t.Helper()
	rs.mu.Lock()
	e := bson.D{{Key: "op", Value: op}, {Key: "ns", Value: "app.c"}}
	switch op {
	case "i":
		e = append(e, bson.E{Key: "o", Value: doc})
	case "u":
		e = append(e, bson.E{Key: "o", Value: doc}, bson.E{Key: "o2", Value: bson.D{doc[0]}})
	case "d":
		e = append(e, bson.E{Key: "o", Value: bson.D{doc[0]}})
	case "n":
		e = bson.D{{Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: doc}}
	}
	rs.appendLocked(t, e)
	rs.mu.Unlock()
	rs.srv.Reveal(1)
}

func (rs *replSet) appendLocked(t *testing.T, e bson.D) {
	t.Helper()
	e = append(e, bson.E{Key: "ts", Value: bson.Timestamp{T: replSetSecond, I: rs.next}}, bson.E{Key: "t", Value: rs.term},
		bson.E{Key: "v", Value: int64(2)}, bson.E{Key: "wall", Value: bson.DateTime(int64(replSetSecond)*1000 + int64(rs.next))})
	raw, err := bson.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	rs.next++
	rs.entries = append(rs.entries, raw)
	rs.log.Append(raw)
	if !rs.cut {
		rs.commit = len(rs.entries) - 1
	}
}

// cutOff stops replication: later writes reach the primary only.
func (rs *replSet) cutOff() {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.cut = true
}

// failover elects a new primary holding the committed entries and rolls
// the others back; it returns how many were rolled back.
func (rs *replSet) failover(t *testing.T) int {
	t.Helper()
	rs.mu.Lock()
	rolled := len(rs.entries) - 1 - rs.commit
	rs.entries = append([]bson.Raw(nil), rs.entries[:rs.commit+1]...)
	if rs.commit >= 0 {
		_, i, _ := rs.entries[rs.commit].Lookup("ts").TimestampOK()
		rs.next = i + 1 // the new primary's clock: the rolled-back entries' timestamps again
	}
	rs.term++
	rs.cut = false
	rs.log = wiresim.NewMemOplog(rs.entries...)
	rs.appendLocked(t, bson.D{{Key: "op", Value: "n"}, {Key: "ns", Value: ""}, {Key: "o", Value: bson.D{{Key: "msg", Value: "new primary"}}}})
	log := rs.log
	rs.mu.Unlock()
	rs.srv.Failover(log)
	return rolled
}

// docs is the source's data: its oplog applied from the start, by the
// raw bytes of _id.
func (rs *replSet) docs(into map[string]bson.Raw) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, e := range rs.entries {
		o := e.Lookup("o").Document()
		key := string(o.Lookup("_id").Value)
		switch e.Lookup("op").StringValue() {
		case "i", "u":
			into[key] = o
		case "d":
			delete(into, key)
		}
	}
}

// startClient connects to rs as a task does, until the test ends.
func startClient(ctx context.Context, t *testing.T, rs *replSet) *mongo.Client {
	t.Helper()
	sc, err := conn.Open(ctx, "source", config.Endpoint{URI: rs.srv.URI() + "?replicaSet=" + rs.name}, conn.Options{AppName: "mongoferry"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sc.Disconnect(context.WithoutCancel(ctx)) })
	return sc
}

// subtask is a tailer of one replica set and the real replayer applying
// it to the target, saving its checkpoint in the target's checkpoint
// database as a run does (per shard for a sharded source).
type subtask struct {
	tailer *source.Tailer
	r      *replay.Replayer
	store  *checkpoint.Store
}

// newSubtask reads rs after from into target; board and shard set for a
// sharded source's subtask. withCap false removes the majority cap (the
// break check).
func newSubtask(ctx context.Context, t *testing.T, rs *replSet, target *mongo.Client, positions board.Board, shardName string, withCap bool, from bson.Timestamp) *subtask {
	t.Helper()
	sc := startClient(ctx, t, rs)
	dstProfile, err := conn.ProbeProfile(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	spec := config.Spec{}
	spec.SetDefaults()
	mapper, err := catalog.NewMapper(spec.Namespaces, spec.Checkpoint.Database)
	if err != nil {
		t.Fatal(err)
	}
	tl := source.NewTailer(sc, from)
	tl.SkipDatabases = []string{"local", "config", spec.Checkpoint.Database}
	if !withCap {
		tl.Commit = nil
	}
	store := checkpoint.NewStore(target, spec.Checkpoint.Database, "failover")
	if _, err := store.Start(ctx); err != nil {
		t.Fatal(err)
	}
	o := replay.Options{
		Task: "failover", Spec: &spec, Reader: tl, Source: sc, Target: target, Mapper: mapper, From: from,
		Log: engineOpts().Log, CheckpointInterval: 200 * time.Millisecond,
		MaxWriteBatch: dstProfile.MaxWriteBatch, BulkWrite: dstProfile.BulkWriteCommand, SerialUpdates: dstProfile.SerialUpdates,
		IndexesOneByOne: dstProfile.IndexesOneByOne, TargetMajor: dstProfile.Major,
		Translator: oplog.Translator{PipelineUpdates: dstProfile.PipelineUpdates},
	}
	if positions == nil {
		store = store.WithEntries(tl)
		o.Store = store
	} else {
		if _, err := store.SetShardStart(ctx, shardName, from); err != nil {
			t.Fatal(err)
		}
		store = store.ForShard(shardName).WithEntries(tl)
		o.ShardMember, o.Shard, o.Board, o.HoldPoll = true, shardName, positions, 10*time.Millisecond
		o.SaveState = func(ctx context.Context, ts bson.Timestamp, st oplog.AssemblerState) error {
			return store.SaveShardState(ctx, ts, st.Entries)
		}
	}
	return &subtask{tailer: tl, r: replay.New(o), store: store}
}

// start runs the subtask's replay until the returned stop is called;
// stop fails the test if replay ended with an error of its own.
func (st *subtask) start(ctx context.Context, t *testing.T) (stop func()) {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- st.r.Run(rctx) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("replay: %v", err)
		}
	}
}

// waitSame waits until the target's app.c holds exactly want, byte for
// byte, or the wait ends; it returns the last difference ("" when none).
func waitSame(t *testing.T, dc *mongo.Client, want map[string]bson.Raw, wait time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got := docsByID(t, dc, "app", "c")
		diff := diffDocs(keyed(want), got, "app.c")
		if diff == "" || time.Now().After(deadline) {
			return diff
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// keyed re-keys documents by _id as docsByID does.
func keyed(docs map[string]bson.Raw) map[string]bson.Raw {
	out := make(map[string]bson.Raw, len(docs))
	for _, d := range docs {
		id := d.Lookup("_id")
		out[string(append([]byte{byte(id.Type)}, id.Value...))] = d
	}
	return out
}

func fdoc(id int, v int, tag string) bson.D {
	return bson.D{{Key: "_id", Value: int64(id)}, {Key: "v", Value: int64(v)}, {Key: "tag", Value: tag}}
}

// checkpointInHistory checks that a subtask's saved checkpoint names an
// entry the source's (new) primary holds, as a restarted run checks it.
func checkpointInHistory(ctx context.Context, t *testing.T, st *subtask, rs *replSet, shardName string) {
	t.Helper()
	var at *checkpoint.OpTime
	if shardName == "" {
		rec, err := st.store.Task(ctx)
		if err != nil {
			t.Fatal(err)
		}
		at = rec.AppliedEntry
	} else {
		rec, err := st.store.ShardRecord(ctx, shardName)
		if err != nil {
			t.Fatal(err)
		}
		at = rec.AppliedEntry
	}
	if at == nil {
		t.Errorf("%s: the checkpoint was saved without its entry", rs.name)
		return
	}
	if err := source.CheckRollback(ctx, startClient(ctx, t, rs), *at); err != nil {
		t.Errorf("%s: a restart would refuse the checkpoint: %v", rs.name, err)
	}
}

func (rs *replSet) String() string { return fmt.Sprintf("replica set %s (term %d)", rs.name, rs.term) }
