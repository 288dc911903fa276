package controller

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

// streamingWorker serves a streaming worker's /status and answers
// POST /verify with verifyCode (0: no such endpoint, 404 as a worker
// built before it), counting the POSTs.
func streamingWorker(t *testing.T, verifyCode int, posts *atomic.Int32) int32 {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/status":
			_, _ = w.Write([]byte(`{"task":"v","mode":"fullAndIncremental","phase":"Streaming","copy":{"stage":"done","percent":100},
			  "replay":{"appliedTS":{"T":1700000000,"I":3},"lagSeconds":0,"opsPerSecond":3}}`))
		case r.URL.Path == "/verify" && r.Method == http.MethodPost && verifyCode != 0:
			posts.Add(1)
			w.WriteHeader(verifyCode)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return int32(p)
}

// runWorkerPod creates the task's worker pod as the StatefulSet controller
// and a kubelet would, running at 127.0.0.1.
func runWorkerPod(t *testing.T, ns, task string) {
	t.Helper()
	sts := get(t, ns, task+"-worker", &appsv1.StatefulSet{})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: task + "-worker-0", Labels: sts.Spec.Template.Labels}, Spec: sts.Spec.Template.Spec}
	if err := env.Client.Create(testCtx(t), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: WorkerContainer, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	if err := env.Client.Status().Update(testCtx(t), pod); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyAnnotation: a new value of the verify annotation on a
// streaming task is sent to its worker as POST /verify once, the value
// acted on is recorded in status.verifyRequest with what the worker
// answered, and an event tells it. A worker without the endpoint (404) is
// a warning and a message, not a failure of the task.
func TestVerifyAnnotation(t *testing.T) {
	cases := []struct {
		name       string
		code       int
		accepted   bool
		reason     string
		inMessage  string
		eventClass string
	}{
		{"accepted", http.StatusAccepted, true, "VerificationRequested", "the report goes to status.streamingVerification", corev1.EventTypeNormal},
		{"no-endpoint", 0, false, "VerificationUnsupported", "has no /verify endpoint", corev1.EventTypeWarning},
		{"refused", http.StatusConflict, false, "VerificationRequestFailed", "409 Conflict", corev1.EventTypeWarning},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var posts atomic.Int32
			port := streamingWorker(t, c.code, &posts)
			ns := setup(t, c.name, func(st *syncv1alpha1.SyncTask) { st.Spec.MetricsPort = port })
			r, rec := newReconciler()
			reconcile(t, r, ns, c.name)
			runWorkerPod(t, ns, c.name)
			reconcile(t, r, ns, c.name)
			if p := getTask(t, ns, c.name).Status.Phase; p != syncv1alpha1.PhaseStreaming {
				t.Fatalf("phase %s, want Streaming", p)
			}
			drainEvents(rec)
			for _, value := range []string{"1", "1", "2"} {
				updateTask(t, ns, c.name, func(st *syncv1alpha1.SyncTask) {
					metav1.SetMetaDataAnnotation(&st.ObjectMeta, syncv1alpha1.VerifyAnnotation, value)
				})
				reconcile(t, r, ns, c.name)
				vr := getTask(t, ns, c.name).Status.VerifyRequest
				if vr == nil || vr.Value != value || vr.Accepted != c.accepted || !strings.Contains(vr.Message, c.inMessage) {
					t.Fatalf("after %s=%s: status.verifyRequest %+v, want value %s, accepted %v, a message with %q", syncv1alpha1.VerifyAnnotation, value, vr, value, c.accepted, c.inMessage)
				}
			}
			if want := int32(2); c.code != 0 && posts.Load() != want {
				t.Errorf("POST /verify %d times for the values 1, 1, 2; want %d", posts.Load(), want)
			}
			evs := drainEvents(rec)
			n := 0
			for _, e := range evs {
				if strings.HasPrefix(e, c.eventClass+" "+c.reason+" ") {
					n++
				}
			}
			if n != 2 {
				t.Errorf("events %q, want two %s %s", evs, c.eventClass, c.reason)
			}
			st := getTask(t, ns, c.name).Status
			if st.Phase != syncv1alpha1.PhaseStreaming || st.Failures != 0 {
				t.Errorf("phase %s, failures %d: a verification request must not fail the task", st.Phase, st.Failures)
			}
		})
	}
}

// TestVerifyAnnotationWhenNotStreaming: during the copy the request waits
// for the stream; on a suspended task it is recorded as not acted on.
func TestVerifyAnnotationWhenNotStreaming(t *testing.T) {
	ns := setup(t, "paused", func(st *syncv1alpha1.SyncTask) {
		st.Spec.Suspend = true
		st.Annotations = map[string]string{syncv1alpha1.VerifyAnnotation: "now"}
	})
	r, rec := newReconciler()
	reconcile(t, r, ns, "paused")
	vr := getTask(t, ns, "paused").Status.VerifyRequest
	if vr == nil || vr.Value != "now" || vr.Accepted || !strings.Contains(vr.Message, "not acted on: the task is Paused") {
		t.Errorf("status.verifyRequest %+v", vr)
	}
	if evs := drainEvents(rec); !hasEvent(evs, corev1.EventTypeWarning, "VerificationNotRequested") {
		t.Errorf("events %q, want VerificationNotRequested", evs)
	}
}
