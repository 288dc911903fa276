package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/pkg/config"
)

func TestMetricsProgressRatio(t *testing.T) {
	for _, tc := range []struct {
		name   string
		p      *syncv1alpha1.CopyProgress
		want   float64
		wantOK bool
	}{
		{"no progress reported", nil, 0, false},
		{"empty progress", &syncv1alpha1.CopyProgress{}, 0, true},
		{"documents over estimate", &syncv1alpha1.CopyProgress{Documents: 250, EstimatedDocuments: 1000, Percent: "25%"}, 0.25, true},
		{"finer than percent", &syncv1alpha1.CopyProgress{Documents: 333, EstimatedDocuments: 1000, Percent: "33%"}, 0.333, true},
		{"estimate reached, copy not finished", &syncv1alpha1.CopyProgress{Documents: 1200, EstimatedDocuments: 1000, Percent: "99%"}, 0.99, true},
		{"estimate reached, no percent", &syncv1alpha1.CopyProgress{Documents: 1000, EstimatedDocuments: 1000}, 0.99, true},
		{"finished", &syncv1alpha1.CopyProgress{Documents: 990, EstimatedDocuments: 1000, Percent: "100%"}, 1, true},
		{"percent only", &syncv1alpha1.CopyProgress{Documents: 10, Percent: "7%"}, 0.07, true},
		{"documents without estimate or percent", &syncv1alpha1.CopyProgress{Documents: 10}, 0, false},
		{"percent not a percentage", &syncv1alpha1.CopyProgress{Documents: 10, Percent: "7"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := progressRatio(tc.p)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("progressRatio(%+v) = %v, %v; want %v, %v", tc.p, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// metricsFailingReader fails every list, like a cache that has not started.
type metricsFailingReader struct{ client.Reader }

func (metricsFailingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("the cache is not started, can not read objects")
}

func TestMetricsListErrorKeepsScrapeWorking(t *testing.T) {
	c := &SyncTaskCollector{Reader: metricsFailingReader{}}
	want := `
# HELP mongoferry_synctask_list_errors_total Scrapes at which the SyncTasks or their worker pods could not be listed from the manager's cache (their series are then missing).
# TYPE mongoferry_synctask_list_errors_total counter
mongoferry_synctask_list_errors_total 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "mongoferry_synctask_list_errors_total"); n != 1 {
		t.Errorf("%d error series, want 1", n)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// metricsNoPodsReader lists one SyncTask and fails to list pods.
type metricsNoPodsReader struct{ client.Reader }

func (metricsNoPodsReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	tasks, ok := list.(*syncv1alpha1.SyncTaskList)
	if !ok {
		return errors.New("pods is forbidden")
	}
	tasks.Items = []syncv1alpha1.SyncTask{{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders"}}}
	return nil
}

// TestMetricsPodListError: the task series stay when the worker pods
// cannot be listed; the failure is counted.
func TestMetricsPodListError(t *testing.T) {
	c := &SyncTaskCollector{Reader: metricsNoPodsReader{}}
	if n := testutil.CollectAndCount(c, "mongoferry_synctask_info"); n != 1 {
		t.Errorf("%d info series, want 1", n)
	}
	if n := testutil.CollectAndCount(c, "mongoferry_synctask_worker_restarts_total"); n != 0 {
		t.Errorf("%d restart series, want none", n)
	}
	want := `
# HELP mongoferry_synctask_list_errors_total Scrapes at which the SyncTasks or their worker pods could not be listed from the manager's cache (their series are then missing).
# TYPE mongoferry_synctask_list_errors_total counter
mongoferry_synctask_list_errors_total 3
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "mongoferry_synctask_list_errors_total"); err != nil {
		t.Error(err)
	}
}

// TestMetricsCollector lists SyncTasks from a real cache over a real API
// server, with statuses written through the status subresource as the
// controller writes them.
func TestMetricsCollector(t *testing.T) {
	// Its own control plane, so that the test does not depend on the
	// package's other tests.
	metricsEnv := envtestutil.Start(t)
	ns := metricsEnv.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	informers, err := cache.New(metricsEnv.Config, cache.Options{Scheme: metricsEnv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	cacheCtx, stopCache := context.WithCancel(ctx)
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- informers.Start(cacheCtx) }()
	t.Cleanup(func() { stopCache(); <-cacheDone })

	checkpoint := metav1.NewTime(time.Unix(1767225600, 0))
	now := metav1.Now()
	condition := func(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason, ObservedGeneration: 1, LastTransitionTime: now}
	}

	// A replica-set task copying, one sharded task streaming, one the
	// controller has not reported on.
	copying := metricsTestTask(ns, "orders", syncv1alpha1.Source{URI: "mongodb://src.example:27017/?replicaSet=rs0", CredentialsSecret: "src"})
	copying.Spec.Mode = config.ModeFull
	streaming := metricsTestTask(ns, "users", syncv1alpha1.Source{
		URI: "mongodb://mongos.example:27017/", Kind: config.KindSharded, CredentialsSecret: "src",
		Shards: []config.Shard{{Name: "shard0", URI: "mongodb://s0.example:27018/?replicaSet=shard0"}, {Name: "shard1", URI: "mongodb://s1.example:27018/?replicaSet=shard1"}},
	})
	fresh := metricsTestTask(ns, "fresh", syncv1alpha1.Source{URI: "mongodb://other.example:27017/", CredentialsSecret: "src"})
	for _, st := range []*syncv1alpha1.SyncTask{copying, streaming, fresh} {
		if err := metricsEnv.Client.Create(ctx, st); err != nil {
			t.Fatalf("create %s: %v", st.Name, err)
		}
	}

	copying.Status = syncv1alpha1.SyncTaskStatus{
		ObservedGeneration: 1,
		Phase:              syncv1alpha1.PhaseFullSync,
		Progress:           &syncv1alpha1.CopyProgress{Documents: 420, Bytes: 420 << 10, EstimatedDocuments: 1000, Percent: "42%"},
		BytesPerSecond:     2048,
		Shards:             []syncv1alpha1.ShardStatus{{Name: "rs0", Phase: syncv1alpha1.PhaseFullSync, Documents: 420}},
	}
	meta.SetStatusCondition(&copying.Status.Conditions, condition(syncv1alpha1.ConditionReady, metav1.ConditionTrue, "WorkersRunning"))
	meta.SetStatusCondition(&copying.Status.Conditions, condition(syncv1alpha1.ConditionProgressing, metav1.ConditionTrue, "Copying"))

	streaming.Status = syncv1alpha1.SyncTaskStatus{
		ObservedGeneration: 1,
		Phase:              syncv1alpha1.PhaseStreaming,
		Progress:           &syncv1alpha1.CopyProgress{Documents: 1990, EstimatedDocuments: 2000, Percent: "100%"},
		LagSeconds:         3,
		OpsPerSecond:       250,
		CheckpointTime:     &checkpoint,
		Shards: []syncv1alpha1.ShardStatus{
			{Name: "shard0", Phase: syncv1alpha1.PhaseStreaming, LagSeconds: 3, OpsPerSecond: 100},
			{Name: "shard1", Phase: syncv1alpha1.PhaseStreaming, LagSeconds: 1, OpsPerSecond: 150, HeldWrites: 12},
		},
	}
	meta.SetStatusCondition(&streaming.Status.Conditions, condition(syncv1alpha1.ConditionReady, metav1.ConditionFalse, "ShardRetrying"))
	meta.SetStatusCondition(&streaming.Status.Conditions, condition(syncv1alpha1.ConditionDegraded, metav1.ConditionTrue, "ShardRetrying"))

	for _, st := range []*syncv1alpha1.SyncTask{copying, streaming} {
		if err := metricsEnv.Client.Status().Update(ctx, st); err != nil {
			t.Fatalf("update the status of %s: %v", st.Name, err)
		}
	}

	// The streaming task's worker restarted twice; a pod of a task that is
	// gone is left out, and so is a pod the operator does not manage.
	for _, p := range []struct {
		name, task string
		managed    bool
		restarts   int32
	}{{"users-worker-0", "users", true, 2}, {"gone-worker-0", "gone", true, 5}, {"users-other", "users", false, 7}} {
		labels := map[string]string{TaskLabel: p.task}
		if p.managed {
			labels = workerLabels(&syncv1alpha1.SyncTask{ObjectMeta: metav1.ObjectMeta{Name: p.task}})
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: WorkerContainer, Image: testImage}}},
		}
		if err := metricsEnv.Client.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: WorkerContainer, Image: testImage, RestartCount: p.restarts}}
		if err := metricsEnv.Client.Status().Update(ctx, pod); err != nil {
			t.Fatalf("update the status of pod %s: %v", p.name, err)
		}
	}

	elected := make(chan struct{})
	c := &SyncTaskCollector{Reader: informers, Elected: elected}

	// Not the leader: no task series, the error counter only.
	if n := testutil.CollectAndCount(c); n != 1 {
		t.Errorf("before election: %d series, want 1 (mongoferry_synctask_list_errors_total)", n)
	}
	close(elected)

	expected := metricsExpected(ns)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := testutil.CollectAndCompare(c, strings.NewReader(expected))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never matched the SyncTasks' status:\n%v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}

	// A deleted task's series go at the next scrape.
	if err := metricsEnv.Client.Delete(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	// 7 phases, lag, ops/s, bytes/s, ready, shards, info and copied
	// documents: 14 series.
	want := metricsSeriesCount - 14
	deadline = time.Now().Add(30 * time.Second)
	for {
		n := testutil.CollectAndCount(c)
		if n == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after deleting %s: %d series, want %d", fresh.Name, n, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func metricsTestTask(ns, name string, src syncv1alpha1.Source) *syncv1alpha1.SyncTask {
	return &syncv1alpha1.SyncTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: syncv1alpha1.SyncTaskSpec{
			Source: src,
			Target: syncv1alpha1.Target{URI: "mongodb://dst.example:27017/", CredentialsSecret: "dst"},
		},
	}
}

// metricsSeriesCount is the number of series in metricsExpected.
const metricsSeriesCount = 3*14 + 2 + 1 + 3 + 3 + 4 + 1 + 1

// metricsExpected is what /metrics shows for the three tasks of
// TestMetricsCollector.
func metricsExpected(ns string) string {
	return strings.ReplaceAll(`
# HELP mongoferry_synctask_bytes_per_second Document bytes written to the target per second, summed over shards (status.bytesPerSecond).
# TYPE mongoferry_synctask_bytes_per_second gauge
mongoferry_synctask_bytes_per_second{namespace="NS",synctask="fresh"} 0
mongoferry_synctask_bytes_per_second{namespace="NS",synctask="orders"} 2048
mongoferry_synctask_bytes_per_second{namespace="NS",synctask="users"} 0
# HELP mongoferry_synctask_checkpoint_timestamp_seconds Unix time of the oplog position up to which every shard has been applied and saved (status.checkpointTime).
# TYPE mongoferry_synctask_checkpoint_timestamp_seconds gauge
mongoferry_synctask_checkpoint_timestamp_seconds{namespace="NS",synctask="users"} 1.7672256e+09
# HELP mongoferry_synctask_condition Always 1; one series per status condition, with its type, status and reason as labels.
# TYPE mongoferry_synctask_condition gauge
mongoferry_synctask_condition{namespace="NS",reason="Copying",status="True",synctask="orders",type="Progressing"} 1
mongoferry_synctask_condition{namespace="NS",reason="ShardRetrying",status="False",synctask="users",type="Ready"} 1
mongoferry_synctask_condition{namespace="NS",reason="ShardRetrying",status="True",synctask="users",type="Degraded"} 1
mongoferry_synctask_condition{namespace="NS",reason="WorkersRunning",status="True",synctask="orders",type="Ready"} 1
# HELP mongoferry_synctask_copy_documents_total Documents the full copy has written to the target, summed over shards (status.progress.documents).
# TYPE mongoferry_synctask_copy_documents_total counter
mongoferry_synctask_copy_documents_total{namespace="NS",synctask="fresh"} 0
mongoferry_synctask_copy_documents_total{namespace="NS",synctask="orders"} 420
mongoferry_synctask_copy_documents_total{namespace="NS",synctask="users"} 1990
# HELP mongoferry_synctask_info Always 1; the SyncTask's mode and source kind (spec.mode, spec.source.kind) as labels.
# TYPE mongoferry_synctask_info gauge
mongoferry_synctask_info{mode="full",namespace="NS",source_kind="auto",synctask="orders"} 1
mongoferry_synctask_info{mode="fullAndIncremental",namespace="NS",source_kind="auto",synctask="fresh"} 1
mongoferry_synctask_info{mode="fullAndIncremental",namespace="NS",source_kind="sharded",synctask="users"} 1
# HELP mongoferry_synctask_lag_seconds Seconds the target is behind the source, the largest over shards (status.lagSeconds).
# TYPE mongoferry_synctask_lag_seconds gauge
mongoferry_synctask_lag_seconds{namespace="NS",synctask="fresh"} 0
mongoferry_synctask_lag_seconds{namespace="NS",synctask="orders"} 0
mongoferry_synctask_lag_seconds{namespace="NS",synctask="users"} 3
# HELP mongoferry_synctask_list_errors_total Scrapes at which the SyncTasks or their worker pods could not be listed from the manager's cache (their series are then missing).
# TYPE mongoferry_synctask_list_errors_total counter
mongoferry_synctask_list_errors_total 0
# HELP mongoferry_synctask_ops_per_second Changes applied to the target per second, summed over shards (status.opsPerSecond).
# TYPE mongoferry_synctask_ops_per_second gauge
mongoferry_synctask_ops_per_second{namespace="NS",synctask="fresh"} 0
mongoferry_synctask_ops_per_second{namespace="NS",synctask="orders"} 0
mongoferry_synctask_ops_per_second{namespace="NS",synctask="users"} 250
# HELP mongoferry_synctask_phase 1 for the SyncTask's current phase (status.phase), 0 for the others.
# TYPE mongoferry_synctask_phase gauge
mongoferry_synctask_phase{namespace="NS",phase="Completed",synctask="fresh"} 0
mongoferry_synctask_phase{namespace="NS",phase="Completed",synctask="orders"} 0
mongoferry_synctask_phase{namespace="NS",phase="Completed",synctask="users"} 0
mongoferry_synctask_phase{namespace="NS",phase="Failed",synctask="fresh"} 0
mongoferry_synctask_phase{namespace="NS",phase="Failed",synctask="orders"} 0
mongoferry_synctask_phase{namespace="NS",phase="Failed",synctask="users"} 0
mongoferry_synctask_phase{namespace="NS",phase="FullSync",synctask="fresh"} 0
mongoferry_synctask_phase{namespace="NS",phase="FullSync",synctask="orders"} 1
mongoferry_synctask_phase{namespace="NS",phase="FullSync",synctask="users"} 0
mongoferry_synctask_phase{namespace="NS",phase="Paused",synctask="fresh"} 0
mongoferry_synctask_phase{namespace="NS",phase="Paused",synctask="orders"} 0
mongoferry_synctask_phase{namespace="NS",phase="Paused",synctask="users"} 0
mongoferry_synctask_phase{namespace="NS",phase="Pending",synctask="fresh"} 1
mongoferry_synctask_phase{namespace="NS",phase="Pending",synctask="orders"} 0
mongoferry_synctask_phase{namespace="NS",phase="Pending",synctask="users"} 0
mongoferry_synctask_phase{namespace="NS",phase="Streaming",synctask="fresh"} 0
mongoferry_synctask_phase{namespace="NS",phase="Streaming",synctask="orders"} 0
mongoferry_synctask_phase{namespace="NS",phase="Streaming",synctask="users"} 1
mongoferry_synctask_phase{namespace="NS",phase="Verifying",synctask="fresh"} 0
mongoferry_synctask_phase{namespace="NS",phase="Verifying",synctask="orders"} 0
mongoferry_synctask_phase{namespace="NS",phase="Verifying",synctask="users"} 0
# HELP mongoferry_synctask_progress_ratio Full copy progress from 0 to 1 (status.progress); 1 only once the copy has finished.
# TYPE mongoferry_synctask_progress_ratio gauge
mongoferry_synctask_progress_ratio{namespace="NS",synctask="orders"} 0.42
mongoferry_synctask_progress_ratio{namespace="NS",synctask="users"} 1
# HELP mongoferry_synctask_ready 1 when the SyncTask's Ready condition is True, 0 otherwise.
# TYPE mongoferry_synctask_ready gauge
mongoferry_synctask_ready{namespace="NS",synctask="fresh"} 0
mongoferry_synctask_ready{namespace="NS",synctask="orders"} 1
mongoferry_synctask_ready{namespace="NS",synctask="users"} 0
# HELP mongoferry_synctask_shards Workers reporting in status.shards: one per shard of a sharded source, one for a replica set.
# TYPE mongoferry_synctask_shards gauge
mongoferry_synctask_shards{namespace="NS",synctask="fresh"} 0
mongoferry_synctask_shards{namespace="NS",synctask="orders"} 1
mongoferry_synctask_shards{namespace="NS",synctask="users"} 2
# HELP mongoferry_synctask_shard_lag_seconds Seconds one shard's applied changes are behind its source (status.shards[].lagSeconds).
# TYPE mongoferry_synctask_shard_lag_seconds gauge
mongoferry_synctask_shard_lag_seconds{namespace="NS",shard="rs0",synctask="orders"} 0
mongoferry_synctask_shard_lag_seconds{namespace="NS",shard="shard0",synctask="users"} 3
mongoferry_synctask_shard_lag_seconds{namespace="NS",shard="shard1",synctask="users"} 1
# HELP mongoferry_synctask_shard_held_writes Writes one shard's worker has held back after chunk migrations (status.shards[].heldWrites).
# TYPE mongoferry_synctask_shard_held_writes gauge
mongoferry_synctask_shard_held_writes{namespace="NS",shard="rs0",synctask="orders"} 0
mongoferry_synctask_shard_held_writes{namespace="NS",shard="shard0",synctask="users"} 0
mongoferry_synctask_shard_held_writes{namespace="NS",shard="shard1",synctask="users"} 12
# HELP mongoferry_synctask_worker_restarts_total Restarts of the worker container of one worker pod (the pod's status.containerStatuses[].restartCount).
# TYPE mongoferry_synctask_worker_restarts_total counter
mongoferry_synctask_worker_restarts_total{namespace="NS",pod="users-worker-0",synctask="users"} 2
`, `"NS"`, fmt.Sprintf("%q", ns))
}
