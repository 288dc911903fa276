package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// moveChunk moves a chunk through the load (which then leaves it alone
// for a while).
func moveChunk(ctx context.Context, t *testing.T, l *testserver.ClusterLoad, lo, hi int64, to int) {
	t.Helper()
	n, err := l.Move(ctx, lo, hi, to)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("moved %d documents of [%d,%d) to %s", n, lo, hi, l.C.Names[to])
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
	task := shardedTask(t, "sharded", c, dst)
	task.Verify.Mode = config.VerifyHash
	opts := engine.Options{CheckpointInterval: 500 * time.Millisecond, TopologyInterval: time.Second}

	var keys []int64
	for k := int64(0); k < 3000; k += 5 {
		keys = append(keys, k)
	}
	load := testserver.NewClusterLoad(c, ns, keys, 3001, 25)
	// Moved chunks keep being written: a recipient's subtask holds their
	// writes until the donor's has applied everything before the move.
	load.Quiet = -1
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadErr := make(chan error, 1)
	go func() { loadErr <- load.Run(loadCtx, rand.New(rand.NewPCG(9, 9))) }()
	defer stopLoad()

	// First run: copy through the router, replay, a migration shard0 ->
	// shard1, then a stop.
	e1, stop1 := startEngine(t, task, opts)
	waitFor(t, "the first run to stream", 3*time.Minute, func() bool { return e1.Status().Phase == engine.PhaseStreaming })
	if s := e1.Status(); len(s.Shards) != 3 {
		t.Fatalf("status shows %d shards, want 3: %+v", len(s.Shards), s.Shards)
	}
	moveChunk(ctx, t, load, 0, 500, 1)
	time.Sleep(4 * time.Second)
	if err := stop1(); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v", err)
	}

	// While the task is stopped: a migration shard1 -> shard2 and one back
	// to shard0.
	moveChunk(ctx, t, load, 1000, 1500, 2)
	moveChunk(ctx, t, load, 200, 400, 0)

	// Second run: resumes each shard from its own checkpoint. A shard
	// joins, takes a chunk, gives it back and leaves.
	e2, done2 := runToEnd(t, task, opts)
	waitFor(t, "the second run to stream", 2*time.Minute, func() bool { return e2.Status().Phase == engine.PhaseStreaming })
	if err := c.ListShard(ctx, extra); err != nil {
		t.Fatal(err)
	}
	waitShard(t, e2, c.Names[extra], engine.SubtaskStreaming, time.Minute)
	moveChunk(ctx, t, load, 2000, 2600, extra)
	time.Sleep(3 * time.Second)
	moveChunk(ctx, t, load, 2000, 2600, 2)
	if err := c.RemoveShard(ctx, extra); err != nil {
		t.Fatal(err)
	}
	waitShard(t, e2, c.Names[extra], engine.SubtaskRetired, 2*time.Minute)

	time.Sleep(3 * time.Second)
	stopLoad()
	if err := <-loadErr; err != nil {
		t.Fatalf("load: %v", err)
	}
	e2.FinishWhenCaughtUp()
	if err := waitDone(t, done2, 4*time.Minute); err != nil {
		var rep strings.Builder
		if r := e2.VerifyReport(); r != nil {
			_ = r.WriteTable(&rep)
			dumpShardedDoc(t, c, dst, ns, rep.String())
		}
		t.Fatalf("second run: %v (status %+v)\n%s", err, e2.Status().Shards, rep.String())
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
	ins, upd, del := load.Counts()
	t.Logf("live load: %d inserts, %d updates, %d deletes; second run skipped %d fromMigrate entries", ins, upd, del, fromMigrate)
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

// waitShard waits until shard name's subtask is in phase; on timeout it
// reports every subtask's status.
func waitShard(t *testing.T, e *engine.Engine, name, phase string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for shardPhase(e.Status(), name) != phase {
		if time.Now().After(deadline) {
			s := e.Status()
			b, _ := json.MarshalIndent(s.Shards, "", "  ")
			t.Fatalf("timed out waiting for shard %s to be %s; task phase %s, error %q, shards:\n%s", name, phase, s.Phase, s.Error, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
