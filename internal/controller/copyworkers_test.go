package controller

import (
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestCopyWorkers checks the copy-only workers of fullSync.workers 3 on a
// replica-set source: a StatefulSet <name>-copy of two `ferry run
// --copy-only` pods beside the task's worker while the task copies, whose
// pods the task's Service and worker observation do not select, scaled
// to zero once the worker reports it streams; and none for a task with
// fullSync.workers 1.
func TestCopyWorkers(t *testing.T) {
	phase := "FullSync"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"task":"orders","mode":"fullAndIncremental","phase":"` + phase + `","copy":{"stage":"copying"}}`))
	}))
	defer srv.Close()
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)

	ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) {
		st.Spec.MetricsPort = int32(port)
		st.Spec.Source.Kind = config.KindReplicaSet
		st.Spec.FullSync.Workers = 3
	})
	r, rec := newReconciler()
	reconcile(t, r, ns, "orders")
	task := getTask(t, ns, "orders")
	cp := get(t, ns, "orders-copy", &appsv1.StatefulSet{})
	checkOwned(t, cp, task)
	if cp.Spec.Replicas == nil || *cp.Spec.Replicas != 2 {
		t.Fatalf("copy workers: replicas %v, want 2 (fullSync.workers 3 less the task's worker)", cp.Spec.Replicas)
	}
	c := cp.Spec.Template.Spec.Containers[0]
	if !slices.Contains(c.Args, workerapi.FlagCopyOnly) || slices.Contains(c.Args, workerapi.FlagDiscoverInterval) {
		t.Errorf("copy worker args %q, want %s and no discovery", c.Args, workerapi.FlagCopyOnly)
	}
	for k, v := range selectorLabels(task) {
		if cp.Spec.Template.Labels[k] != v {
			continue
		}
		if k != TaskLabel {
			t.Errorf("copy worker pods carry %s=%s: the task's Service and worker observation would take them for its workers", k, v)
		}
	}
	if *cp.Spec.Template.Spec.SecurityContext.RunAsNonRoot != true || *c.SecurityContext.ReadOnlyRootFilesystem != true {
		t.Error("copy worker pods run without the workers' restricted security context")
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Normal", "CopyWorkersCreated") {
		t.Errorf("events %q, want CopyWorkersCreated", evs)
	}

	// The worker reports the copy, then streaming: the copy workers stop
	// at the reconcile after the status says so.
	runWorkerPod(t, ns, "orders")
	reconcile(t, r, ns, "orders")
	if n := *get(t, ns, "orders-copy", &appsv1.StatefulSet{}).Spec.Replicas; n != 2 {
		t.Errorf("while the worker copies: copy workers %d, want 2", n)
	}
	phase = "Streaming"
	reconcile(t, r, ns, "orders")
	reconcile(t, r, ns, "orders")
	if p := getTask(t, ns, "orders").Status.Phase; p != syncv1alpha1.PhaseStreaming {
		t.Fatalf("phase %s, want Streaming", p)
	}
	if n := *get(t, ns, "orders-copy", &appsv1.StatefulSet{}).Spec.Replicas; n != 0 {
		t.Errorf("streaming: copy workers %d, want 0", n)
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Normal", "CopyWorkersStopped") {
		t.Errorf("events %q, want CopyWorkersStopped", evs)
	}

	// One worker: no copy StatefulSet at all.
	ns1 := setup(t, "single", func(st *syncv1alpha1.SyncTask) { st.Spec.Source.Kind = config.KindReplicaSet })
	reconcile(t, r, ns1, "single")
	err := env.Client.Get(testCtx(t), types.NamespacedName{Namespace: ns1, Name: "single-copy"}, &appsv1.StatefulSet{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("fullSync.workers 1: get single-copy: %v, want not found", err)
	}
}

// TestCopyReplicas is copyReplicas' table: copy-only workers only while a
// task that copies in one process copies, and runs.
func TestCopyReplicas(t *testing.T) {
	replicaSet := discovery{known: true}
	for _, tc := range []struct {
		name    string
		workers int
		mode    config.Mode
		phase   syncv1alpha1.Phase
		running int32
		d       discovery
		want    int32
	}{
		{"pending", 3, config.ModeFullAndIncremental, syncv1alpha1.PhasePending, 1, replicaSet, 2},
		{"copying", 4, config.ModeFull, syncv1alpha1.PhaseFullSync, 1, replicaSet, 3},
		{"streaming", 3, config.ModeFullAndIncremental, syncv1alpha1.PhaseStreaming, 1, replicaSet, 0},
		{"one worker", 1, config.ModeFull, syncv1alpha1.PhaseFullSync, 1, replicaSet, 0},
		{"suspended or done", 3, config.ModeFull, syncv1alpha1.PhaseFullSync, 0, replicaSet, 0},
		{"incremental", 3, config.ModeIncremental, syncv1alpha1.PhasePending, 1, replicaSet, 0},
		{"source not known yet", 3, config.ModeFullAndIncremental, syncv1alpha1.PhasePending, 1, discovery{}, 0},
		{"sharded, replayed per shard", 3, config.ModeFullAndIncremental, syncv1alpha1.PhaseFullSync, 3, discovery{known: true, sharded: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := newTask("ns", "t")
			task.Spec.FullSync.Workers, task.Spec.Mode = tc.workers, tc.mode
			if got := copyReplicas(task, tc.phase, tc.running, tc.d); got != tc.want {
				t.Errorf("copyReplicas = %d, want %d", got, tc.want)
			}
		})
	}
}
