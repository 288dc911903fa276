package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/internal/wiresim"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// startLoad runs a mixed insert/update/delete load on the source until
// the returned stop is called (and has waited for it): the application.
func startLoad(sc *mongo.Client, base workload.Options, rate float64) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		run := base
		run.Workload, run.Threads, run.Rate, run.Distribution = workload.WorkloadMixed, 2, rate, workload.Uniform
		run.InsertProportion, run.UpdateProportion, run.DeleteProportion = 0.4, 0.4, 0.2
		_, _ = workload.Run(ctx, sc, run)
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			// A write whose context ended may still reach the server: the
			// application has stopped once the oplog stays unchanged.
			var last bson.Timestamp
			for range 50 {
				time.Sleep(300 * time.Millisecond)
				ts, err := source.NewestTS(context.Background(), sc)
				if err == nil && ts == last {
					return
				}
				last = ts
			}
		})
	}
}

// writeBlockProxy starts a wiresim.WriteBlockProxy in front of the server
// at addr (it stands in for MongoDB 6.0's user write blocking, which
// FerretDB lacks) and returns it with a client that reaches the server
// through it, as the application does. Both end with the test.
func writeBlockProxy(t *testing.T, addr string) (*wiresim.WriteBlockProxy, *mongo.Client) {
	t.Helper()
	proxy, err := wiresim.StartWriteBlockProxy(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	app, err := mongo.Connect(options.Client().ApplyURI(proxy.URI()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Disconnect(context.Background()) })
	return proxy, app
}

// cutoverRecord reads the cut-over recorded in the target's checkpoint
// database.
func cutoverRecord(t *testing.T, dc *mongo.Client, task string) *checkpoint.CutoverRecord {
	t.Helper()
	rec, err := checkpoint.NewStore(dc, "mongoferry", task).Task(context.Background())
	if err != nil {
		t.Fatalf("read the task record: %v", err)
	}
	return rec.Cutover
}

// TestCutoverUnderLiveLoad: a task with cutover.requested copies and
// replays while the source takes inserts, updates and deletes; the
// application's writes stop when the cut-over reaches Draining (FerretDB
// cannot block writes, so blockSourceWrites is false and the test stands
// in for the application stopping). The run ends Completed with the
// cut-over Complete, both positions recorded, verification OK, and the
// target equal to the source.
func TestCutoverUnderLiveLoad(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 2000, FieldCount: 4, FieldLength: 30, Seed: 11}
	if _, err := workload.Load(context.Background(), sc, base); err != nil {
		t.Fatal(err)
	}
	task := newTask(t, "cut", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.Cutover = config.Cutover{Requested: true, Verify: config.VerifyHash, MaxLagSeconds: 5}
	})
	stopLoad := startLoad(sc, base, 30)
	defer stopLoad()
	var steps []string
	opts := engineOpts()
	opts.OnCutoverStep = func(step string) {
		steps = append(steps, step)
		if step == workerapi.CutoverDraining {
			// Writes keep coming until here: catching up ran under load.
			stopLoad()
		}
	}
	st, err := runEngine(t, task, opts)
	if err != nil {
		t.Fatalf("run: %v (status %+v)", err, st.Cutover)
	}
	if st.Phase != engine.PhaseCompleted {
		t.Errorf("phase %s, want Completed", st.Phase)
	}
	co := st.Cutover
	if co == nil || co.Step != workerapi.CutoverComplete || !co.CaughtUp || co.SourcePosition == nil || co.TargetPosition == nil ||
		co.Verify == nil || !co.Verify.OK || co.FinishedAt == nil {
		t.Fatalf("cut-over status %+v, want Complete with both positions and a verification that passed", co)
	}
	want := []string{workerapi.CutoverCatchingUp, workerapi.CutoverDraining, workerapi.CutoverDraining, workerapi.CutoverVerifying,
		workerapi.CutoverVerifying, workerapi.CutoverFinalizing, workerapi.CutoverComplete}
	if strings.Join(steps, " ") != strings.Join(want, " ") {
		t.Errorf("steps recorded %v, want %v", steps, want)
	}
	if rec := cutoverRecord(t, dc, "cut"); rec == nil || rec.Step != workerapi.CutoverComplete || rec.SourceTS.IsZero() || rec.TargetTS.IsZero() {
		t.Errorf("recorded cut-over %+v, want Complete with both positions", rec)
	}
	newest, err := source.NewestTS(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	if got := (bson.Timestamp{T: co.SourcePosition.T, I: co.SourcePosition.I}); got != newest {
		t.Errorf("drained to %v, the source's newest entry is %v", got, newest)
	}
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
}

// TestCutoverBlockSourceWritesUnsupported: FerretDB has no
// setUserWriteBlockMode, so a cut-over with blockSourceWrites stops with an
// error that names the problem and the fix, and records the step as
// Failed; the writes the source takes after that are not lost: the same
// task with blockSourceWrites false completes and the target equals the
// source.
func TestCutoverBlockSourceWritesUnsupported(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "app", "c", mixedIDDocs(300))
	task := newTask(t, "blocked", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.Cutover = config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyCount, MaxLagSeconds: 5}
	})
	st, err := runEngine(t, task, engineOpts())
	if !errors.Is(err, source.ErrWriteBlockUnavailable) {
		t.Fatalf("run: %v, want ErrWriteBlockUnavailable", err)
	}
	for _, part := range []string{"setUserWriteBlockMode", "blockSourceWrites: false", "stop the application's writes"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
	if st.Cutover == nil || st.Cutover.Step != workerapi.CutoverFailed || st.Cutover.WritesBlocked {
		t.Errorf("cut-over status %+v, want Failed with writes not blocked", st.Cutover)
	}
	if rec := cutoverRecord(t, dc, "blocked"); rec == nil || rec.Step != workerapi.CutoverFailed || !strings.Contains(rec.Message, "setUserWriteBlockMode") {
		t.Errorf("recorded cut-over %+v, want Failed with the reason", rec)
	}
	// The application goes on writing, then stops; the user turns
	// blockSourceWrites off.
	if _, err := sc.Database("app").Collection("c").InsertOne(context.Background(), bson.D{{Key: "_id", Value: "after-failure"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Database("app").Collection("c").DeleteOne(context.Background(), bson.D{}); err != nil {
		t.Fatal(err)
	}
	task.Cutover.BlockSourceWrites = false
	if st, err = runEngine(t, task, engineOpts()); err != nil || st.Cutover == nil || st.Cutover.Step != workerapi.CutoverComplete {
		t.Fatalf("second run: %v, cut-over %+v", err, st.Cutover)
	}
	assertSameDocs(t, sc, "app.c", dc, "app.c")
}

// TestCutoverBlocksSourceWrites: the cut-over blocks the source's user
// writes itself while the application goes on writing. FerretDB has no
// setUserWriteBlockMode, so the source is reached through
// wiresim.WriteBlockProxy, which stands in for MongoDB 6.0's user write
// blocking (setUserWriteBlockMode answered, user writes refused with code
// 372 while blocked) and forwards everything else to the FerretDB source.
// The application never stops by itself: the block stops it. The cut-over
// completes, its drain position is the source's last entry, the target
// equals the source, and the source's writes stay blocked afterwards.
func TestCutoverBlocksSourceWrites(t *testing.T) {
	ctx := context.Background()
	src, dst := testserver.Start(t), testserver.Start(t)
	proxy, app := writeBlockProxy(t, src.Addr)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 1000, FieldCount: 4, FieldLength: 30, Seed: 12}
	if _, err := workload.Load(ctx, app, base); err != nil {
		t.Fatal(err)
	}
	task := newTask(t, "blocking", src, dst, func(t *config.Task) {
		t.Source.URI = proxy.URI()
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.Cutover = config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyHash, MaxLagSeconds: 5}
	})
	stopLoad := startLoad(app, base, 30)
	defer stopLoad()
	var steps []string
	blockedAtDrain := false
	opts := engineOpts()
	opts.OnCutoverStep = func(step string) {
		steps = append(steps, step)
		if step == workerapi.CutoverDraining {
			blockedAtDrain = proxy.Blocked()
		}
	}
	st, err := runEngine(t, task, opts)
	if err != nil {
		t.Fatalf("run: %v (cut-over %+v)", err, st.Cutover)
	}
	co := st.Cutover
	if st.Phase != engine.PhaseCompleted || co == nil || co.Step != workerapi.CutoverComplete || !co.WritesBlocked ||
		co.Verify == nil || !co.Verify.OK || co.SourcePosition == nil {
		t.Fatalf("phase %s, cut-over %+v; want Completed with writes blocked and a verification that passed", st.Phase, co)
	}
	if !slices.Contains(steps, workerapi.CutoverBlockingWrites) || !blockedAtDrain {
		t.Errorf("steps %v, writes blocked at Draining: %t; want BlockingWrites before a Draining with writes blocked", steps, blockedAtDrain)
	}
	// The source's writes stay blocked after the cut-over, as documented.
	var se mongo.ServerError
	if _, err := app.Database("shop").Collection("orders").InsertOne(ctx, bson.D{{Key: "_id", Value: "after-cutover"}}); !errors.As(err, &se) || !se.HasErrorCode(userWritesBlocked) {
		t.Errorf("an application write after the cut-over: %v, want UserWritesBlocked", err)
	}
	stopLoad()
	newest, err := source.NewestTS(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	if got := (bson.Timestamp{T: co.SourcePosition.T, I: co.SourcePosition.I}); got != newest {
		t.Errorf("drained to %v, the source's newest entry is %v", got, newest)
	}
	t.Logf("the application's writes refused while blocked: %d", proxy.Refused())
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
}

// TestCutoverWritesAfterDrain: with blockSourceWrites false the
// application keeps writing after the drain position was read (an insert
// made from the hook once the source is drained, as verification
// starts). The verification finds the target behind, the cut-over fails with a message that says
// the source took writes after the drain and what to do, and nothing is
// lost: once the application stopped, the cut-over requested again
// replays the late write and completes with the target equal to the
// source.
func TestCutoverWritesAfterDrain(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "app", "c", mixedIDDocs(200))
	task := newTask(t, "late", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.Cutover = config.Cutover{Requested: true, Verify: config.VerifyHash, MaxLagSeconds: 5}
	})
	opts := engineOpts()
	eng, err := engine.Open(context.Background(), task, opts)
	if err != nil {
		t.Fatal(err)
	}
	var wrote atomic.Bool
	eng.SetCutoverHook(func(step string) {
		// At Verifying replay has stopped at the drain position. (During
		// Draining it may still apply an entry past that position before
		// it sees it has reached it, and the late write would then be on
		// the target.)
		if step != workerapi.CutoverVerifying || wrote.Load() {
			return
		}
		// The application writes once more, after the drain position.
		if _, err := sc.Database("app").Collection("c").InsertOne(context.Background(), bson.D{{Key: "_id", Value: "late-write"}}); err != nil {
			t.Error(err)
		}
		wrote.Store(true)
	})
	err = eng.Run(context.Background())
	st := eng.Status()
	eng.Close()
	if !errors.Is(err, engine.ErrCutoverFailed) || !errors.Is(err, engine.ErrVerificationFailed) {
		t.Fatalf("run: %v, want the cut-over failed on its verification", err)
	}
	for _, part := range []string{"took writes after the drain position", "nothing is lost", "stop the application's writes", "request the cut-over again"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not say %q", err, part)
		}
	}
	if st.Cutover == nil || st.Cutover.Step != workerapi.CutoverFailed {
		t.Errorf("cut-over status %+v, want Failed", st.Cutover)
	}
	// The application has stopped; the cut-over is requested again.
	if st, err = runEngine(t, task, engineOpts()); err != nil || st.Cutover == nil || st.Cutover.Step != workerapi.CutoverComplete {
		t.Fatalf("second run: %v, cut-over %+v", err, st.Cutover)
	}
	assertSameDocs(t, sc, "app.c", dc, "app.c")
	if n, err := dc.Database("app").Collection("c").CountDocuments(context.Background(), bson.D{{Key: "_id", Value: "late-write"}}); err != nil || n != 1 {
		t.Errorf("the write made after the drain position: %d on the target (%v), want 1", n, err)
	}
}

// TestCutoverCLIKilledAndResumed: `ferry run` streams under live load;
// `ferry cutover` of the same task refuses to run beside it; once the
// application stopped and `ferry run` was interrupted, `ferry cutover` is
// killed (SIGKILL) in the middle of its Draining or Verifying step, and
// run again: it goes on from the recorded step, prints the summary and
// exits 0, and the target equals the source.
func TestCutoverCLIKilledAndResumed(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 5000, FieldCount: 2, FieldLength: 20, Seed: 5}
	if _, err := workload.Load(context.Background(), sc, base); err != nil {
		t.Fatal(err)
	}
	yaml := writeFile(t, fmt.Sprintf(`name: cli-cut
mode: fullAndIncremental
source: {uri: %q}
target: {uri: %q}
verify: {mode: none}
`, src.URI, dst.URI))
	bin := ferryBinary(t)
	addr := testutil.FreeAddr(t)
	status := func() engine.Status { s, _ := getStatus(addr); return s }

	stopLoad := startLoad(sc, base, 30)
	defer stopLoad()
	run := exec.Command(bin, "run", "-f", yaml, "--progress", "none", "--listen", addr)
	run.Stdout, run.Stderr = io.Discard, os.Stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = run.Process.Kill() }()
	waitFor(t, "replay to run", 3*time.Minute, func() bool { return status().Phase == engine.PhaseStreaming })
	time.Sleep(2 * time.Second) // replay under load

	// One run of a task at a time.
	out, err := exec.Command(bin, "cutover", "-f", yaml, "--progress", "none", "--listen", "").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "stop it first") {
		t.Fatalf("ferry cutover beside ferry run: %v\n%s", err, out)
	}

	// The application stops, then the sync is stopped for the cut-over.
	stopLoad()
	_ = run.Process.Signal(syscall.SIGINT)
	_ = run.Wait()

	cut := exec.Command(bin, "cutover", "-f", yaml, "--verify", "hash", "--max-lag", "5s", "--progress", "log", "--listen", addr)
	cut.Stdout, cut.Stderr = io.Discard, os.Stderr
	if err := cut.Start(); err != nil {
		t.Fatal(err)
	}
	var killedAt string
	waitFor(t, "the cut-over to drain or verify", 3*time.Minute, func() bool {
		if co := status().Cutover; co != nil && (co.Step == workerapi.CutoverDraining || co.Step == workerapi.CutoverVerifying) {
			killedAt = co.Step
			return true
		}
		return false
	})
	_ = cut.Process.Signal(syscall.SIGKILL)
	_ = cut.Wait()
	if rec := cutoverRecord(t, dc, "cli-cut"); rec == nil || rec.Step == workerapi.CutoverComplete {
		t.Fatalf("killed during %s, the record says %+v", killedAt, rec)
	}

	var stdout bytes.Buffer
	again := exec.Command(bin, "cutover", "-f", yaml, "--verify", "hash", "--progress", "none", "--listen", "")
	again.Stdout, again.Stderr = &stdout, os.Stderr
	if err := again.Run(); err != nil {
		t.Fatalf("cut-over after the kill during %s: %v\n%s", killedAt, err, stdout.String())
	}
	t.Logf("killed during %s; the resumed cut-over printed:\n%s", killedAt, stdout.String())
	for _, line := range []string{"cut-over:         Complete", "verification      hash: the target equals the source", "source drained to "} {
		if !strings.Contains(stdout.String(), line) {
			t.Errorf("summary lacks %q", line)
		}
	}
	if rec := cutoverRecord(t, dc, "cli-cut"); rec == nil || rec.Step != workerapi.CutoverComplete || rec.SourceTS.IsZero() || rec.TargetTS.IsZero() {
		t.Errorf("recorded cut-over %+v, want Complete with both positions", rec)
	}
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
}

// TestCutoverCLIBlocksWrites: `ferry cutover --block-source-writes` on a
// task that has not run yet, while the application writes: it copies,
// catches up, blocks the source's writes, drains, verifies and finalizes,
// exits 0 and prints a summary that says the writes stay blocked and how
// to unblock them. The source is reached through wiresim.WriteBlockProxy,
// which stands in for MongoDB 6.0's write blocking in front of FerretDB
// (see TestCutoverBlocksSourceWrites).
func TestCutoverCLIBlocksWrites(t *testing.T) {
	ctx := context.Background()
	src, dst := testserver.Start(t), testserver.Start(t)
	proxy, app := writeBlockProxy(t, src.Addr)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 1000, FieldCount: 2, FieldLength: 20, Seed: 13}
	if _, err := workload.Load(ctx, app, base); err != nil {
		t.Fatal(err)
	}
	yaml := writeFile(t, fmt.Sprintf(`name: cli-block
mode: fullAndIncremental
source: {uri: %q}
target: {uri: %q}
verify: {mode: none}
`, proxy.URI(), dst.URI))
	stopLoad := startLoad(app, base, 30)
	defer stopLoad()
	var stdout bytes.Buffer
	cut := exec.Command(ferryBinary(t), "cutover", "-f", yaml, "--block-source-writes", "--max-lag", "5s", "--verify", "hash", "--progress", "none", "--listen", "")
	cut.Stdout, cut.Stderr = &stdout, os.Stderr
	if err := cut.Run(); err != nil {
		t.Fatalf("ferry cutover --block-source-writes: %v\n%s", err, stdout.String())
	}
	t.Logf("ferry cutover printed:\n%s", stdout.String())
	for _, line := range []string{"cut-over:         Complete", "verification      hash: the target equals the source",
		"source writes     blocked; they stay blocked (unblock with db.adminCommand({setUserWriteBlockMode: 1, global: false}))"} {
		if !strings.Contains(stdout.String(), line) {
			t.Errorf("summary lacks %q", line)
		}
	}
	if !proxy.Blocked() {
		t.Error("the source's writes are not blocked after the cut-over")
	}
	stopLoad()
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
}

// TestCutoverResumesAtItsStep: a run stopped just after it recorded a
// cut-over step (the drain position, the start of verification, of
// finalization) leaves that step in the checkpoint database; the next run
// goes on from it, not from CatchingUp, and completes with the target
// equal to the source. (A stop by context here; TestCutoverCLIKilledAndResumed
// kills the process.)
func TestCutoverResumesAtItsStep(t *testing.T) {
	tests := []struct {
		name   string
		stopAt string
		nth    int // stop at the nth time the step is recorded
	}{
		{"draining, drain position recorded", workerapi.CutoverDraining, 2},
		{"verifying", workerapi.CutoverVerifying, 1},
		{"finalizing", workerapi.CutoverFinalizing, 1},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := testserver.Start(t), testserver.Start(t)
			sc, dc := src.MustClient(t), dst.MustClient(t)
			insertDocs(t, sc, "app", "c", mixedIDDocs(400))
			name := fmt.Sprintf("resume-%d", i)
			task := newTask(t, name, src, dst, func(t *config.Task) {
				t.Mode = config.ModeFullAndIncremental
				t.Verify.Mode = config.VerifyNone
				t.Cutover = config.Cutover{Requested: true, Verify: config.VerifyHash, MaxLagSeconds: 5}
			})
			e, err := engine.Open(context.Background(), task, engineOpts())
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			seen := 0
			e.SetCutoverHook(func(step string) {
				if step == tc.stopAt {
					if seen++; seen == tc.nth {
						stop()
					}
				}
			})
			err = e.Run(ctx)
			e.Close()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("first run: %v, want it stopped", err)
			}
			if rec := cutoverRecord(t, dc, name); rec == nil || rec.Step != tc.stopAt {
				t.Fatalf("recorded %+v, want step %s", rec, tc.stopAt)
			}
			// The source changes no more: the drain position stays right.
			var steps []string
			opts := engineOpts()
			opts.OnCutoverStep = func(step string) { steps = append(steps, step) }
			st, err := runEngine(t, task, opts)
			if err != nil || st.Cutover == nil || st.Cutover.Step != workerapi.CutoverComplete {
				t.Fatalf("second run: %v, cut-over %+v", err, st.Cutover)
			}
			if len(steps) == 0 || steps[0] == workerapi.CutoverCatchingUp {
				t.Errorf("second run recorded %v: it started over", steps)
			}
			assertSameDocs(t, sc, "app.c", dc, "app.c")
		})
	}
}
