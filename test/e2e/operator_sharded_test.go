package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/procstat"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestOperatorShardedSource runs a SyncTask on a sharded source the way a
// cluster would: envtest's API server, the controller, the pod runner (each
// worker pod a `ferry run` process), and the sharded cluster stand-in of
// testserver.Cluster (three FerretDB servers as the shards' replica sets,
// each with its own oplog; a fourth as mongos, holding the union of the
// shards and config.shards; MoveChunk as the balancer), with a FerretDB
// target.
//
// What a user sees: one worker pod per shard and one status.shards entry
// each, with the pod's ordinal; "3/3 streaming". The full copy ran shard
// by shard, each worker copying its own shard's ranges (their done
// records name the worker's pod). Under a live load through
// the router, with a chunk migration, one worker is killed (SIGKILL) and
// restarts from its shard's checkpoint; a fourth shard joins the cluster
// and gets a fourth pod, which replays the chunk moved to it. The target
// ends equal to the union of the shards, document by document. The fourth
// shard then leaves: its entry is marked removed, its ordinal kept.
func TestOperatorShardedSource(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const name = "fleet"

	c := testserver.StartCluster(t, 3)
	dst := testserver.Start(t)
	// A fourth shard server exists from the start but joins the cluster
	// later; the task's source.shards[] names its address already.
	extra, err := c.PrepareShard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const coll = "app.items"
	var seed []bson.D
	for k := int64(0); k < 3000; k += 5 {
		seed = append(seed, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}, {Key: "pad", Value: "seed"}})
	}
	if err := c.Insert(ctx, coll, seed...); err != nil {
		t.Fatal(err)
	}

	task := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name:       name,
		Reconciler: func(r *controller.SyncTaskReconciler) { r.ShardRefreshInterval = 2 * time.Second },
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode: config.ModeFullAndIncremental,
			// The mongos stand-in is a FerretDB server, whose hello does
			// not say isdbgrid: kind sharded says what it is.
			Source: syncv1alpha1.Source{URI: c.RouterURI(), Kind: config.KindSharded, Shards: c.Overrides()},
			Target: syncv1alpha1.Target{URI: dst.URI},
		},
	})

	var keys []int64
	for k := int64(0); k < 3000; k += 5 {
		keys = append(keys, k)
	}
	load := testserver.NewClusterLoad(c, coll, keys, 3001, 25)
	// Moved chunks keep being written: the workers hold a recipient's
	// writes after a migration until the donor's worker has applied
	// everything before it (the shard board in the checkpoint database).
	load.Quiet = -1
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadErr := make(chan error, 1)
	go func() { loadErr <- load.Run(loadCtx, rand.New(rand.NewPCG(5, 7))) }()
	defer stopLoad()

	get := task.get
	pods := func() map[string]corev1.Pod {
		var list corev1.PodList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{controller.TaskLabel: name}); err != nil {
			t.Fatal(err)
		}
		out := map[string]corev1.Pod{}
		for _, p := range list.Items {
			out[p.Name] = p
		}
		return out
	}
	// mapping is status.shards as "name:ordinal" in order.
	mapping := func(st *syncv1alpha1.SyncTask) string {
		var parts []string
		for _, s := range st.Status.Shards {
			parts = append(parts, fmt.Sprintf("%s:%d", s.Name, s.Ordinal))
		}
		return strings.Join(parts, " ")
	}
	streamingAll := func(n int) func() bool {
		return func() bool {
			st := get()
			return st.Status.ShardSummary == fmt.Sprintf("%d/%d streaming", n, n) && st.Status.Phase == syncv1alpha1.PhaseStreaming
		}
	}

	waitFor(t, "three workers streaming", 4*time.Minute, streamingAll(3))
	if got, want := mapping(get()), "shard0:0 shard1:1 shard2:2"; got != want {
		t.Errorf("status.shards %q, want %q", got, want)
	}
	if p := pods(); len(p) != 3 {
		t.Errorf("%d worker pods, want 3", len(p))
	}
	t.Logf("kubectl get synctasks (3 shards streaming under load):\n%s", syncTaskTable(t, env.Config, ns, false))
	assertCopiedByOwnWorker(t, dst.MustClient(t).Database("mongoferry"), get())

	// The balancer moves a chunk; then worker 1 is killed and restarts.
	move := func(lo, hi int64, to int) {
		t.Helper()
		n, err := load.Move(ctx, lo, hi, to)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("moved %d documents of [%d,%d) to %s", n, lo, hi, c.Names[to])
	}
	move(0, 500, 1)
	killWorker(t, name+"-worker-1")
	waitFor(t, "worker 1 restarted", time.Minute, func() bool {
		p, ok := pods()[name+"-worker-1"]
		return ok && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount > 0
	})
	waitFor(t, "three workers streaming after the restart", 2*time.Minute, streamingAll(3))

	// A fourth shard joins: a fourth pod replays it, and the mapping of the
	// other three does not move.
	if err := c.ListShard(ctx, extra); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "four workers streaming", 3*time.Minute, streamingAll(4))
	if got, want := mapping(get()), "shard0:0 shard1:1 shard2:2 shard3:3"; got != want {
		t.Errorf("status.shards %q, want %q", got, want)
	}
	if p := pods(); len(p) != 4 {
		t.Errorf("%d worker pods, want 4", len(p))
	}
	// The new shard takes a chunk, and new documents in it are written
	// there: only the fourth worker replays them.
	move(2000, 2500, extra)
	var fresh []bson.D
	for k := int64(2001); k < 2500; k += 25 {
		fresh = append(fresh, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 1}, {Key: "pad", Value: "on the new shard"}})
	}
	if err := c.Insert(ctx, coll, fresh...); err != nil {
		t.Fatal(err)
	}
	if o := c.Owner(coll, 2001); o != extra {
		t.Fatalf("key 2001 is on shard %d, want the new shard %d", o, extra)
	}
	time.Sleep(5 * time.Second)

	// The fourth shard gives its chunk back and leaves: its entry and its
	// pod stay while its worker reads the shard's oplog to the end (the pod
	// goes once that worker reports Retired, being the last ordinal:
	// TestPlanShards), and the others keep streaming.
	move(2000, 2500, 2)
	if err := c.RemoveShard(ctx, extra); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removed shard marked removed", time.Minute, func() bool {
		st := get()
		last := st.Status.Shards[len(st.Status.Shards)-1]
		return last.Name == "shard3" && last.Removed && hasReason(taskEvents(t, env.Client, ns, name), syncv1alpha1.ReasonShardRemoved)
	})
	if got, want := mapping(get()), "shard0:0 shard1:1 shard2:2 shard3:3"; got != want {
		t.Errorf("status.shards %q after the removal, want %q", got, want)
	}

	stopLoad()
	if err := <-loadErr; err != nil {
		t.Fatalf("load: %v", err)
	}
	// The target converges to the union of the shards' documents (no
	// orphans: a migration removes the moved documents from the donor).
	// The shards are the truth rather than the mongos stand-in: the load's
	// last write, interrupted by its end, may have reached a shard and not
	// the router server.
	deadline := time.Now().Add(3 * time.Minute)
	db, cl := split(coll)
	for {
		union := map[string]bson.Raw{}
		for i := range c.Shards {
			for k, d := range docsByID(t, c.ShardClient(i), db, cl) {
				if _, dup := union[k]; dup {
					t.Fatalf("%s is on two shards", d.Lookup("_id"))
				}
				union[k] = d
			}
		}
		diff := diffDocs(union, docsByID(t, dst.MustClient(t), db, cl), "union of the shards -> target")
		if diff == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("target differs from the union of the shards: %s; status.shards %+v", diff, get().Status.Shards)
		}
		time.Sleep(2 * time.Second)
	}
	st := get()
	t.Logf("kubectl get synctasks (a 4th shard joined, then left):\n%s", syncTaskTable(t, env.Config, ns, false))
	for _, s := range st.Status.Shards {
		t.Logf("shard %s: pod %s-worker-%d, %s, lag %ds, applied %s, held %d", s.Name, name, s.Ordinal, s.Phase, s.LagSeconds, s.AppliedTimestamp, s.HeldWrites)
	}
	evs := taskEvents(t, env.Client, ns, name)
	for _, r := range []string{syncv1alpha1.ReasonShardsDiscovered, syncv1alpha1.ReasonShardAdded, syncv1alpha1.ReasonShardRemoved} {
		if !hasReason(evs, r) {
			t.Errorf("no %s event", r)
		}
	}
	if hasReason(evs, "ShardedSourceNotSupported") {
		t.Errorf("a ShardedSourceNotSupported event")
	}
	ins, upd, del := load.Counts()
	t.Logf("live load: %d inserts, %d updates, %d deletes", ins, upd, del)
}

// assertCopiedByOwnWorker checks that the full copy ran shard by shard
// in every worker: each shard's ranges, in every pass the copy saved, are
// recorded done by that shard's own worker pod (a done record's owner is
// "<pod name>/<pid>"), and the worker of every shard in status.shards
// copied documents. It logs what each worker copied.
func assertCopiedByOwnWorker(t *testing.T, meta *mongo.Database, st *syncv1alpha1.SyncTask) {
	t.Helper()
	pod := map[string]string{}
	for _, s := range st.Status.Shards {
		pod[s.Name] = fmt.Sprintf("%s-worker-%d", st.Name, s.Ordinal)
	}
	cc := countCopy(context.Background(), t, meta, st.Name)
	byShard := map[string]*ownerCount{}
	for id, r := range cc.doneBy {
		shard := cc.shardOf[id]
		if owner, _, _ := strings.Cut(r.Owner, "/"); owner != pod[shard] {
			t.Errorf("range %s of %s recorded done by %s, want its worker pod %s", id, shard, r.Owner, pod[shard])
		}
		if byShard[shard] == nil {
			byShard[shard] = &ownerCount{}
		}
		byShard[shard].ranges++
		byShard[shard].docs += r.Docs
	}
	t.Logf("the copy ran shard by shard: %d passes, %d ranges", cc.passes, cc.done)
	for _, s := range st.Status.Shards {
		n := byShard[s.Name]
		if n == nil || n.docs == 0 {
			t.Errorf("the worker of %s (pod %s) copied nothing", s.Name, pod[s.Name])
			continue
		}
		t.Logf("  %s copied %d documents of %s in %d ranges", pod[s.Name], n.docs, s.Name, n.ranges)
	}
}

// killWorker sends SIGKILL to the `ferry run` process of a worker pod run
// by the pod runner (found by MONGOFERRY_POD_NAME in its environment), as
// the kernel's OOM killer would.
func killWorker(t *testing.T, pod string) {
	t.Helper()
	want := controller.PodNameEnv + "=" + pod
	pids, _ := procstat.PIDs()
	for _, pid := range pids {
		env, err := procstat.Environ(pid)
		if err != nil || !slices.Contains(env, want) {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s (pid %d): %v", pod, pid, err)
		}
		t.Logf("killed %s (pid %d)", pod, pid)
		return
	}
	t.Fatalf("no process of pod %s found", pod)
}
