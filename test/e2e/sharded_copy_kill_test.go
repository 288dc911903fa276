package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/sourceshardcopy"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestShardedCopyWorkerKilled copies a 3-shard source shard by shard
// (fullSync.shardedCopy perShard, the default) with one `ferry run --shard
// NAME` process per shard, as the operator's worker pods run it, and kills
// one worker with SIGKILL in the middle of its part of the copy: a worker
// that does not lead in one case, the leader (the worker of shard0, which
// plans and saves the passes) in the other. The killed worker is
// restarted at once, as its pod would be; its successor takes over the
// ranges the killed one held once their leases go unrenewed for the TTL
// (20 s). A live load writes through the router during the copy and the
// replay; chunks migrate during the copy (one out of the killed worker's
// shard, one into it) and once more during replay.
//
// What a user gets: every worker ends streaming and caught up, and the
// target equals the source as read through the router, byte for byte.
// What the copy records: every range each saved pass planned is recorded
// done exactly once (by whichever attempt finished it), no done record
// lies outside the plans, and the documents the done records of pass 0
// kept are the seed documents, give or take what the load and the
// migrations changed during the copy.
//
// What stands in for what (testserver.Cluster): three FerretDB servers
// are the shards' replica sets, each with its own oplog; a fourth is
// mongos, holding the union of the shards and config.shards,
// config.collections and config.chunks; Cluster.MoveChunk is the only
// balancer (there is no real one), moving a chunk in steps of at most 25
// documents and injecting the oplog entries a real migration logs
// (fromMigrate copies and deletes, the recipient's markers, the commit in
// config.chunks and config.changelog). The stand-in refuses a migration
// step that takes over 2.5 s, and FerretDB scans for _id lookups, so the
// collection stays small (600 documents in chunks of 50) and each
// migration moves one chunk; the shards' oplogs are emptied after the
// initial load.
// Migrations run while the copy runs: the settling passes the per-shard
// copy runs after them are counted with the rest.
func TestShardedCopyWorkerKilled(t *testing.T) {
	for _, tc := range []struct {
		name string
		// victim is the index of the shard whose worker is killed.
		victim int
	}{
		{name: "follower", victim: 1},
		{name: "leader", victim: 0},
	} {
		t.Run(tc.name, func(t *testing.T) { runShardedCopyKill(t, tc.victim) })
	}
}

// copyKillNS is the collection the kill test copies; chunkKeys the
// width of its chunks (testserver.Cluster.ChunkSize).
const (
	copyKillNS = "app.k"
	chunkKeys  = 100
)

func runShardedCopyKill(t *testing.T, victim int) {
	ctx := context.Background()
	began := time.Now()
	mark := func(what string) { t.Logf("%5.1fs %s", time.Since(began).Seconds(), what) }
	c := testserver.StartCluster(t, 3)
	c.ChunkSize = chunkKeys
	dst := testserver.Start(t)
	// Keys 0..1198, even: chunk b, [100b, 100b+100), 50 documents, is on
	// shard b mod 3 at first; 200 documents on each shard.
	var seed []bson.D
	var keys []int64
	for k := int64(0); k < 12*chunkKeys; k += 2 {
		seed = append(seed, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}, {Key: "pad", Value: strings.Repeat("s", 40)}})
		keys = append(keys, k)
	}
	if err := c.Insert(ctx, copyKillNS, seed...); err != nil {
		t.Fatal(err)
	}
	if err := c.ResetOplogs(ctx); err != nil {
		t.Fatal(err)
	}
	task := "copy-kill"
	// Ranges of about 20 documents, two copiers per worker and 40
	// documents a second per worker (rateLimit 120, which the three
	// workers share): a shard's part of pass 0 lasts about 5 seconds,
	// long enough to kill a worker in its middle.
	yaml := shardedTaskFile(t, task, c, dst, "rateLimit: 120")
	bin := ferryBinary(t)
	meta := dst.MustClient(t).Database("mongoferry")

	load := testserver.NewClusterLoad(c, copyKillNS, keys, 12*chunkKeys+1, 10)
	load.Quiet = -1 // the workers hold a recipient's writes after a migration
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadErr := make(chan error, 1)
	go func() { loadErr <- load.Run(loadCtx, rand.New(rand.NewPCG(28, uint64(victim)))) }()

	workers := startShardWorkers(t, c, bin, yaml)

	mark("workers started")
	// Migrations during the copy, once pass 0 is saved: a whole chunk
	// leaves the victim's shard, another comes into it (whole chunks: no
	// split, so only the recipients read again in the settling pass).
	name := c.Names[victim]
	waitFor(t, "pass 0 saved", 2*time.Minute, func() bool {
		_, err := sourceshardcopy.LoadPass(ctx, meta, task, copyKillNS, 0)
		return err == nil
	})
	next, other := (victim+1)%3, (victim+2)%3
	type moveResult struct {
		moved      int
		duringCopy bool
		err        error
	}
	moves := make(chan moveResult, 1)
	go func() {
		var r moveResult
		for _, m := range [][2]int{{victim, next}, {other, victim}} {
			lo := int64(m[0]) * chunkKeys
			n, err := load.Move(ctx, lo, lo+chunkKeys, m[1])
			r.moved += n
			if err != nil {
				r.err = err
				break
			}
		}
		r.duringCopy = !copyDone(ctx, meta, task)
		moves <- r
	}()

	// The kill: once the victim has recorded a range of pass 0 done and
	// holds the lease of another (midCopy).
	var at string
	waitFor(t, "the worker of "+name+" in the middle of its part of pass 0", 2*time.Minute, func() bool {
		ok, why := midCopy(ctx, t, meta, task, name)
		at = why
		return ok
	})
	workers[victim].kill(t)
	// What the killed worker left: the ranges it held and had not
	// finished. It may have finished the one seen leased between that
	// reading and the kill.
	_, left, orphaned := copyState(ctx, t, meta, task, name)
	t.Logf("killed the worker of %s (before the kill: %s; after: %s); restarting it", name, at, left)
	workers[victim].start(t, bin, yaml)

	mark("restarted")
	mr := <-moves
	mark("moves done")
	if mr.err != nil {
		t.Fatalf("migration during the copy: %v", mr.err)
	}
	waitFor(t, "every worker streaming", 4*time.Minute, func() bool {
		for _, w := range workers {
			if s, err := w.status(); err != nil || s.Phase != engine.PhaseStreaming {
				return false
			}
		}
		return true
	})
	mark("streaming")
	// A migration during replay, then the load stops.
	if _, err := load.Move(ctx, int64(victim+3)*chunkKeys, int64(victim+4)*chunkKeys, other); err != nil {
		t.Fatalf("migration during replay: %v", err)
	}
	time.Sleep(3 * time.Second)
	stopLoad()
	if err := <-loadErr; err != nil {
		t.Fatalf("load: %v", err)
	}
	mark("load stopped")
	waitWorkersCaughtUp(t, c, workers, 3*time.Minute)
	mark("caught up")
	assertSameDocs(t, c.RouterClient(), copyKillNS, dst.MustClient(t), copyKillNS)

	// Every range planned is done once; pass 0 kept the seed documents.
	cc := countCopy(ctx, t, meta, task)
	ins, upd, del := load.Counts()
	lower, upper := int64(len(seed))-del-int64(mr.moved), int64(len(seed))+ins
	t.Logf("%d passes; ranges planned %d, done %d, taken over %d; documents kept: pass 0 %d (seeded %d, bounds %d..%d), all passes %d",
		cc.passes, cc.planned, cc.done, cc.takenOver, cc.kept[0], len(seed), lower, upper, cc.keptAll)
	for _, o := range cc.owners() {
		t.Logf("  %s recorded %d ranges, %d documents", o, cc.byOwner[o].ranges, cc.byOwner[o].docs)
	}
	t.Logf("live load %d inserts, %d updates, %d deletes; %d documents migrated during the copy (committed before the copy was done: %v)", ins, upd, del, mr.moved, mr.duringCopy)
	if cc.kept[0] < lower || cc.kept[0] > upper {
		t.Errorf("pass 0 kept %d documents, want %d..%d: seeded %d, %d inserted and %d deleted by the load, %d migrated during the copy",
			cc.kept[0], lower, upper, len(seed), ins, del, mr.moved)
	}
	for _, id := range orphaned {
		if r := cc.doneBy[id]; r.Attempt < 2 {
			t.Errorf("range %s, leased by the killed worker and not done, was recorded done by attempt %d, want a later attempt (taken over)", id, r.Attempt)
		}
	}
	if len(orphaned) == 0 {
		t.Logf("the killed worker had finished every range it held before it died: nothing to take over")
	}
	// A migration committed after pass 0's table and before the copy was
	// recorded done changed the table the copy read last: a settling pass
	// ran.
	if mr.duringCopy && cc.passes < 2 {
		t.Errorf("%d pass after migrations during the copy, want a settling pass", cc.passes)
	}
}

// shardedTaskFile writes the task file of a test's shard workers: the
// cluster stand-in's router and shards as the source, dst as the target,
// replay after the copy, ranges of about 20 documents copied by two
// copiers per worker, no verification, and extra lines.
func shardedTaskFile(t *testing.T, task string, c *testserver.Cluster, dst *testserver.Server, extra string) string {
	t.Helper()
	var shards strings.Builder
	for _, o := range c.Overrides() {
		fmt.Fprintf(&shards, "    - {name: %s, uri: %q}\n", o.Name, o.URI)
	}
	return writeFile(t, fmt.Sprintf(`name: %s
mode: fullAndIncremental
source:
  uri: %q
  kind: sharded
  shards:
%starget: {uri: %q}
threads: {readers: 2}
cache: {batchSize: 20}
fullSync: {rangeDocuments: 20, split: always}
verify: {mode: none}
%s
`, task, c.RouterURI(), shards.String(), dst.URI, extra))
}

// startShardWorkers starts one worker per shard of c, as the operator's
// pods run them, and logs their last lines if the test fails.
func startShardWorkers(t *testing.T, c *testserver.Cluster, bin, yaml string) []*shardWorker {
	t.Helper()
	workers := make([]*shardWorker, len(c.Names))
	for i, name := range c.Names {
		workers[i] = &shardWorker{shard: name, pod: "worker-" + name, addr: testutil.FreeAddr(t), logDir: t.TempDir()}
		workers[i].start(t, bin, yaml)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, w := range workers {
				w.logTail(t, 40)
			}
		}
	})
	return workers
}

// shardWorker is one `ferry run --shard NAME` process (or, with no shard,
// `ferry run` with args), as a worker pod of the operator runs it: its
// pod name (MONGOFERRY_POD_NAME) names it in the range leases, as
// "<pod>/<pid>".
type shardWorker struct {
	shard, pod, addr, logDir string
	args                     []string
	cmd                      *exec.Cmd
	runs                     int
}

// start starts (or restarts) the worker, its output in a log file of its
// own.
func (w *shardWorker) start(t *testing.T, bin, yaml string) {
	t.Helper()
	w.runs++
	log, err := os.Create(filepath.Join(w.logDir, fmt.Sprintf("%s.%d.log", w.pod, w.runs)))
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"run", "-f", yaml, "--progress", "none", "--listen", w.addr}
	if w.shard != "" {
		args = append(args, "--shard", w.shard)
	}
	cmd := exec.Command(bin, append(args, w.args...)...)
	cmd.Env = append(os.Environ(), workerapi.EnvPodName+"="+w.pod)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.cmd = cmd
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = log.Close()
	})
}

// kill sends SIGKILL to the worker and waits for it to end.
func (w *shardWorker) kill(t *testing.T) {
	t.Helper()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", w.pod, err)
	}
	_ = w.cmd.Wait()
}

func (w *shardWorker) status() (engine.Status, error) { return getStatus(w.addr) }

// logTail logs the last lines of each of the worker's runs.
func (w *shardWorker) logTail(t *testing.T, lines int) {
	t.Helper()
	for run := 1; run <= w.runs; run++ {
		b, err := os.ReadFile(filepath.Join(w.logDir, fmt.Sprintf("%s.%d.log", w.pod, run)))
		if err != nil {
			continue
		}
		all := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("%s, run %d, last lines:\n%s", w.pod, run, strings.Join(all[max(0, len(all)-lines):], "\n"))
	}
}

// copyDone reports whether the task's copy is recorded done.
func copyDone(ctx context.Context, meta *mongo.Database, task string) bool {
	var rec checkpoint.TaskRecord
	err := meta.Collection(checkpoint.TasksCollection).FindOne(ctx, bson.D{{Key: "_id", Value: task}}).Decode(&rec)
	return err == nil && rec.CopyDone
}

// rangeRecord is a document of the range leases collection: one
// attempt's lease of a range, or (Done) the range's done record.
type rangeRecord struct {
	Range   string    `bson:"range"`
	Attempt int       `bson:"attempt"`
	Owner   string    `bson:"owner"`
	Done    bool      `bson:"done"`
	Docs    int64     `bson:"docs"`
	Bytes   int64     `bson:"bytes"`
	At      time.Time `bson:"at"`
}

// rangeRecords returns the task's leases and done records.
func rangeRecords(ctx context.Context, t *testing.T, meta *mongo.Database, task string) []rangeRecord {
	t.Helper()
	cur, err := meta.Collection(checkpoint.RangeLeasesCollection).Find(ctx, bson.D{{Key: "task", Value: task}})
	if err != nil {
		t.Fatal(err)
	}
	var out []rangeRecord
	if err := cur.All(ctx, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// midCopy reports whether shard's worker has recorded at least one range
// of pass 0 done, has two or more left and holds the lease of one of
// them (a range it finishes meanwhile, it follows with another); why says
// how far it is.
func midCopy(ctx context.Context, t *testing.T, meta *mongo.Database, task, shard string) (bool, string) {
	ok, why, _ := copyState(ctx, t, meta, task, shard)
	return ok, why
}

// copyState is midCopy's reading, with the ranges of the shard's pass 0
// leased and not done.
func copyState(ctx context.Context, t *testing.T, meta *mongo.Database, task, shard string) (bool, string, []string) {
	t.Helper()
	pass, err := sourceshardcopy.LoadPass(ctx, meta, task, copyKillNS, 0)
	if err != nil {
		return false, err.Error(), nil
	}
	mine := map[string]bool{}
	for _, r := range pass.Ranges[shard] {
		mine[r.ID] = true
	}
	done, leased := map[string]bool{}, map[string]bool{}
	for _, r := range rangeRecords(ctx, t, meta, task) {
		switch {
		case !mine[r.Range]:
		case r.Done:
			done[r.Range] = true
		default:
			leased[r.Range] = true
		}
	}
	var open []string
	for id := range leased {
		if !done[id] {
			open = append(open, id)
		}
	}
	why := fmt.Sprintf("%d of its %d ranges of pass 0 done, %d leased", len(done), len(mine), len(open))
	return len(done) > 0 && len(mine)-len(done) >= 2 && len(open) > 0, why, open
}

// copyCount is what the range records say of a per-shard copy.
type copyCount struct {
	passes                   int
	planned, done, takenOver int
	kept                     map[int]int64 // by pass
	keptAll                  int64
	byOwner                  map[string]*ownerCount
	doneBy                   map[string]rangeRecord // by range
	shardOf                  map[string]string      // range -> shard
}

type ownerCount struct {
	ranges int
	docs   int64
}

// owners returns the owners of done records, sorted.
func (cc copyCount) owners() []string {
	var out []string
	for o := range cc.byOwner {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}

// countCopy reads the saved passes and the done records and fails the
// test unless every range planned is recorded done exactly once and
// every done record of a per-shard range is a planned range's. A range whose done record's
// attempt is above 1 was taken over from a worker that went silent.
func countCopy(ctx context.Context, t *testing.T, meta *mongo.Database, task string) copyCount {
	t.Helper()
	saved, err := sourceshardcopy.ListPasses(ctx, meta, task)
	if err != nil {
		t.Fatal(err)
	}
	cc := copyCount{passes: len(saved), kept: map[int]int64{}, byOwner: map[string]*ownerCount{}, doneBy: map[string]rangeRecord{}, shardOf: map[string]string{}}
	passOf := map[string]int{}
	for _, sp := range saved {
		p, err := sourceshardcopy.LoadPass(ctx, meta, task, sp.NS, sp.N)
		if err != nil {
			t.Fatal(err)
		}
		for shard, rs := range p.Ranges {
			for _, r := range rs {
				if _, dup := passOf[r.ID]; dup {
					t.Errorf("range %s planned twice", r.ID)
				}
				passOf[r.ID], cc.shardOf[r.ID] = p.N, shard
				cc.planned++
			}
		}
	}
	if cc.planned == 0 {
		t.Fatal("no range planned: the copy did not run shard by shard")
	}
	records := map[string]int{}
	for _, r := range rangeRecords(ctx, t, meta, task) {
		// Ranges read through mongos are named <task>/<ns>/<index> in the
		// checkpoint's plan, not in a pass.
		if !r.Done || strings.HasPrefix(r.Range, task+"/") {
			continue
		}
		records[r.Range]++
		cc.doneBy[r.Range] = r
		n, planned := passOf[r.Range]
		if !planned {
			t.Errorf("done record of %s, which no saved pass planned", r.Range)
			continue
		}
		cc.done++
		cc.kept[n] += r.Docs
		cc.keptAll += r.Docs
		if r.Attempt > 1 {
			cc.takenOver++
		}
		pod, _, _ := strings.Cut(r.Owner, "/")
		if cc.byOwner[pod] == nil {
			cc.byOwner[pod] = &ownerCount{}
		}
		cc.byOwner[pod].ranges++
		cc.byOwner[pod].docs += r.Docs
	}
	for id := range passOf {
		if n := records[id]; n != 1 {
			t.Errorf("range %s has %d done records, want 1", id, n)
		}
	}
	return cc
}

// waitWorkersCaughtUp waits until every worker streams and has applied
// its shard's oplog up to the newest entry it holds now (the load
// stopped).
func waitWorkersCaughtUp(t *testing.T, c *testserver.Cluster, workers []*shardWorker, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	newest := make([]bson.Timestamp, len(workers))
	for i := range workers {
		var e struct {
			TS bson.Timestamp `bson:"ts"`
		}
		err := c.ShardClient(i).Database("local").Collection("oplog.rs").FindOne(ctx, bson.D{},
			options.FindOne().SetSort(bson.D{{Key: "ts", Value: -1}})).Decode(&e)
		if err != nil {
			t.Fatalf("newest oplog entry of %s: %v", c.Names[i], err)
		}
		newest[i] = e.TS
	}
	var why string
	deadline := time.Now().Add(timeout)
	for {
		why = ""
		for i, w := range workers {
			s, err := w.status()
			switch {
			case err != nil:
				why = fmt.Sprintf("%s: %v", w.shard, err)
			case s.Phase != engine.PhaseStreaming || len(s.Shards) != 1 || s.Shards[0].Replay == nil:
				why = fmt.Sprintf("%s: phase %s, %d shards", w.shard, s.Phase, len(s.Shards))
			case s.Shards[0].Replay.InFlight > 0 || s.Shards[0].Replay.AppliedTS.Compare(newest[i]) < 0:
				why = fmt.Sprintf("%s: applied %v (%d in flight), newest %v", w.shard, s.Shards[0].Replay.AppliedTS, s.Shards[0].Replay.InFlight, newest[i])
			}
			if why != "" {
				break
			}
		}
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers not caught up within %s: %s", timeout, why)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
