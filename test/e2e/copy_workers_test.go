package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// TestCopyWorkersKilled shares a replica-set source's full copy between
// the task's run and two copy-only workers (fullSync.workers: 3; `ferry
// run` and two `ferry run --copy-only`, as the operator's worker pod and
// its two <name>-copy pods run them), under a live load of inserts,
// updates and deletes, and kills one process with SIGKILL while it holds
// the lease of a range it has not finished: a copy-only worker (not
// restarted: the others must take its range over) in one case, the
// task's run (restarted at once, as its pod would be) in the other.
//
// What a user gets: the task's run streams and catches up, and the
// target equals the source, byte for byte; the copy-only workers exit 0
// once the copy is recorded done. What the copy records: every range of
// the plan is recorded done exactly once, in the range leases and in the
// task's checkpoint; a range the killed process held and had not
// finished is recorded by a later attempt (taken over once its lease
// went unrenewed for 20 s); every process copied ranges.
//
// The source is one FerretDB server with its oplog, the target another;
// nothing stands in for a MongoDB part here.
func TestCopyWorkersKilled(t *testing.T) {
	for _, tc := range []struct {
		name string
		// victim is the index of the process killed: 0 the task's run,
		// 1 a copy-only worker.
		victim int
	}{
		{name: "copy-only", victim: 1},
		{name: "task-run", victim: 0},
	} {
		t.Run(tc.name, func(t *testing.T) { runCopyWorkersKill(t, tc.victim) })
	}
}

func runCopyWorkersKill(t *testing.T, victim int) {
	ctx := context.Background()
	src, dst := seedCopyWorkers(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	task := "copy-workers"
	yaml := copyWorkersTaskFile(t, task, src, dst, 3)
	bin := ferryBinary(t)
	meta := dc.Database("mongoferry")

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan loadCounts, 1)
	go func() {
		loadDone <- runReplicaLoad(loadCtx, sc.Database("app").Collection("k"), copySeedDocs, uint64(victim))
	}()

	procs := []*shardWorker{
		{pod: "task-run", addr: testutil.FreeAddr(t), logDir: t.TempDir()},
		{pod: "copy-0", addr: testutil.FreeAddr(t), logDir: t.TempDir(), args: []string{"--copy-only"}},
		{pod: "copy-1", addr: testutil.FreeAddr(t), logDir: t.TempDir(), args: []string{"--copy-only"}},
	}
	for _, p := range procs {
		p.start(t, bin, yaml)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range procs {
				p.logTail(t, 30)
			}
		}
	})

	// The kill: once the victim has recorded a range done and holds the
	// lease of one it has not finished.
	name := procs[victim].pod
	var held []string
	waitFor(t, name+" in the middle of a range", 2*time.Minute, func() bool {
		done, open := leasesOf(ctx, t, meta, task, name)
		held = open
		return done > 0 && len(open) > 0
	})
	procs[victim].kill(t)
	_, orphaned := leasesOf(ctx, t, meta, task, name)
	t.Logf("killed %s holding %v; after the kill it still held %v", name, held, orphaned)
	if victim == 0 {
		procs[0].start(t, bin, yaml)
	}

	waitFor(t, "the task's run streaming", 3*time.Minute, func() bool {
		s, err := procs[0].status()
		return err == nil && s.Phase == engine.PhaseStreaming
	})
	for i, p := range procs[1:] {
		if i+1 == victim {
			continue
		}
		exited := make(chan error, 1)
		go func() { exited <- p.cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("%s: %v, want exit 0 once the copy was recorded done", p.pod, err)
			}
		case <-time.After(time.Minute):
			t.Errorf("%s still runs a minute after the copy was recorded done", p.pod)
		}
	}
	time.Sleep(2 * time.Second)
	stopLoad()
	lc := <-loadDone
	if lc.err != nil {
		t.Fatalf("load: %v", lc.err)
	}
	assertCaughtUpSame(t, procs[0], sc, dc, "app.k", "app.small")

	// Every range of the plan is done once, in the leases and in the
	// checkpoint; the killed process's unfinished ranges were taken over.
	ranges := rangeStates(t, dst, task)
	doneBy := map[string][]rangeRecord{}
	owners := map[string]int{}
	takenOver := 0
	for _, r := range rangeRecords(ctx, t, meta, task) {
		if !r.Done {
			continue
		}
		doneBy[r.Range] = append(doneBy[r.Range], r)
		pod, _, _ := strings.Cut(r.Owner, "/")
		owners[pod]++
		if r.Attempt > 1 {
			takenOver++
		}
	}
	for id, r := range ranges {
		if n := len(doneBy[id]); n != 1 {
			t.Errorf("range %s has %d done records, want 1", id, n)
		}
		if r.State != checkpoint.RangeDone {
			t.Errorf("range %s is %s in the checkpoint, want done", id, r.State)
		}
	}
	for id := range doneBy {
		if _, ok := ranges[id]; !ok {
			t.Errorf("done record of %s, which the plan does not hold", id)
		}
	}
	for _, id := range orphaned {
		if rs := doneBy[id]; len(rs) == 1 && rs[0].Attempt < 2 {
			t.Errorf("range %s, leased by the killed %s and not done, was recorded done by attempt %d, want a later attempt", id, name, rs[0].Attempt)
		}
	}
	for _, p := range procs {
		if owners[p.pod] == 0 && p.pod != name {
			t.Errorf("%s recorded no range: the copy was not shared", p.pod)
		}
	}
	t.Logf("%d ranges planned, each done once; %d taken over; ranges by process %v; load %d inserts, %d updates, %d deletes",
		len(ranges), takenOver, owners, lc.inserts, lc.updates, lc.deletes)
}

// copySeedDocs is how many documents seedCopyWorkers puts in app.k.
const copySeedDocs = 900

// seedCopyWorkers starts a FerretDB source and target, and seeds the
// source's app.k (copySeedDocs documents, _id 0..899) and app.small (60).
func seedCopyWorkers(t *testing.T) (src, dst *testserver.Server) {
	t.Helper()
	src, dst = testserver.Start(t), testserver.Start(t)
	for coll, n := range map[string]int{"k": copySeedDocs, "small": 60} {
		docs := make([]any, n)
		for i := range docs {
			docs[i] = bson.D{{Key: "_id", Value: int64(i)}, {Key: "v", Value: 0}, {Key: "pad", Value: strings.Repeat("w", 60)}}
		}
		if _, err := src.MustClient(t).Database("app").Collection(coll).InsertMany(context.Background(), docs); err != nil {
			t.Fatal(err)
		}
	}
	return src, dst
}

// copyWorkersTaskFile writes the task file of the copy-worker tests:
// ranges of about 20 documents, two copiers per process and 30 documents
// a second per process when workers processes share the copy (rateLimit
// 90): the copy lasts about 10 seconds, long enough to kill a process in
// the middle of a range.
func copyWorkersTaskFile(t *testing.T, task string, src, dst *testserver.Server, workers int) string {
	t.Helper()
	return writeFile(t, fmt.Sprintf(`name: %s
mode: fullAndIncremental
source: {uri: %q}
target: {uri: %q}
namespaces: {include: ["app\\..*"]}
threads: {readers: 2}
cache: {batchSize: 10}
fullSync: {rangeDocuments: 20, split: always, workers: %d}
rateLimit: 90
verify: {mode: none}
`, task, src.URI, dst.URI, workers))
}

// assertCaughtUpSame waits until the task's run w has applied everything
// the source wrote (the load stopped) with no write in flight, then fails
// unless the target's collections equal the source's.
func assertCaughtUpSame(t *testing.T, w *shardWorker, sc, dc *mongo.Client, colls ...string) {
	t.Helper()
	newest := newestTS(t, sc)
	waitFor(t, "the task's run caught up", 3*time.Minute, func() bool {
		s, err := w.status()
		return err == nil && s.Replay != nil && s.Replay.InFlight == 0 && s.Replay.AppliedTS.Compare(newest) >= 0
	})
	// FerretDB's oplog may show an entry a little after newer ones
	// (replay re-reads its documents when it does): a difference seen at
	// once must be gone within seconds, and nothing is written after.
	if first := docsDiff(t, sc, colls[0], dc, colls[0]); first != "" {
		deadline := time.Now().Add(15 * time.Second)
		for docsDiff(t, sc, colls[0], dc, colls[0]) != "" && time.Now().Before(deadline) {
			time.Sleep(500 * time.Millisecond)
		}
		t.Logf("right after catching up: %s; then equal: %v", first, docsDiff(t, sc, colls[0], dc, colls[0]) == "")
	}
	for _, coll := range colls {
		assertSameDocs(t, sc, coll, dc, coll)
	}
}

// TestCopyWorkersLowered shares a copy between the task's run and a
// copy-only worker (fullSync.workers: 3) under a live load, kills both
// in the middle of the copy, and runs the task again alone with
// fullSync.workers: 1, as a user who gives up on the extra workers does.
// The run copies without leases now, and meets ranges the killed
// processes partly wrote: it must clear and copy each again (a process
// marks a range started when it claims it, before it writes any of it)
// instead of stopping on
// documents already there (onConflict fail, the default), and the
// target must end equal to the source with every range done.
func TestCopyWorkersLowered(t *testing.T) {
	ctx := context.Background()
	src, dst := seedCopyWorkers(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	task := "copy-lowered"
	bin := ferryBinary(t)
	meta := dc.Database("mongoferry")
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan loadCounts, 1)
	go func() { loadDone <- runReplicaLoad(loadCtx, sc.Database("app").Collection("k"), copySeedDocs, 7) }()

	shared := copyWorkersTaskFile(t, task, src, dst, 3)
	run := &shardWorker{pod: "task-run", addr: testutil.FreeAddr(t), logDir: t.TempDir()}
	helper := &shardWorker{pod: "copy-0", addr: testutil.FreeAddr(t), logDir: t.TempDir(), args: []string{"--copy-only"}}
	run.start(t, bin, shared)
	helper.start(t, bin, shared)
	t.Cleanup(func() {
		if t.Failed() {
			run.logTail(t, 30)
			helper.logTail(t, 30)
		}
	})
	waitFor(t, "the copy-only worker in the middle of a range", 2*time.Minute, func() bool {
		done, open := leasesOf(ctx, t, meta, task, helper.pod)
		return done > 0 && len(open) > 0
	})
	helper.kill(t)
	run.kill(t)
	// A range that holds documents on the target must not be pending: a
	// process marks a range started after its claim and before its first
	// write, so a range claimed by a process killed in between is pending
	// and empty, and one nobody claimed holds nothing.
	claimed := map[string]bool{}
	for _, r := range rangeRecords(ctx, t, meta, task) {
		claimed[r.Range] = true
	}
	claimedEmpty, unclaimed := 0, 0
	for id, r := range rangeStates(t, dst, task) {
		if r.State != checkpoint.RangePending {
			continue
		}
		ns := catalog.ParseNamespace(r.NS)
		n, err := dc.Database(ns.DB).Collection(ns.Coll).CountDocuments(ctx, bson.Raw(r.Filter))
		switch {
		case err != nil:
			t.Fatalf("count range %s (%s) on the target: %v", id, r.Describe, err)
		case n > 0:
			t.Errorf("range %s (%s) holds %d documents on the target but is pending in the checkpoint: a run alone would copy it without clearing it", id, r.Describe, n)
		case claimed[id]:
			claimedEmpty++
		default:
			unclaimed++
		}
	}
	t.Logf("at the kill: %d ranges claimed (%d pending and empty: killed between claim and mark), %d pending ranges nobody had claimed", len(claimed), claimedEmpty, unclaimed)

	run.start(t, bin, copyWorkersTaskFile(t, task, src, dst, 1))
	waitFor(t, "the task's run streaming alone", 3*time.Minute, func() bool {
		s, err := run.status()
		return err == nil && s.Phase == engine.PhaseStreaming
	})
	time.Sleep(2 * time.Second)
	stopLoad()
	if lc := <-loadDone; lc.err != nil {
		t.Fatalf("load: %v", lc.err)
	}
	assertCaughtUpSame(t, run, sc, dc, "app.k", "app.small")
	for id, r := range rangeStates(t, dst, task) {
		if r.State != checkpoint.RangeDone {
			t.Errorf("range %s is %s, want done", id, r.State)
		}
	}
}

// leasesOf returns how many ranges the process named pod recorded done,
// and the ranges it leased and nobody recorded done.
func leasesOf(ctx context.Context, t *testing.T, meta *mongo.Database, task, pod string) (int, []string) {
	t.Helper()
	done, leased := map[string]bool{}, map[string]bool{}
	mine := 0
	for _, r := range rangeRecords(ctx, t, meta, task) {
		switch {
		case r.Done:
			done[r.Range] = true
			if strings.HasPrefix(r.Owner, pod+"/") {
				mine++
			}
		case strings.HasPrefix(r.Owner, pod+"/"):
			leased[r.Range] = true
		}
	}
	var open []string
	for id := range leased {
		if !done[id] {
			open = append(open, id)
		}
	}
	return mine, open
}

// loadCounts is what runReplicaLoad wrote.
type loadCounts struct {
	inserts, updates, deletes int
	err                       error
}

// runReplicaLoad writes to coll, whose documents have _id 0..n-1, about
// 20 times a second until ctx ends: inserts of new _ids, updates and
// deletes of existing ones, a seeded mix.
func runReplicaLoad(ctx context.Context, coll *mongo.Collection, n int, seed uint64) loadCounts {
	rng := rand.New(rand.NewPCG(29, seed))
	var lc loadCounts
	next := int64(n)
	for ctx.Err() == nil {
		var err error
		switch k := rng.IntN(10); {
		case k < 4:
			_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: next}, {Key: "v", Value: 1}, {Key: "pad", Value: "load"}})
			next++
			lc.inserts++
		case k < 8:
			_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: rng.Int64N(next)}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "v", Value: 1}}}})
			lc.updates++
		default:
			_, err = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: rng.Int64N(next)}})
			lc.deletes++
		}
		if err != nil && ctx.Err() == nil {
			lc.err = err
			return lc
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return lc
}
