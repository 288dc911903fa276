package e2e

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// shardLoad is a live load through the test router: inserts, updates and
// deletes of integer keys, a few tens per second.
type shardLoad struct {
	c  *testserver.Cluster
	ns string

	mu    sync.Mutex
	keys  []int64
	next  int64
	quiet map[[2]int64]time.Time // recently moved chunks: see run
	ops   int
}

// run writes until ctx ends. The load leaves a chunk alone for a few
// seconds after it moved: without the hold-after-migration rule (the shard
// board, not wired yet) a recipient's subtask could apply a moved
// document's next write before the donor's subtask applied its previous
// one.
func (l *shardLoad) run(ctx context.Context, t *testing.T, rng *rand.Rand) error {
	for ctx.Err() == nil {
		time.Sleep(40 * time.Millisecond)
		l.mu.Lock()
		var err error
		switch n := rng.IntN(10); {
		case n < 4 || len(l.keys) < 50:
			k := l.next
			l.next += 7
			l.mu.Unlock()
			err = l.c.Insert(ctx, l.ns, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}, {Key: "pad", Value: "live"}})
			l.mu.Lock()
			if err == nil {
				l.keys = append(l.keys, k)
			}
		default:
			i := rng.IntN(len(l.keys))
			k := l.keys[i]
			if l.quietKey(k) {
				l.mu.Unlock()
				continue
			}
			if n < 8 {
				l.mu.Unlock()
				err = l.c.Update(ctx, l.ns, k, bson.D{{Key: "v", Value: rng.IntN(1000)}, {Key: "at", Value: time.Now().UnixNano()}})
				l.mu.Lock()
			} else {
				l.keys[i] = l.keys[len(l.keys)-1]
				l.keys = l.keys[:len(l.keys)-1]
				l.mu.Unlock()
				err = l.c.Delete(ctx, l.ns, k)
				l.mu.Lock()
			}
		}
		l.ops++
		l.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

func (l *shardLoad) quietKey(k int64) bool {
	for r, until := range l.quiet {
		if k >= r[0] && k < r[1] && time.Now().Before(until) {
			return true
		}
	}
	return false
}

// move moves a chunk and keeps the load off it for a while.
func (l *shardLoad) move(ctx context.Context, t *testing.T, lo, hi int64, to int) {
	t.Helper()
	l.mu.Lock()
	l.quiet[[2]int64{lo, hi}] = time.Now().Add(time.Hour)
	l.mu.Unlock()
	n, err := l.c.MoveChunk(ctx, l.ns, lo, hi, to)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.quiet[[2]int64{lo, hi}] = time.Now().Add(6 * time.Second)
	l.mu.Unlock()
	t.Logf("moved %d documents of [%d,%d) to %s", n, lo, hi, l.c.Names[to])
}

// TestShardedSourceBalancerOn runs a fullAndIncremental task on a sharded
// source with the balancer on. Stand-ins (see testserver.Cluster): three
// FerretDB servers are the shards' replica sets, each with its own real
// oplog; a fourth FerretDB server is mongos (it holds the union of the
// shards' documents and config.shards, and the full copy and verification
// read it); the test router's chunk table is the cluster's routing table;
// MoveChunk is the balancer (documents move unlogged, the shards' oplogs
// get fromMigrate inserts on the recipient and fromMigrate deletes on the
// donor). Under a live load through the router it moves chunks both ways,
// stops the engine midway and restarts it (each subtask resumes from its
// own checkpoint), adds a shard (its subtask starts at its first oplog
// entry) and removes it again (its subtask drains, then retires). The
// target must end equal to the union of the shards, document by document.
func TestShardedSourceBalancerOn(t *testing.T) {
	ctx := context.Background()
	c := testserver.StartCluster(t, 3)
	dst := testserver.Start(t)
	ns := "app.items"
	var seed []bson.D
	for k := int64(0); k < 3000; k += 5 {
		seed = append(seed, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}, {Key: "pad", Value: "seed"}})
	}
	if err := c.Insert(ctx, ns, seed...); err != nil {
		t.Fatal(err)
	}
	if err := c.Insert(ctx, "app.users", bson.D{{Key: "_id", Value: int64(1)}, {Key: "name", Value: "a"}}, bson.D{{Key: "_id", Value: int64(1500)}, {Key: "name", Value: "b"}}); err != nil {
		t.Fatal(err)
	}
	// A fourth shard server exists from the start but joins the cluster
	// later: the task file names it among its overrides.
	extra, err := c.PrepareShard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	task := &config.Task{Name: "sharded", Spec: config.Spec{
		Mode:   config.ModeFullAndIncremental,
		Source: config.Endpoint{URI: c.RouterURI(), Kind: config.KindSharded, Shards: c.Overrides()},
		Target: config.Endpoint{URI: dst.URI},
		Verify: config.Verify{Mode: config.VerifyHash},
	}}
	task.SetDefaults()
	if err := task.Validate(); err != nil {
		t.Fatal(err)
	}
	opts := engine.Options{CheckpointInterval: 500 * time.Millisecond, TopologyInterval: time.Second}

	load := &shardLoad{c: c, ns: ns, next: 3001, quiet: map[[2]int64]time.Time{}}
	for k := int64(0); k < 3000; k += 5 {
		load.keys = append(load.keys, k)
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadErr := make(chan error, 1)
	go func() { loadErr <- load.run(loadCtx, t, rand.New(rand.NewPCG(9, 9))) }()
	defer stopLoad()

	// First run: copy through the router, replay, a migration shard0 ->
	// shard1, then a stop.
	e1, err := engine.Open(ctx, task, opts)
	if err != nil {
		t.Fatal(err)
	}
	run1, stop1 := context.WithCancel(ctx)
	done1 := make(chan error, 1)
	go func() { done1 <- e1.Run(run1) }()
	waitFor(t, "the first run to stream", 3*time.Minute, func() bool { return e1.Status().Phase == engine.PhaseStreaming })
	if s := e1.Status(); len(s.Shards) != 3 {
		t.Fatalf("status shows %d shards, want 3: %+v", len(s.Shards), s.Shards)
	}
	load.move(ctx, t, 0, 500, 1)
	time.Sleep(4 * time.Second)
	stop1()
	if err := <-done1; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v", err)
	}
	e1.Close()

	// While the task is stopped: a migration shard1 -> shard2 and one back
	// to shard0.
	load.move(ctx, t, 1000, 1500, 2)
	load.move(ctx, t, 200, 400, 0)

	// Second run: resumes each shard from its own checkpoint. A shard
	// joins, takes a chunk, gives it back and leaves.
	e2, err := engine.Open(ctx, task, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	run2, stop2 := context.WithCancel(ctx)
	defer stop2()
	done2 := make(chan error, 1)
	go func() { done2 <- e2.Run(run2) }()
	waitFor(t, "the second run to stream", 2*time.Minute, func() bool { return e2.Status().Phase == engine.PhaseStreaming })
	if err := c.ListShard(ctx, extra); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the added shard's subtask", time.Minute, func() bool { return shardPhase(e2.Status(), c.Names[extra]) == engine.SubtaskStreaming })
	load.move(ctx, t, 2000, 2600, extra)
	time.Sleep(3 * time.Second)
	load.move(ctx, t, 2000, 2600, 2)
	if err := c.RemoveShard(ctx, extra); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removed shard's subtask to retire", 2*time.Minute, func() bool { return shardPhase(e2.Status(), c.Names[extra]) == engine.SubtaskRetired })

	time.Sleep(3 * time.Second)
	stopLoad()
	if err := <-loadErr; err != nil {
		t.Fatalf("load: %v", err)
	}
	e2.FinishWhenCaughtUp()
	select {
	case err := <-done2:
		if err != nil {
			t.Fatalf("second run: %v (status %+v)", err, e2.Status().Shards)
		}
	case <-time.After(4 * time.Minute):
		t.Fatalf("second run did not catch up: %+v", e2.Status().Shards)
	}
	s := e2.Status()
	if s.Phase != engine.PhaseCompleted || s.Verify == nil || !s.Verify.OK {
		t.Fatalf("phase %s, verify %+v", s.Phase, s.Verify)
	}
	var fromMigrate int64
	for _, sh := range s.Shards {
		if sh.Replay != nil {
			fromMigrate += sh.Replay.Skipped["fromMigrate"]
		}
	}
	if fromMigrate == 0 {
		t.Errorf("no fromMigrate entry skipped by the second run: %+v", s.Shards)
	}
	t.Logf("live load: %d operations; second run skipped %d fromMigrate entries", load.ops, fromMigrate)
	assertSameDocs(t, c.RouterClient(), ns, dst.MustClient(t), ns)
	assertSameDocs(t, c.RouterClient(), "app.users", dst.MustClient(t), "app.users")
}

func shardPhase(s engine.Status, name string) string {
	for _, sh := range s.Shards {
		if sh.Shard == name {
			return sh.Phase
		}
	}
	return ""
}
