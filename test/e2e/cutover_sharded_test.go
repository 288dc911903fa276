package e2e

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/cli/run"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/wiresim"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// shardedCutoverSetup starts a cluster of n shards with ns seeded, a
// target, and a live load through the router (stopped by the returned
// func, which waits for it); moved chunks keep being written (the shard
// board holds a recipient's writes until the donor's are applied).
// Stand-ins as in TestShardedSourceBalancerOn: FerretDB servers are the
// shards' replica sets with their own oplogs and a FerretDB server is
// mongos (the union of the shards' documents, read by the copy and the
// verification); ClusterLoad.Move is the balancer, logging fromMigrate
// entries on donor and recipient.
func shardedCutoverSetup(t *testing.T, n int, ns string) (*testserver.Cluster, *testserver.Server, *testserver.ClusterLoad, func()) {
	t.Helper()
	b := startShardedCutoverBed(t, n, ns, false)
	return b.c, b.dst, b.load, b.stop
}

// shardedCutoverBed is what startShardedCutoverBed started.
type shardedCutoverBed struct {
	c    *testserver.Cluster
	dst  *testserver.Server
	load *testserver.ClusterLoad
	stop func()
	// proxy, with blockable, stands in for mongos's user write blocking
	// in front of the router: the load's writes and the task's router
	// traffic go through it.
	proxy *wiresim.WriteBlockProxy
}

// startShardedCutoverBed is shardedCutoverSetup's work; with blockable
// the router is reached through a wiresim.WriteBlockProxy, and the load,
// as an application would, ends at its first write refused as blocked.
func startShardedCutoverBed(t *testing.T, n int, ns string, blockable bool) shardedCutoverBed {
	t.Helper()
	ctx := context.Background()
	b := shardedCutoverBed{c: testserver.StartCluster(t, n), dst: testserver.Start(t)}
	if blockable {
		b.proxy, _ = writeBlockProxy(t, b.c.Router.Addr)
		if err := b.c.RouteThrough(ctx, b.proxy.URI()); err != nil {
			t.Fatal(err)
		}
	}
	var seed []bson.D
	var keys []int64
	for k := int64(0); k < 3000; k += 5 {
		seed = append(seed, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}, {Key: "pad", Value: "seed"}})
		keys = append(keys, k)
	}
	if err := b.c.Insert(ctx, ns, seed...); err != nil {
		t.Fatal(err)
	}
	b.load = testserver.NewClusterLoad(b.c, ns, keys, 3001, 20)
	b.load.Quiet = -1
	loadCtx, cancel := context.WithCancel(ctx)
	loadErr := make(chan error, 1)
	go func() { loadErr <- b.load.Run(loadCtx, rand.New(rand.NewPCG(16, 16))) }()
	var once sync.Once
	b.stop = func() {
		once.Do(func() {
			cancel()
			err := <-loadErr
			var se mongo.ServerError
			if blockable && errors.As(err, &se) && se.HasErrorCode(userWritesBlocked) {
				return
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("load: %v", err)
			}
		})
	}
	t.Cleanup(b.stop)
	return b
}

// userWritesBlocked is MongoDB's error code for a user write refused
// while setUserWriteBlockMode blocks writes.
const userWritesBlocked = 372

// shardCutovers reads every shard's part in the task's cut-over.
func shardCutovers(t *testing.T, dst *testserver.Server, task string) map[string]*checkpoint.ShardCutover {
	t.Helper()
	recs, err := checkpoint.NewStore(dst.MustClient(t), "mongoferry", task).Shards(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*checkpoint.ShardCutover{}
	for name, r := range recs {
		out[name] = r.Cutover
	}
	return out
}

// TestShardedCutoverUnderLiveLoad runs `ferry cutover` on a 3-shard
// source in one process (every shard's subtask in it) under a live load
// with a chunk move while it catches up and another while it drains; the
// application's writes stop when the cut-over reaches Draining (FerretDB
// has no setUserWriteBlockMode: blockSourceWrites is false and the test
// stands in for the application stopping). The run is stopped just after
// it recorded a step (Draining before the drain positions are read,
// Draining once every shard drained, Verifying, Finalizing) and run
// again: it goes on from that step, not from CatchingUp, and completes
// with every shard drained to its recorded position, verification (hash,
// through mongos) OK, and the target equal to the union of the shards.
func TestShardedCutoverUnderLiveLoad(t *testing.T) {
	tests := []struct {
		name   string
		stopAt string
		nth    int // stop at the nth time the step is recorded
	}{
		{"draining, before the drain positions", workerapi.CutoverDraining, 1},
		{"draining, every shard drained", workerapi.CutoverDraining, 2},
		{"verifying", workerapi.CutoverVerifying, 1},
		{"finalizing", workerapi.CutoverFinalizing, 1},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			ns := "app.items"
			c, dst, load, stopLoad := shardedCutoverSetup(t, 3, ns)
			name := "cut-sharded-" + string(rune('a'+i))
			task := shardedTask(t, name, c, dst)
			task.Cutover = config.Cutover{Requested: true, Verify: config.VerifyHash, MaxLagSeconds: 5}
			opts := engineOpts()
			opts.CheckpointInterval, opts.TopologyInterval = 500*time.Millisecond, time.Second

			run1, stop1 := context.WithCancel(ctx)
			defer stop1()
			var moves sync.WaitGroup
			defer moves.Wait()
			seen := map[string]int{}
			var steps1 []string
			opts1 := opts
			opts1.OnCutoverStep = func(step string) {
				steps1 = append(steps1, step)
				seen[step]++
				if step == workerapi.CutoverCatchingUp {
					// The cut-over starts while the application writes:
					// a migration and seconds of writes for the shards to
					// catch up with.
					moveChunk(ctx, t, load, 0, 500, 1)
					time.Sleep(4 * time.Second)
				}
				if step == workerapi.CutoverDraining && seen[step] == 1 {
					stopLoad()
					// The balancer goes on while the shards drain (in this
					// run or, stopped at once, the next).
					moves.Add(1)
					go func() {
						defer moves.Done()
						if _, err := load.Move(ctx, 1500, 2000, 0); err != nil {
							t.Errorf("move during the drain: %v", err)
						}
					}()
				}
				if step == tc.stopAt && seen[step] == tc.nth {
					stop1()
				}
			}
			e1, err := engine.Open(ctx, task, opts1)
			if err != nil {
				t.Fatal(err)
			}
			done1 := make(chan error, 1)
			go func() { done1 <- e1.Run(run1) }()
			err = waitRunProgress(t, "the first run", done1, runProgress(e1))
			e1.Close()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("first run: %v, want it stopped at %s (steps %v)", err, tc.stopAt, steps1)
			}
			if rec := cutoverRecord(t, dst.MustClient(t), name); rec == nil || rec.Step != tc.stopAt {
				t.Fatalf("recorded %+v, want %s", rec, tc.stopAt)
			}

			var steps []string
			opts2 := opts
			opts2.OnCutoverStep = func(step string) { steps = append(steps, step) }
			e2, done2 := runToEnd(t, task, opts2)
			err2 := waitRunProgress(t, "the second run", done2, runProgress(e2))
			st, err := e2.Status(), err2
			if err != nil {
				t.Fatalf("second run: %v (cut-over %+v, shards %+v)", err, st.Cutover, st.Shards)
			}
			if len(steps) == 0 || steps[0] == workerapi.CutoverCatchingUp {
				t.Errorf("second run recorded %v: it started over", steps)
			}
			co := st.Cutover
			if st.Phase != engine.PhaseCompleted || co == nil || co.Step != workerapi.CutoverComplete || !co.CaughtUp ||
				co.SourcePosition == nil || co.TargetPosition == nil || co.Verify == nil || !co.Verify.OK {
				t.Fatalf("phase %s, cut-over %+v: want Completed, Complete with both positions and a verification that passed", st.Phase, co)
			}
			moves.Wait()
			recs, err := checkpoint.NewStore(dst.MustClient(t), "mongoferry", name).Shards(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 3 {
				t.Errorf("%d shard records, want 3", len(recs))
			}
			for shard, r := range recs {
				if r.Cutover == nil || !r.Cutover.Drained || r.ResumeTS().Compare(r.Cutover.DrainTS) < 0 {
					t.Errorf("shard %s: checkpoint %v, cut-over part %+v: want drained to its position", shard, r.ResumeTS(), r.Cutover)
				}
			}
			ins, upd, del := load.Counts()
			t.Logf("live load: %d inserts, %d updates, %d deletes; steps %v, then %v", ins, upd, del, steps1, steps)
			assertSameDocs(t, c.RouterClient(), ns, dst.MustClient(t), ns)
		})
	}
}

// TestShardedCutoverWorkers runs the cut-over with one worker per shard
// (engine.Options.Shard, as the operator's pods run), meeting only
// through the target's checkpoint database; stand-ins as in
// TestShardedCutoverUnderLiveLoad, on two shards. First with
// blockSourceWrites: the worker moving the steps (shard0's) fails with
// the clear error, and the other worker, following the cut-over, ends
// with the same message and exit code (docs/cutover.md). Then without: under live load and a chunk move, the other
// worker is stopped during Draining and started again; it goes on from
// its shard's records, both workers end Completed, the cut-over is
// Complete with verification OK and the target equals the union of the
// shards.
func TestShardedCutoverWorkers(t *testing.T) {
	ctx := context.Background()
	ns := "app.w"
	c, dst, load, stopLoad := shardedCutoverSetup(t, 2, ns)
	task := shardedTask(t, "cut-workers", c, dst)
	task.Cutover = config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyHash, MaxLagSeconds: 5}
	opts := engineOpts()
	opts.CheckpointInterval = 500 * time.Millisecond
	worker := func(name string, hook func(string)) engine.Options {
		o := opts
		o.Shard, o.OnCutoverStep = name, hook
		return o
	}

	// blockSourceWrites on FerretDB: refused with the reason, by both.
	l0, ldone := runToEnd(t, task, worker("shard0", nil))
	f0, fdone := runToEnd(t, task, worker("shard1", nil))
	lerr := waitRunProgress(t, "shard0's worker", ldone, runProgress(l0, f0))
	failedAt := time.Now()
	if !errors.Is(lerr, source.ErrWriteBlockUnavailable) || !errors.Is(lerr, engine.ErrCutoverFailed) ||
		!strings.Contains(lerr.Error(), "blockSourceWrites: false") {
		t.Fatalf("shard0's worker: %v, want the write block refused", lerr)
	}
	// The follower reads the recorded failure at its next look (every
	// second while it streams) and ends once its subtask stopped: what it
	// reports stays the same until it reads Failed, so a follower that
	// never does fails the wait, and its writes in flight move after.
	ferr := waitRunProgress(t, "shard1's worker, after the failure", fdone, func() string {
		if c := f0.Status().Cutover; c == nil || c.Step != workerapi.CutoverFailed {
			return "the failure not read yet"
		}
		return runProgress(f0)()
	})
	t.Logf("shard1's worker ended %s after shard0's", time.Since(failedAt).Round(time.Millisecond))
	if !errors.Is(ferr, engine.ErrCutoverFailed) || ferr.Error() != lerr.Error() {
		t.Fatalf("shard1's worker: %v, want the cut-over's failure as shard0's worker reported it: %v", ferr, lerr)
	}
	if code, lcode := run.ExitCode(ferr), run.ExitCode(lerr); code != lcode || code != workerapi.ExitCutoverFailed {
		t.Errorf("exit codes %d (shard1) and %d (shard0), want both %d", code, lcode, workerapi.ExitCutoverFailed)
	}
	if rec := cutoverRecord(t, dst.MustClient(t), "cut-workers"); rec == nil || rec.Step != workerapi.CutoverFailed || rec.WritesBlocked {
		t.Fatalf("recorded %+v, want Failed with writes not blocked", rec)
	}

	// Without the block: the application stops its writes at Draining,
	// and shard1's worker is stopped then, before the drain positions are
	// read (the worker moving the steps reads them after this step is
	// recorded), so its shard cannot be drained yet.
	task.Cutover.BlockSourceWrites = false
	var mu sync.Mutex
	var followerSteps []string
	killed := make(chan struct{})
	var killOnce sync.Once
	fctx, fstop := context.WithCancel(ctx)
	defer fstop()
	leader, ldone := runToEnd(t, task, worker("shard0", func(step string) {
		if step == workerapi.CutoverDraining {
			killOnce.Do(func() {
				stopLoad()
				// Told before shard1's worker ends, so that its end is
				// not taken for an early one.
				close(killed)
				fstop()
			})
		}
	}))
	f1, err := engine.Open(ctx, task, worker("shard1", func(step string) {
		mu.Lock()
		followerSteps = append(followerSteps, step)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	f1done := make(chan error, 1)
	go func() { f1done <- f1.Run(fctx) }()
	both := runProgress(leader, f1)
	waitProgressFor(t, "both workers to stream", func() bool {
		return leader.Status().Phase == engine.PhaseStreaming && f1.Status().Phase == engine.PhaseStreaming
	}, both)
	moveChunk(ctx, t, load, 0, 400, 1)
	waitProgressFor(t, "the cut-over to reach Draining", func() bool {
		select {
		case <-killed: // shard1's worker is stopped from then on
			return true
		default:
		}
		select {
		case err := <-ldone:
			t.Fatalf("shard0's worker ended before the cut-over reached Draining: %v (cut-over %+v)", err, leader.Status().Cutover)
		case err := <-f1done:
			t.Fatalf("shard1's worker ended before the cut-over reached Draining: %v (cut-over %+v)", err, f1.Status().Cutover)
		default:
		}
		return false
	}, both)
	if err := waitRunProgress(t, "shard1's worker, stopped", f1done, runProgress(f1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("shard1's worker stopped during Draining: %v", err)
	}
	f1.Close()
	mu.Lock()
	t.Logf("shard1's worker saw %v before it was stopped", followerSteps)
	mu.Unlock()
	time.Sleep(2 * time.Second)
	if s := leader.Status(); s.Cutover == nil || s.Cutover.Step != workerapi.CutoverDraining {
		t.Fatalf("without shard1's worker the cut-over went on to %+v", s.Cutover)
	}

	f2, fdone := runToEnd(t, task, worker("shard1", nil))
	if err := waitRunProgress(t, "shard0's worker", ldone, runProgress(leader, f2)); err != nil {
		t.Fatalf("shard0's worker: %v (cut-over %+v)", err, leader.Status().Cutover)
	}
	// Complete is recorded: shard1's worker, drained, reads it at its
	// next look (every half second) and ends.
	if err := waitRunProgress(t, "shard1's worker", fdone, runProgress(f2)); err != nil {
		t.Fatalf("shard1's worker: %v", err)
	}
	ls, fs := leader.Status(), f2.Status()
	co := ls.Cutover
	if co == nil || co.Step != workerapi.CutoverComplete || co.Verify == nil || !co.Verify.OK || co.TargetPosition == nil {
		t.Fatalf("cut-over %+v, want Complete with a verification that passed", co)
	}
	if ls.Phase != engine.PhaseCompleted || fs.Phase != engine.PhaseCompleted || fs.Cutover == nil || fs.Cutover.Step != workerapi.CutoverComplete {
		t.Errorf("phases %s and %s, shard1's worker's cut-over %+v: want both Completed, Complete", ls.Phase, fs.Phase, fs.Cutover)
	}
	if len(fs.Shards) != 1 || fs.Shards[0].Cutover == nil || !fs.Shards[0].Cutover.Drained {
		t.Errorf("shard1's worker reports %+v, want its shard drained", fs.Shards)
	}
	for name, sc := range shardCutovers(t, dst, "cut-workers") {
		if sc == nil || !sc.Drained {
			t.Errorf("shard %s: cut-over part %+v, want drained", name, sc)
		}
	}
	assertSameDocs(t, c.RouterClient(), ns, dst.MustClient(t), ns)
}

// TestShardedCutoverBlocksWrites: a cut-over with blockSourceWrites on a
// 2-shard source, run by one process, while the application writes and
// the balancer moves chunks. Stand-ins as in
// TestShardedCutoverUnderLiveLoad, and the router is reached through a
// wiresim.WriteBlockProxy, which stands in for mongos's user write
// blocking (FerretDB has no setUserWriteBlockMode): a write blocked at
// the router reaches no shard, as MongoDB blocks it on every shard. The
// test never stops the application: the block does. A chunk moves
// during the drain, as migrations go on while user writes are blocked.
// The cut-over completes with every shard drained, verification OK, the
// target equal to the union of the shards, and the source's writes still
// blocked.
func TestShardedCutoverBlocksWrites(t *testing.T) {
	ctx := context.Background()
	ns := "app.blocked"
	b := startShardedCutoverBed(t, 2, ns, true)
	task := shardedTask(t, "cut-blocked", b.c, b.dst)
	task.Cutover = config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyHash, MaxLagSeconds: 5}
	opts := engineOpts()
	opts.CheckpointInterval, opts.TopologyInterval = 500*time.Millisecond, time.Second
	var moves sync.WaitGroup
	defer moves.Wait()
	var steps []string
	blockedAtDrain := false
	opts.OnCutoverStep = func(step string) {
		steps = append(steps, step)
		switch {
		case step == workerapi.CutoverCatchingUp && len(steps) == 1:
			moveChunk(ctx, t, b.load, 0, 500, 1)
		case step == workerapi.CutoverDraining && !slices.Contains(steps[:len(steps)-1], workerapi.CutoverDraining):
			blockedAtDrain = b.proxy.Blocked()
			moves.Add(1)
			go func() {
				defer moves.Done()
				if _, err := b.load.Move(ctx, 1500, 2000, 0); err != nil {
					t.Errorf("move during the drain: %v", err)
				}
			}()
		}
	}
	e, done := runToEnd(t, task, opts)
	if err := waitRunProgress(t, "the run", done, runProgress(e)); err != nil {
		t.Fatalf("run: %v (cut-over %+v)", err, e.Status().Cutover)
	}
	st := e.Status()
	co := st.Cutover
	if st.Phase != engine.PhaseCompleted || co == nil || co.Step != workerapi.CutoverComplete || !co.WritesBlocked ||
		co.Verify == nil || !co.Verify.OK {
		t.Fatalf("phase %s, cut-over %+v: want Completed, Complete with writes blocked and a verification that passed", st.Phase, co)
	}
	if !blockedAtDrain {
		t.Errorf("steps %v: writes were not blocked when the drain began", steps)
	}
	moves.Wait()
	b.stop()
	var se mongo.ServerError
	if err := b.c.Insert(ctx, ns, bson.D{{Key: "_id", Value: int64(1_000_003)}}); !errors.As(err, &se) || !se.HasErrorCode(userWritesBlocked) {
		t.Errorf("an application write after the cut-over: %v, want UserWritesBlocked", err)
	}
	for shard, part := range shardCutovers(t, b.dst, "cut-blocked") {
		if part == nil || !part.Drained {
			t.Errorf("shard %s: cut-over part %+v, want drained", shard, part)
		}
	}
	ins, upd, del := b.load.Counts()
	t.Logf("live load: %d inserts, %d updates, %d deletes before the block; %d writes refused; steps %v", ins, upd, del, b.proxy.Refused(), steps)
	assertSameDocs(t, b.c.RouterClient(), ns, b.dst.MustClient(t), ns)
}

// TestShardedCutoverWritesAfterDrain: a sharded cut-over whose
// verification fails after every shard drained, then succeeds when
// requested again. Stand-ins as in TestShardedCutoverUnderLiveLoad, on
// two shards, run by one process. The application writes once more after
// every shard recorded its drain (an insert from the hook, on one shard
// and through the router): the verification through mongos finds the
// target behind, and the cut-over fails with the message that says the
// source took writes after the drain. The shard board's Drained marks of
// that attempt are left behind; requested again, the cut-over clears
// them, replays the late write and completes with the target equal to the
// union of the shards.
func TestShardedCutoverWritesAfterDrain(t *testing.T) {
	ctx := context.Background()
	ns := "app.late"
	c, dst, _, stopLoad := shardedCutoverSetup(t, 2, ns)
	task := shardedTask(t, "cut-late", c, dst)
	task.Cutover = config.Cutover{Requested: true, Verify: config.VerifyHash, MaxLagSeconds: 5}
	opts := engineOpts()
	opts.CheckpointInterval = 500 * time.Millisecond
	const late = int64(1_000_001)
	draining := 0
	opts1 := opts
	opts1.OnCutoverStep = func(step string) {
		if step != workerapi.CutoverDraining {
			return
		}
		draining++
		switch draining {
		case 1:
			stopLoad() // the application stops when asked
		case 2:
			// Every shard has drained: one more write arrives anyway.
			if err := c.Insert(ctx, ns, bson.D{{Key: "_id", Value: late}, {Key: "v", Value: 1}, {Key: "pad", Value: "late"}}); err != nil {
				t.Error(err)
			}
		}
	}
	e1, done1 := runToEnd(t, task, opts1)
	err := waitRunProgress(t, "the first run", done1, runProgress(e1))
	if !errors.Is(err, engine.ErrCutoverFailed) || !errors.Is(err, engine.ErrVerificationFailed) {
		t.Fatalf("first run: %v, want the cut-over failed on its verification (drained %d times)", err, draining)
	}
	for _, part := range []string{"took writes after the drain position", "nothing is lost", "request the cut-over again"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
	if st := e1.Status(); st.Cutover == nil || st.Cutover.Step != workerapi.CutoverFailed {
		t.Errorf("cut-over status %+v, want Failed", st.Cutover)
	}
	e1.Close()

	e2, done2 := runToEnd(t, task, opts)
	if err := waitRunProgress(t, "the second run", done2, runProgress(e2)); err != nil {
		t.Fatalf("second run: %v (cut-over %+v, shards %+v)", err, e2.Status().Cutover, e2.Status().Shards)
	}
	if co := e2.Status().Cutover; co == nil || co.Step != workerapi.CutoverComplete || co.Verify == nil || !co.Verify.OK {
		t.Fatalf("second run's cut-over %+v, want Complete with a verification that passed", co)
	}
	n, err := dst.MustClient(t).Database("app").Collection("late").CountDocuments(ctx, bson.D{{Key: "_id", Value: late}})
	if err != nil || n != 1 {
		t.Errorf("the write made after the drain: %d on the target (%v), want 1", n, err)
	}
	assertSameDocs(t, c.RouterClient(), ns, dst.MustClient(t), ns)
}
