package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// startEngine runs a task in the background; stop cancels it and returns
// its error.
func startEngine(t *testing.T, task *config.Task, opts engine.Options) (*engine.Engine, func() error) {
	t.Helper()
	e, err := engine.Open(context.Background(), task, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
			e.Close()
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return e, stop
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitEngineCaughtUp waits until replay has applied everything the source
// wrote; on timeout it reports the replay status and the source's newest
// oplog entry.
func waitEngineCaughtUp(t *testing.T, e *engine.Engine, src *mongo.Client, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := caughtUp(e, src)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for replay to catch up: %s", why)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// caughtUp reports whether replay has applied everything the source wrote,
// and if not, why not.
func caughtUp(e *engine.Engine, src *mongo.Client) (bool, string) {
	s := e.Status()
	if s.Phase != engine.PhaseStreaming || s.Replay == nil {
		if s.Error != "" {
			return false, fmt.Sprintf("phase %s: %s", s.Phase, s.Error)
		}
		return false, fmt.Sprintf("phase %s", s.Phase)
	}
	var newest bson.Raw
	if err := src.Database("local").Collection("oplog.rs").FindOne(context.Background(), bson.D{},
		optsNewest()).Decode(&newest); err != nil {
		return false, fmt.Sprintf("reading the newest oplog entry: %v", err)
	}
	t, i, _ := newest.Lookup("ts").TimestampOK()
	if s.Replay.InFlight == 0 && s.Replay.AppliedTS.Compare(bson.Timestamp{T: t, I: i}) >= 0 {
		return true, ""
	}
	return false, fmt.Sprintf("replay %+v; newest source entry %s", *s.Replay, newest)
}

// TestReplayUnderLiveLoad: copy, then replay, while inserts, updates and
// deletes run on the source; the target ends equal to the source. A
// collection with a unique secondary index sees "delete A{email:x}, insert
// B{email:x}" again and again, and replays it without a duplicate key.
func TestReplayUnderLiveLoad(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	ctx := context.Background()
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 3000, FieldCount: 5, FieldLength: 40, Seed: 7}
	if _, err := workload.Load(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	users := sc.Database("shop").Collection("users")
	if _, err := users.Indexes().CreateOne(ctx, indexModel("email_unique", true)); err != nil {
		t.Fatal(err)
	}
	seed := make([]any, 200)
	for i := range seed {
		seed[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("u%04d", i)}, {Key: "email", Value: fmt.Sprintf("user%d@example.com", i)}}
	}
	insertDocs(t, sc, "shop", "users", seed)

	task := newTask(t, "live", src, dst, func(t *config.Task) {
		t.Mode = config.ModeFullAndIncremental
		t.Verify.Mode = config.VerifyNone
		t.FullSync.RangeDocuments, t.FullSync.Split = 1000, config.SplitAlways
	})
	e, stop := startEngine(t, task, engineOpts())

	// Live load during the copy and after it.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		run := base
		run.Workload, run.Threads, run.Rate = workload.WorkloadMixed, 2, 40
		run.InsertProportion, run.UpdateProportion, run.DeleteProportion = 0.4, 0.4, 0.2
		run.Distribution = workload.Uniform
		_, _ = workload.Run(loadCtx, sc, run)
	}()
	go func() {
		defer wg.Done()
		// The same email moves from one document to a new one.
		for i := 0; loadCtx.Err() == nil; i++ {
			email := fmt.Sprintf("user%d@example.com", i%200)
			if _, err := users.DeleteOne(loadCtx, bson.D{{Key: "email", Value: email}}); err != nil {
				return
			}
			if _, err := users.InsertOne(loadCtx, bson.D{{Key: "_id", Value: fmt.Sprintf("v%06d", i)}, {Key: "email", Value: email}}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	waitFor(t, "the copy to finish and replay to start", 3*time.Minute, func() bool { return e.Status().Phase == engine.PhaseStreaming })
	time.Sleep(4 * time.Second) // replay under load
	stopLoad()
	wg.Wait()
	waitEngineCaughtUp(t, e, sc, 3*time.Minute)
	st := e.Status()
	if err := stop(); err != nil && err != context.Canceled {
		t.Fatalf("run: %v", err)
	}
	t.Logf("replay applied %v, skipped %v, tolerated %d overlap conflicts", st.Replay.Applied, st.Replay.Skipped, st.Replay.ToleratedConflicts)
	if st.Replay.Applied["insert"] == 0 || st.Replay.Applied["update"] == 0 || st.Replay.Applied["delete"] == 0 {
		t.Errorf("replay did not apply every kind of operation: %v", st.Replay.Applied)
	}
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
	assertSameDocs(t, sc, "shop.users", dc, "shop.users")
}

// TestUntilCaughtUpOnIdleSourceWithEmptyOplog: a source whose oplog is
// still empty and stays idle (FerretDB writes no periodic no-ops) is caught
// up as soon as replay starts, so --until-caught-up ends and verifies
// instead of waiting for a first entry forever.
func TestUntilCaughtUpOnIdleSourceWithEmptyOplog(t *testing.T) {
	src, dst := testserver.Start(t, testserver.Options{OplogBytes: -1}), testserver.Start(t)
	sc := src.MustClient(t)
	insertDocs(t, sc, "app", "c", mixedIDDocs(300))
	if err := src.CreateOplog(context.Background(), testserver.DefaultOplogBytes); err != nil {
		t.Fatal(err)
	}
	task := newTask(t, "idle", src, dst, func(t *config.Task) { t.Mode = config.ModeFullAndIncremental })
	opts := engineOpts()
	opts.UntilCaughtUp = true
	done := make(chan error, 1)
	var st engine.Status
	go func() {
		var err error
		st, err = runEngine(t, task, opts)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("replay never considered an idle source with an empty oplog caught up")
	}
	if st.Verify == nil || !st.Verify.OK {
		t.Errorf("verification after catching up: %+v, want OK", st.Verify)
	}
	assertSameDocs(t, sc, "app.c", dst.MustClient(t), "app.c")
}
