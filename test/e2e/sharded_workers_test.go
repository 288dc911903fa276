package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

func shardedTask(t *testing.T, name string, c *testserver.Cluster, dst *testserver.Server) *config.Task {
	t.Helper()
	task := &config.Task{Name: name, Spec: config.Spec{
		Mode:   config.ModeFullAndIncremental,
		Source: c.Source(),
		Target: config.Endpoint{URI: dst.URI},
		Verify: config.Verify{Mode: config.VerifyNone},
	}}
	task.SetDefaults()
	if err := task.Validate(); err != nil {
		t.Fatal(err)
	}
	return task
}

// TestShardedWorkers runs a sharded task as two workers, one per shard
// (engine.Options.Shard, as the operator's pods do): the worker of shard0
// records the start positions and runs the copy, the worker of shard1
// waits for it; each replays its own shard and checkpoints in its own
// record. Stand-ins as in TestShardedSourceBalancerOn.
func TestShardedWorkers(t *testing.T) {
	ctx := context.Background()
	c := testserver.StartCluster(t, 2)
	dst := testserver.Start(t)
	ns := "app.w"
	var seed []bson.D
	for k := int64(0); k < 2000; k += 10 {
		seed = append(seed, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}})
	}
	if err := c.Insert(ctx, ns, seed...); err != nil {
		t.Fatal(err)
	}
	task := shardedTask(t, "workers", c, dst)
	opts := engine.Options{CheckpointInterval: 500 * time.Millisecond}

	// The follower starts first and waits.
	o1 := opts
	o1.Shard = "shard1"
	follower, fdone := runToEnd(t, task, o1)
	time.Sleep(2 * time.Second)
	if p := follower.Status().Phase; p != engine.PhasePending {
		t.Fatalf("follower phase %s before the copy, want Pending", p)
	}

	o0 := opts
	o0.Shard = "shard0"
	leader, ldone := runToEnd(t, task, o0)
	waitFor(t, "both workers to stream", 2*time.Minute, func() bool {
		return leader.Status().Phase == engine.PhaseStreaming && follower.Status().Phase == engine.PhaseStreaming
	})
	if s := follower.Status().Shards; len(s) != 1 || s[0].Shard != "shard1" {
		t.Fatalf("follower runs %+v, want shard1 only", s)
	}
	// Writes on both shards after the copy.
	for k := int64(0); k < 2000; k += 100 {
		if err := c.Update(ctx, ns, k, bson.D{{Key: "v", Value: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete(ctx, ns, 1990); err != nil {
		t.Fatal(err)
	}
	leader.FinishWhenCaughtUp()
	follower.FinishWhenCaughtUp()
	for _, done := range []<-chan error{ldone, fdone} {
		if err := waitDone(t, done, 3*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	assertSameDocs(t, c.RouterClient(), ns, dst.MustClient(t), ns)
	// Each shard has its own checkpoint; the task's is their minimum.
	recs := dst.MustClient(t).Database("mongoferry").Collection("shards")
	n, err := recs.CountDocuments(ctx, bson.D{{Key: "task", Value: "workers"}, {Key: "appliedTS", Value: bson.D{{Key: "$exists", Value: true}}}})
	if err != nil || n != 2 {
		t.Fatalf("shard checkpoints: %d, %v; want 2", n, err)
	}
}

// TestShardedOplogWindowLostNamesShard: a shard whose oplog no longer
// holds its subtask's checkpoint stops the task with OplogWindowLost
// naming that shard, before anything is written.
func TestShardedOplogWindowLostNamesShard(t *testing.T) {
	ctx := context.Background()
	c := testserver.StartCluster(t, 2)
	dst := testserver.Start(t)
	if err := c.Insert(ctx, "app.x", bson.D{{Key: "_id", Value: int64(1)}}, bson.D{{Key: "_id", Value: int64(1001)}}); err != nil {
		t.Fatal(err)
	}
	task := shardedTask(t, "window-sharded", c, dst)
	e, err := engine.Open(ctx, task, engine.Options{UntilCaughtUp: true, CheckpointInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Run(ctx); err != nil {
		t.Fatal(err)
	}
	e.Close()
	recs := dst.MustClient(t).Database("mongoferry").Collection("shards")
	if _, err := recs.UpdateOne(ctx, bson.D{{Key: "_id", Value: "window-sharded/shard1"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "appliedTS", Value: bson.Timestamp{T: 1, I: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dst.MustClient(t))
	_, err = runEngine(t, task, engine.Options{})
	if !errors.Is(err, source.ErrOplogWindowLost) || !strings.Contains(err.Error(), "shard shard1") {
		t.Fatalf("err = %v, want OplogWindowLost naming shard1", err)
	}
	if after := snapshot(t, dst.MustClient(t)); after != before {
		t.Errorf("the target changed although the task stopped")
	}
}

// TestShardedShardRemovedWhileStopped: a shard that leaves the cluster
// while the task is stopped may hold writes the task has not applied. The
// task refuses to go on without its address, and with it reads the shard
// to its end, retires it and ends equal to the union of the shards.
// Stand-ins as in TestShardedSourceBalancerOn.
func TestShardedShardRemovedWhileStopped(t *testing.T) {
	ctx := context.Background()
	c := testserver.StartCluster(t, 2)
	dst := testserver.Start(t)
	ns := "app.r"
	var seed []bson.D
	for k := int64(0); k < 2000; k += 20 {
		seed = append(seed, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}})
	}
	if err := c.Insert(ctx, ns, seed...); err != nil {
		t.Fatal(err)
	}
	extra, err := c.AddShard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.MoveChunk(ctx, ns, 0, 200, extra); err != nil {
		t.Fatal(err)
	}
	task := shardedTask(t, "removed", c, dst)
	if _, err := runEngine(t, task, engine.Options{UntilCaughtUp: true}); err != nil {
		t.Fatal(err)
	}
	// While the task is stopped: writes on the extra shard, then its chunk
	// moves away and the shard leaves.
	if err := c.Update(ctx, ns, 20, bson.D{{Key: "v", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, ns, 40); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MoveChunk(ctx, ns, 0, 200, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveShard(ctx, extra); err != nil {
		t.Fatal(err)
	}

	noAddress := shardedTask(t, "removed", c, dst)
	noAddress.Source.Shards = noAddress.Source.Shards[:2]
	_, err = runEngine(t, noAddress, engine.Options{UntilCaughtUp: true})
	if err == nil || !strings.Contains(err.Error(), "shard2 left the cluster") {
		t.Fatalf("without the removed shard's address: err = %v, want it named", err)
	}
	s, err := runEngine(t, task, engine.Options{UntilCaughtUp: true, CheckpointInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if p := shardPhase(s, "shard2"); p != engine.SubtaskRetired {
		t.Errorf("shard2 phase %q, want Retired", p)
	}
	assertSameDocs(t, c.RouterClient(), ns, dst.MustClient(t), ns)
}

// runToEnd runs an engine until it ends by itself (or the test ends) and
// returns its Run error on done.
func runToEnd(t *testing.T, task *config.Task, opts engine.Options) (*engine.Engine, <-chan error) {
	t.Helper()
	e, err := engine.Open(context.Background(), task, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		err := e.Run(ctx)
		close(finished)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
		e.Close()
	})
	return e, done
}

// waitDone waits for a run's end.
func waitDone(t *testing.T, done <-chan error, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("the run did not end within %s", timeout)
		return nil
	}
}
