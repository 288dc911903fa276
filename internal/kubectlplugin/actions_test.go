package kubectlplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// cutoverModel writes the cut-over's steps into the status as the
// controller does from the workers' reports (status.cutover and the
// CutoverReady and CutoverComplete conditions), once spec.cutover is
// requested, ending at last ("Complete" or "Failed").
func cutoverModel(t *testing.T, ns, name, last string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		task, err := readTask(ns, name)
		if err != nil {
			t.Error(err)
			return
		}
		if task.Spec.Cutover.Requested {
			break
		}
		if time.Now().After(deadline) {
			t.Error("spec.cutover.requested was never set")
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	steps := []string{"CatchingUp", "Draining", "Verifying", "Finalizing", last}
	for _, step := range steps {
		editStatus(t, ns, name, func(st *syncv1alpha1.SyncTaskStatus) {
			if st.Cutover == nil {
				st.Cutover = &syncv1alpha1.CutoverStatus{StartedAt: &metav1.Time{Time: time.Now()}}
			}
			st.Cutover.Step = step
			st.Cutover.CaughtUp = step != "CatchingUp"
			st.Cutover.Message = ""
			complete := metav1.Condition{Type: syncv1alpha1.ConditionCutoverComplete, Status: metav1.ConditionFalse, Reason: step, Message: "at " + step}
			switch step {
			case "Complete":
				st.Cutover.SourcePosition, st.Cutover.TargetPosition = "1795582800,9", "1795582801,2"
				st.Phase = syncv1alpha1.PhaseCompleted
				complete.Status, complete.Reason, complete.Message = metav1.ConditionTrue, "CutoverComplete", "drained, verified and finalized"
			case "Failed":
				st.Cutover.Message = "verification found 2 differing documents in shop.orders"
				complete.Reason, complete.Message = "CutoverFailed", st.Cutover.Message
			}
			meta.SetStatusCondition(&st.Conditions, complete)
		})
	}
}

// TestCutoverWait: cutover sets spec.cutover from its flags, then shows
// every step until CutoverComplete (exit 0) or the failure (an error with
// the workers' message).
func TestCutoverWait(t *testing.T) {
	cases := []struct {
		name, last, wantErr string
		maxLag              string // a duration, or seconds as before
	}{
		{"complete", "Complete", "", "7s"},
		{"failed", "Failed", "the cut-over failed at Failed: verification found 2 differing documents in shop.orders", "7"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := env.Namespace(t)
			task := testTask(ns, "orders")
			task.Status = streaming()
			createTask(t, task)
			done := make(chan struct{})
			go func() { defer close(done); cutoverModel(t, ns, "orders", c.last) }()
			out, err := run(t, ns, "cutover", "orders", "--verify", "count", "--max-lag", c.maxLag, "--wait", "--timeout", "30s")
			<-done
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || err.Error() != c.wantErr) {
				t.Fatalf("cutover: %v, want %q\n%s", err, c.wantErr, out)
			}
			for _, step := range []string{"CatchingUp", "Draining", "Verifying", "Finalizing", c.last} {
				if !strings.Contains(out, "  "+step) {
					t.Errorf("output does not show step %s:\n%s", step, out)
				}
			}
			if c.last == "Complete" && !strings.Contains(out, "cut-over complete: the target holds everything the source wrote; a reverse sync would start at the target's position 1795582801,2") {
				t.Errorf("output:\n%s", out)
			}
			want := config.Cutover{Requested: true, BlockSourceWrites: false, Verify: config.VerifyCount, MaxLagSeconds: 7}
			if got := getTask(t, ns, "orders").Spec.Cutover; got != want {
				t.Errorf("spec.cutover %+v, want %+v", got, want)
			}
		})
	}
}

// TestVerifyWait: verify sets the annotation to a new value and prints the
// streaming pass that finished after the request, with the documents that
// still differ; a request the workers did not
// take (a worker without the endpoint) is an error with its message.
func TestVerifyWait(t *testing.T) {
	finished := metav1.NewTime(fixedNow.Add(time.Second))
	cases := []struct {
		name    string
		answer  func(value string, st *syncv1alpha1.SyncTaskStatus)
		wantOut string
		wantErr string
	}{
		{"passed", func(value string, st *syncv1alpha1.SyncTaskStatus) {
			st.VerifyRequest = &syncv1alpha1.VerifyRequest{Value: value, Time: metav1.Now(), Accepted: true, Message: "1 worker(s) verify"}
			st.StreamingVerification = &syncv1alpha1.StreamingVerification{Passes: 1, Result: syncv1alpha1.VerificationPassed, FinishedAt: &finished,
				Namespaces: 4, NamespacesDone: 4, DocumentsCompared: 1200}
		}, "verification: pass 1 Passed at 2026-11-25T05:00:01Z (0s ago), 1200 document(s) compared, 0 persisting", ""},
		{"differs", func(value string, st *syncv1alpha1.SyncTaskStatus) {
			st.StreamingVerification = &syncv1alpha1.StreamingVerification{Passes: 1, Result: syncv1alpha1.VerificationFailed, FinishedAt: &finished,
				Namespaces: 4, NamespacesDone: 4, DocumentsCompared: 1200, Persisting: 1,
				Findings: []syncv1alpha1.VerificationFinding{{Namespace: "shop.orders", ID: `{"$numberInt":"500"}`, Kind: "changed"}}}
		}, `changed  shop.orders _id {"$numberInt":"500"}`, "the target differs from the source"},
		{"unsupported", func(value string, st *syncv1alpha1.SyncTaskStatus) {
			st.VerifyRequest = &syncv1alpha1.VerifyRequest{Value: value, Time: metav1.Now(), Message: "the workers' image has no /verify endpoint"}
		}, "verification requested", "the workers did not take the request: the workers' image has no /verify endpoint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := env.Namespace(t)
			task := testTask(ns, "orders")
			task.Status = streaming()
			createTask(t, task)
			go func() {
				deadline := time.Now().Add(30 * time.Second)
				for time.Now().Before(deadline) {
					if task, err := readTask(ns, "orders"); err == nil && task.Annotations[syncv1alpha1.VerifyAnnotation] != "" {
						v := task.Annotations[syncv1alpha1.VerifyAnnotation]
						editStatus(t, ns, "orders", func(st *syncv1alpha1.SyncTaskStatus) { c.answer(v, st) })
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}()
			out, err := run(t, ns, "verify", "orders", "--wait", "--timeout", "30s")
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || err.Error() != c.wantErr) {
				t.Fatalf("verify: %v, want %q\n%s", err, c.wantErr, out)
			}
			if !strings.Contains(out, c.wantOut) {
				t.Errorf("output %q, want it to contain %q", out, c.wantOut)
			}
		})
	}
}

// TestReverseCreatesTask: after a completed cut-over, reverse enables
// spec.reverse, and the operator's reconciler (called here) creates the
// reverse task, whose name the command prints.
func TestReverseCreatesTask(t *testing.T) {
	ns := env.Namespace(t)
	task := testTask(ns, "orders")
	task.Status = streaming()
	task.Status.Phase = syncv1alpha1.PhaseCompleted
	task.Status.Cutover = &syncv1alpha1.CutoverStatus{Step: "Complete", TargetPosition: "1795582801,2"}
	task.Status.Conditions = append(task.Status.Conditions, condition(syncv1alpha1.ConditionCutoverComplete, "True", "CutoverComplete", "done", 1))
	createTask(t, task)
	r := &controller.SyncTaskReconciler{Client: env.Client, Scheme: env.Scheme, WorkerImage: "example.org/ferry:test"}
	stop := make(chan struct{})
	reconciled := make(chan struct{})
	go func() {
		defer close(reconciled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			_, _ = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "orders"}})
		}
	}()
	out, err := run(t, ns, "reverse", "orders", "--wait", "--timeout", "30s")
	close(stop)
	<-reconciled
	if err != nil || out != "synctask orders: reverse sync enabled; reverse task: orders-reverse\n" {
		t.Fatalf("reverse: %q, %v", out, err)
	}
	rev := getTask(t, ns, "orders-reverse")
	if rev.Spec.Source.URI != task.Spec.Target.URI || rev.Spec.Target.URI != task.Spec.Source.URI || rev.Spec.Incremental.StartAt != "1795582801,2" {
		t.Errorf("reverse task spec %+v", rev.Spec)
	}
}
