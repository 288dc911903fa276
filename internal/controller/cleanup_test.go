package controller

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// TestDeleteRemovesCheckpoint: with deletePolicy Delete, deleting a task
// stops its workers, removes its records (and only its records) from the
// target's checkpoint database, with the credentials from the target's
// Secret, and then lets the deletion finish.
func TestDeleteRemovesCheckpoint(t *testing.T) {
	const user, password = "ferry", "pw-Targ:et@1"
	dst := testserver.Start(t, testserver.Options{Username: user, Password: password})
	ns := env.Namespace(t)
	createSecret(t, ns, "dst-creds", user, password)
	task := newTask(ns, "orders")
	task.Spec.Source = syncv1alpha1.Source{URI: "mongodb://src.invalid:27017/"}
	task.Spec.Target.URI = dst.URI
	task.Spec.DeletePolicy = syncv1alpha1.DeleteDelete
	createTask(t, task)
	r, rec := newReconciler()
	reconcile(t, r, ns, "orders")

	ctx := context.Background()
	dc := dst.MustClient(t)
	for _, name := range []string{"orders", "other"} {
		if _, err := checkpoint.NewStore(dc, "mongoferry", name).Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Delete(testCtx(t), getTask(t, ns, "orders")); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, ns, "orders")
	if sts := get(t, ns, "orders-worker", &appsv1.StatefulSet{}); *sts.Spec.Replicas != 0 {
		t.Errorf("workers still wanted (%d) while the checkpoint is removed", *sts.Spec.Replicas)
	}
	err := env.Client.Get(testCtx(t), types.NamespacedName{Namespace: ns, Name: "orders"}, &syncv1alpha1.SyncTask{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the SyncTask is still there after the cleanup: %v; events %q", err, drainEvents(rec))
	}
	if _, err := checkpoint.NewStore(dc, "mongoferry", "orders").Task(ctx); err == nil {
		t.Error("the task's checkpoint is still on the target")
	}
	if _, err := checkpoint.NewStore(dc, "mongoferry", "other").Task(ctx); err != nil {
		t.Errorf("another task's checkpoint was removed: %v", err)
	}
	if evs := drainEvents(rec); !hasEvent(evs, "Normal", "CheckpointDeleted") {
		t.Errorf("events %q, want CheckpointDeleted", evs)
	}
}

// TestDeleteWithUnreachableTarget: the deletion waits and says why;
// switching deletePolicy to Retain lets it finish.
func TestDeleteWithUnreachableTarget(t *testing.T) {
	ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) {
		st.Spec.Target.URI = "mongodb://127.0.0.1:1/?connectTimeoutMS=500&serverSelectionTimeoutMS=500"
		st.Spec.DeletePolicy = syncv1alpha1.DeleteDelete
	})
	r, rec := newReconciler()
	reconcile(t, r, ns, "orders")
	if err := env.Client.Delete(testCtx(t), getTask(t, ns, "orders")); err != nil {
		t.Fatal(err)
	}
	if res := reconcile(t, r, ns, "orders"); res.RequeueAfter != cleanupRetry {
		t.Errorf("requeue after %s, want %s", res.RequeueAfter, cleanupRetry)
	}
	evs := drainEvents(rec)
	if !hasEvent(evs, "Warning", "CheckpointCleanupFailed") {
		t.Fatalf("events %q, want CheckpointCleanupFailed", evs)
	}
	for _, e := range evs {
		if strings.Contains(e, dstPassword) {
			t.Errorf("event contains the password: %s", e)
		}
		if strings.Contains(e, "CheckpointCleanupFailed") && !strings.Contains(e, "set spec.deletePolicy to Retain") {
			t.Errorf("event does not say how to get out: %s", e)
		}
	}
	getTask(t, ns, "orders") // still there

	updateTask(t, ns, "orders", func(st *syncv1alpha1.SyncTask) { st.Spec.DeletePolicy = syncv1alpha1.DeleteRetain })
	reconcile(t, r, ns, "orders")
	err := env.Client.Get(testCtx(t), types.NamespacedName{Namespace: ns, Name: "orders"}, &syncv1alpha1.SyncTask{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("deletion did not finish with deletePolicy Retain: %v", err)
	}
}
