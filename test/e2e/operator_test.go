package e2e

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// TestOperator runs a SyncTask the way a cluster would: a real API server
// (envtest), the SyncTask controller in a controller-runtime manager, the
// pod runner standing in for the kubelet and the StatefulSet controller
// (each worker pod is a `ferry run` process with the pod's command, args
// and env), and two FerretDB servers with authentication, the credentials
// in Secrets.
//
// It checks what a user watches: phase FullSync then Streaming, progress
// 100 %, lag under 5 s with a live load, the target equal to the source
// (hash verification and byte-for-byte); suspend stops the worker and
// shows Paused, resume continues from the checkpoint without copying
// again; a password rotated in the Secret rolls the worker, which then
// works with the new password.
func TestOperator(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const (
		srcUser, srcPass = "ferry-src", "src-Pa55:w/rd"
		dstUser, dstPass = "ferry-dst", "dst-Pa55@w?rd"
		newSrcPass       = "rotated-Src-Pa55"
		name             = "orders"
	)
	src := testserver.Start(t, testserver.Options{Host: "127.0.0.2", Username: srcUser, Password: srcPass})
	dst := testserver.Start(t, testserver.Options{Host: "127.0.0.3", Username: dstUser, Password: dstPass})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 4000, FieldCount: 5, FieldLength: 40, Seed: 11}
	if _, err := workload.Load(ctx, sc, base); err != nil {
		t.Fatal(err)
	}

	createCredentials(t, env, ns, srcUser, map[string]string{"src-creds": srcPass})
	createCredentials(t, env, ns, dstUser, map[string]string{"dst-creds": dstPass})
	task := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, RecordPhases: true,
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: src.URI, CredentialsSecret: "src-creds"},
			Target: syncv1alpha1.Target{URI: dst.URI, CredentialsSecret: "dst-creds"},
			// A copy slow enough (about 15 s) for FullSync to be seen.
			Threads:   config.Threads{Readers: 2, Writers: 2},
			Cache:     config.Cache{BatchSize: 100},
			FullSync:  config.FullSync{RangeDocuments: 500, Split: config.SplitAlways},
			RateLimit: 250,
		},
	})
	phases := task.phases

	// A live load (inserts, updates, deletes, about 20 ops/s) during the
	// copy and the replay.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		run := base
		run.Workload, run.Threads, run.Rate, run.Distribution = workload.WorkloadMixed, 1, 20, workload.Uniform
		run.InsertProportion, run.UpdateProportion, run.DeleteProportion = 0.4, 0.4, 0.2
		_, _ = workload.Run(loadCtx, sc, run)
	})
	defer func() { stopLoad(); wg.Wait() }()

	get := task.get
	waitFor(t, "phase FullSync", 2*time.Minute, func() bool { return get().Status.Phase == syncv1alpha1.PhaseFullSync })
	t.Logf("kubectl get synctasks (copying):\n%s", syncTaskTable(t, env.Config, ns, false))
	waitFor(t, "copy progress", 2*time.Minute, func() bool {
		st := get().Status
		return st.Phase != syncv1alpha1.PhaseFullSync || (st.Progress != nil && st.Progress.Documents > 0)
	})
	t.Logf("kubectl get synctasks -o wide (copying):\n%s", syncTaskTable(t, env.Config, ns, true))

	// When the phase was first seen Streaming, and Ready True after it.
	var streaming, ready time.Time
	seeReady := func(st syncv1alpha1.SyncTaskStatus) bool {
		if st.Phase == syncv1alpha1.PhaseStreaming && streaming.IsZero() {
			streaming = time.Now()
		}
		c := meta.FindStatusCondition(st.Conditions, syncv1alpha1.ConditionReady)
		if c != nil && c.Status == metav1.ConditionTrue && !streaming.IsZero() && ready.IsZero() {
			ready = time.Now()
		}
		return !ready.IsZero()
	}
	waitFor(t, "Streaming, 100%, lag under 5 s while the load runs", 5*time.Minute, func() bool {
		st := get().Status
		seeReady(st)
		return st.Phase == syncv1alpha1.PhaseStreaming && st.Progress != nil && st.Progress.Percent == "100%" &&
			st.LagSeconds < 5 && st.OpsPerSecond > 0
	})
	t.Logf("kubectl get synctasks (streaming under load):\n%s", syncTaskTable(t, env.Config, ns, false))
	t.Logf("kubectl get synctasks -o wide:\n%s", syncTaskTable(t, env.Config, ns, true))
	// The recorder polls on its own goroutine and can be a few reads
	// behind get() on a loaded machine: give it time to see Streaming too.
	waitFor(t, "the phase recorder to see Streaming", 30*time.Second, func() bool {
		return slices.Contains(phases.seen(), syncv1alpha1.PhaseStreaming)
	})
	if p := phases.seen(); !inOrder(p, syncv1alpha1.PhaseFullSync, syncv1alpha1.PhaseStreaming) {
		t.Errorf("phases seen %v, want FullSync then Streaming", p)
	}
	// Ready waits for the lag, which is unknown until the worker has read
	// the source's newest position: on FerretDB from the tailer's own
	// reads, each a scan of the oplog (docs/operator.md, "Ready"). Wait
	// for it, and say how long it took.
	var st syncv1alpha1.SyncTaskStatus
	waitFor(t, "Ready while streaming", 2*time.Minute, func() bool {
		st = get().Status
		return seeReady(st)
	})
	t.Logf("Ready %s after the phase was first seen Streaming (status polled every 200ms)", ready.Sub(streaming).Round(100*time.Millisecond))
	if y, err := yaml.Marshal(map[string]any{"status": st}); err == nil {
		t.Logf("kubectl get synctask %s -o yaml (status):\n%s", name, y)
	}
	if st.StartedAt == nil || st.CheckpointTime == nil || len(st.Shards) != 1 || st.Shards[0].Name != "orders-worker-0" {
		t.Errorf("status %+v: want startedAt, checkpointTime and one shard entry for orders-worker-0", st)
	}
	stopLoad()
	wg.Wait()
	waitCaughtUp(t, env.Client, sc, ns, name)
	verifySame(t, sc, dc)

	// Suspend: the worker stops, the task is Paused, the checkpoint stays.
	setSuspend(t, env.Client, ns, name, true)
	waitFor(t, "the worker pod to go away and phase Paused", 2*time.Minute, func() bool {
		return len(workerPods(t, env.Client, ns, name)) == 0 && get().Status.Phase == syncv1alpha1.PhasePaused
	})
	t.Logf("kubectl get synctasks -o wide (suspended):\n%s", syncTaskTable(t, env.Config, ns, true))
	before := taskRecord(t, dc, name)
	if !before.CopyDone {
		t.Fatalf("checkpoint before resume: %+v, want copyDone", before)
	}
	resumeAt := len(phases.seen())
	// Writes while suspended: replayed after the resume. One client thread,
	// here and in the live load: FerretDB may make concurrent writes'
	// oplog entries visible out of ts order (see conn.Profile.OplogHasHoles).
	more := base
	more.Workload, more.Threads, more.Operations, more.Distribution = workload.WorkloadMixed, 1, 150, workload.Uniform
	more.InsertProportion, more.UpdateProportion, more.DeleteProportion = 0.4, 0.4, 0.2
	if _, err := workload.Run(ctx, sc, more); err != nil {
		t.Fatal(err)
	}
	setSuspend(t, env.Client, ns, name, false)
	waitFor(t, "the resumed worker to stream", 3*time.Minute, func() bool {
		return len(workerPods(t, env.Client, ns, name)) == 1 && get().Status.Phase == syncv1alpha1.PhaseStreaming
	})
	waitCaughtUp(t, env.Client, sc, ns, name)
	verifySame(t, sc, dc)
	after := taskRecord(t, dc, name)
	if after.Runs <= before.Runs || !after.CopyDone {
		t.Errorf("checkpoint after resume: runs %d (before %d), copyDone %v: want one more run and the copy still done",
			after.Runs, before.Runs, after.CopyDone)
	}
	if p := phases.seen()[resumeAt:]; slices.Contains(p, syncv1alpha1.PhaseFullSync) {
		t.Errorf("phases after resume %v: the copy ran again", p)
	}
	t.Logf("checkpoint: runs %d -> %d, copyDone %v; phases %v", before.Runs, after.Runs, after.CopyDone, phases.seen())

	// Rotate the source password: on the server, then in the Secret.
	old := workerPods(t, env.Client, ns, name)[0]
	if err := sc.Database("admin").RunCommand(ctx, bson.D{{Key: "updateUser", Value: srcUser}, {Key: "pwd", Value: newSrcPass}}).Err(); err != nil {
		t.Fatal(err)
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s corev1.Secret
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "src-creds"}, &s); err != nil {
			return err
		}
		s.Data["password"] = []byte(newSrcPass)
		return env.Client.Update(ctx, &s)
	})
	if err != nil {
		t.Fatal(err)
	}
	var rolled corev1.Pod
	waitFor(t, "WorkersRolled and a new ready worker pod", 2*time.Minute, func() bool {
		pods := workerPods(t, env.Client, ns, name)
		if len(pods) != 1 || pods[0].UID == old.UID || !podReady(&pods[0]) {
			return false
		}
		rolled = pods[0]
		return hasReason(taskEvents(t, env.Client, ns, name), "WorkersRolled")
	})
	if h0, h1 := old.Annotations[controller.ConfigHashAnnotation], rolled.Annotations[controller.ConfigHashAnnotation]; h0 == h1 || h1 == "" {
		t.Errorf("config hash %q -> %q, want a new one", h0, h1)
	}
	// The new worker works with the new password only.
	sc2 := connect(t, src, srcUser, newSrcPass)
	more.Seed, more.Operations = 12, 60
	if _, err := workload.Run(ctx, sc2, more); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, env.Client, sc2, ns, name)
	verifySame(t, sc2, dc)

	t.Logf("kubectl get synctasks (after the password rotation):\n%s", syncTaskTable(t, env.Config, ns, false))
	var reasons []string
	for _, e := range taskEvents(t, env.Client, ns, name) {
		reasons = append(reasons, e.Reason+": "+e.Note)
	}
	t.Logf("events:\n  %s", strings.Join(reasons, "\n  "))
	for _, r := range []string{"WorkersCreated", "PhaseChanged", "Suspended", "Resumed", "WorkersRolled"} {
		if !slices.ContainsFunc(reasons, func(s string) bool { return strings.HasPrefix(s, r+":") }) {
			t.Errorf("no %s event", r)
		}
	}
	for _, e := range reasons {
		for _, pw := range []string{srcPass, dstPass, newSrcPass} {
			if strings.Contains(e, pw) {
				t.Errorf("an event shows a password: %s", e)
			}
		}
	}
}

// inOrder reports whether want appear in seen in this order.
func inOrder(seen []syncv1alpha1.Phase, want ...syncv1alpha1.Phase) bool {
	for _, p := range seen {
		if len(want) > 0 && p == want[0] {
			want = want[1:]
		}
	}
	return len(want) == 0
}

func setSuspend(t *testing.T, c client.Client, ns, name string, suspend bool) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var st syncv1alpha1.SyncTask
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &st); err != nil {
			return err
		}
		st.Spec.Suspend = suspend
		return c.Update(context.Background(), &st)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func workerPods(t *testing.T, c client.Client, ns, task string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := c.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{controller.TaskLabel: task}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitCaughtUp waits until the task's status says the target has every
// change the source has made so far: the applied position of its worker
// at or past the source's newest oplog entry.
func waitCaughtUp(t *testing.T, c client.Client, sc *mongo.Client, ns, name string) {
	t.Helper()
	var newest struct {
		TS bson.Timestamp `bson:"ts"`
	}
	if err := sc.Database("local").Collection("oplog.rs").FindOne(context.Background(), bson.D{}, optsNewest()).Decode(&newest); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("the status to show the target caught up with %d:%d", newest.TS.T, newest.TS.I), 3*time.Minute, func() bool {
		var st syncv1alpha1.SyncTask
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &st); err != nil {
			return false
		}
		if st.Status.Phase != syncv1alpha1.PhaseStreaming || len(st.Status.Shards) != 1 {
			return false
		}
		tStr, iStr, ok := strings.Cut(st.Status.Shards[0].AppliedTimestamp, ":")
		ts, err1 := strconv.ParseUint(tStr, 10, 32)
		inc, err2 := strconv.ParseUint(iStr, 10, 32)
		return ok && err1 == nil && err2 == nil && bson.Timestamp{T: uint32(ts), I: uint32(inc)}.Compare(newest.TS) >= 0
	})
}

// verifySame compares every source namespace with the target: the
// engine's hash verification, then document by document.
func verifySame(t *testing.T, sc, dc *mongo.Client) {
	t.Helper()
	ctx := context.Background()
	mapper, err := catalog.NewMapper(config.Namespaces{}, config.DefaultDatabase)
	if err != nil {
		t.Fatal(err)
	}
	colls, err := catalog.List(ctx, sc, mapper)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Run(ctx, sc, dc, colls, verify.Options{Mode: config.VerifyHash})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		var b strings.Builder
		_ = rep.WriteTable(&b)
		t.Fatalf("hash verification: target differs from source:\n%s", b.String())
	}
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
}

// taskRecord reads a task's checkpoint record from the target.
func taskRecord(t *testing.T, dc *mongo.Client, name string) checkpoint.TaskRecord {
	t.Helper()
	rec, err := checkpoint.NewStore(dc, config.DefaultDatabase, name).Task(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// connect opens a test client with the given credentials.
func connect(t *testing.T, s *testserver.Server, user, password string) *mongo.Client {
	t.Helper()
	u := url.URL{Scheme: "mongodb", Host: s.Addr, Path: "/", User: url.UserPassword(user, password), RawQuery: "directConnection=true"}
	c, err := mongo.Connect(options.Client().ApplyURI(u.String()).SetTimeout(2 * time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	if err := c.Ping(context.Background(), nil); err != nil {
		t.Fatalf("connect with the rotated password: %v", err)
	}
	return c
}

// TestOperatorFullCopy: a task of mode full copies, verifies and completes;
// the controller then stops its worker (instead of letting the StatefulSet
// restart it forever), shows the verification, and with deletePolicy
// Delete removes the task's checkpoints from the target when the task is
// deleted.
func TestOperatorFullCopy(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const name = "archive"
	src := testserver.Start(t, testserver.Options{Host: "127.0.0.4", Username: "reader", Password: "r3ader-pw"})
	dst := testserver.Start(t, testserver.Options{Host: "127.0.0.5", Username: "writer", Password: "wr1ter-pw"})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	if _, err := workload.Load(ctx, sc, workload.Options{Database: "shop", Collection: "orders", RecordCount: 1500, FieldCount: 4, FieldLength: 30, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	createCredentials(t, env, ns, "reader", map[string]string{"src-creds": "r3ader-pw"})
	createCredentials(t, env, ns, "writer", map[string]string{"dst-creds": "wr1ter-pw"})
	startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, FirstIP: "127.0.12.1",
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFull,
			Source: syncv1alpha1.Source{URI: src.URI, CredentialsSecret: "src-creds"},
			Target: syncv1alpha1.Target{URI: dst.URI, CredentialsSecret: "dst-creds"},
			Verify: config.Verify{Mode: config.VerifyHash},
			// A copy of a few seconds, so that the worker reports it.
			Cache:        config.Cache{BatchSize: 100},
			RateLimit:    300,
			DeletePolicy: syncv1alpha1.DeleteDelete,
		},
	})
	var st syncv1alpha1.SyncTask
	waitFor(t, "Completed with the worker stopped", 3*time.Minute, func() bool {
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &st); err != nil {
			return false
		}
		return st.Status.Phase == syncv1alpha1.PhaseCompleted && len(workerPods(t, env.Client, ns, name)) == 0
	})
	t.Logf("kubectl get synctasks -o wide (completed):\n%s", syncTaskTable(t, env.Config, ns, true))
	if v := st.Status.LastVerification; v == nil || v.Result != syncv1alpha1.VerificationPassed || v.Mode != config.VerifyHash {
		t.Errorf("lastVerification %+v, want Passed (hash)", v)
	}
	if c := meta.FindStatusCondition(st.Status.Conditions, syncv1alpha1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != syncv1alpha1.ReasonCompleted {
		t.Errorf("Ready = %+v, want True/Completed", c)
	}
	// The documents are those of the worker's last report: a worker exits
	// as soon as it completes, so its final figures are seldom read.
	if p := st.Status.Progress; p == nil || p.Percent != "100%" || p.Documents == 0 || p.EstimatedDocuments != 1500 {
		t.Errorf("progress %+v, want 100%% and the worker's last count", p)
	}
	if !hasReason(taskEvents(t, env.Client, ns, name), "WorkersStopped") {
		t.Error("no WorkersStopped event")
	}
	verifySame(t, sc, dc)
	if rec := taskRecord(t, dc, name); rec.Phase != "Completed" || !rec.CopyDone {
		t.Errorf("checkpoint record %+v", rec)
	}

	// Deleting the task removes its checkpoints (deletePolicy Delete).
	if err := env.Client.Delete(ctx, &st); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SyncTask to be deleted", 2*time.Minute, func() bool {
		err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &syncv1alpha1.SyncTask{})
		return err != nil
	})
	if _, err := checkpoint.NewStore(dc, config.DefaultDatabase, name).Task(ctx); err == nil {
		t.Error("the task's checkpoint record is still on the target after deletion with deletePolicy Delete")
	}
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
}
