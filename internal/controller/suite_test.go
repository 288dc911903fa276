package controller

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// env is one control plane for every test of the package; each test works
// in its own namespace. The reconciler is called directly (no manager), so
// each test sees exactly what one reconcile does.
var env *envtestutil.Env

func TestMain(m *testing.M) {
	os.Exit(envtestutil.RunTests(m, func(e *envtestutil.Env) { env = e }))
}

const testImage = "ghcr.io/mongoferry/mongoferry:test"

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return c
}

// newReconciler returns a reconciler on the test control plane with a
// recorder the test reads.
func newReconciler() (*SyncTaskReconciler, *events.FakeRecorder) {
	rec := events.NewFakeRecorder(100)
	// No worker pod runs here, so none reports a topology: every task runs
	// one worker unless a test sets ReadTopology.
	return &SyncTaskReconciler{Client: env.Client, Scheme: env.Scheme, Recorder: rec, WorkerImage: testImage}, rec
}

// reconcile runs one reconcile of a task.
func reconcile(t *testing.T, r *SyncTaskReconciler, ns, name string) ctrl.Result {
	t.Helper()
	res, err := r.Reconcile(testCtx(t), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
	if err != nil {
		t.Fatalf("reconcile %s/%s: %v", ns, name, err)
	}
	return res
}

func createSecret(t *testing.T, ns, name, user, password string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data: map[string][]byte{UsernameKey: []byte(user), PasswordKey: []byte(password)}}
	if err := env.Client.Create(testCtx(t), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// newTask returns a SyncTask whose source and target credentials are in
// the Secrets src-creds and dst-creds.
func newTask(ns, name string) *syncv1alpha1.SyncTask {
	return &syncv1alpha1.SyncTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: "mongodb://src-0.mongo:27017/?replicaSet=rs0", CredentialsSecret: "src-creds"},
			Target: syncv1alpha1.Target{URI: "mongodb://dst.mongo:27017/", CredentialsSecret: "dst-creds"},
		},
	}
}

func createTask(t *testing.T, task *syncv1alpha1.SyncTask) {
	t.Helper()
	if err := env.Client.Create(testCtx(t), task); err != nil {
		t.Fatal(err)
	}
}

func getTask(t *testing.T, ns, name string) *syncv1alpha1.SyncTask {
	t.Helper()
	var task syncv1alpha1.SyncTask
	if err := env.Client.Get(testCtx(t), types.NamespacedName{Namespace: ns, Name: name}, &task); err != nil {
		t.Fatal(err)
	}
	return &task
}

// updateTask changes a task's spec, retrying on conflicts.
func updateTask(t *testing.T, ns, name string, edit func(*syncv1alpha1.SyncTask)) {
	t.Helper()
	for range 10 {
		task := getTask(t, ns, name)
		edit(task)
		err := env.Client.Update(testCtx(t), task)
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "the object has been modified") {
			t.Fatal(err)
		}
	}
	t.Fatal("update: conflicts")
}

// drainEvents returns the events recorded so far ("Type Reason note").
func drainEvents(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// hasEvent reports whether one of the events has the type and reason.
func hasEvent(evs []string, kind, reason string) bool {
	for _, e := range evs {
		if strings.HasPrefix(e, kind+" "+reason+" ") {
			return true
		}
	}
	return false
}
