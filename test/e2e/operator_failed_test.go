package e2e

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// TestOperatorFailedVerificationStops: a mode: full SyncTask whose
// verification finds a difference (the target holds a document the source
// has not) ends Failed with no worker pod, one failure counted, and no
// further verification (the worker would otherwise restart into another
// full hash of both databases). Once the difference is removed, the retry
// annotation runs it again from its checkpoint: it verifies and completes.
func TestOperatorFailedVerificationStops(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const name = "audit"
	src := testserver.Start(t, testserver.Options{Host: "127.0.0.6"})
	dst := testserver.Start(t, testserver.Options{Host: "127.0.0.7"})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	if _, err := workload.Load(ctx, sc, workload.Options{Database: "shop", Collection: "orders", RecordCount: 300, FieldCount: 3, FieldLength: 20, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	stray := bson.D{{Key: "_id", Value: "stray"}, {Key: "note", Value: "only on the target"}}
	if _, err := dc.Database("shop").Collection("orders").InsertOne(ctx, stray); err != nil {
		t.Fatal(err)
	}
	task := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, FirstIP: "127.0.13.1",
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:     config.ModeFull,
			Source:   syncv1alpha1.Source{URI: src.URI},
			Target:   syncv1alpha1.Target{URI: dst.URI},
			FullSync: config.FullSync{OnConflict: config.ConflictOverwrite},
			Verify:   config.Verify{Mode: config.VerifyHash},
		},
	})
	get := task.get
	waitFor(t, "Failed with no worker pod", 3*time.Minute, func() bool {
		st := get()
		return st.Status.Phase == syncv1alpha1.PhaseFailed && len(workerPods(t, env.Client, ns, name)) == 0
	})
	t.Logf("kubectl get synctasks -o wide (failed):\n%s", syncTaskTable(t, env.Config, ns, true))
	// Nothing more runs: no pod comes back, no failure is added.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if pods := workerPods(t, env.Client, ns, name); len(pods) > 0 {
			t.Fatalf("a failed task started worker pod %s again", pods[0].Name)
		}
		time.Sleep(time.Second)
	}
	st := get()
	if st.Status.Failures != 1 || st.Status.LastFailure == nil || st.Status.LastFailure.Reason != syncv1alpha1.ReasonVerificationFailed {
		t.Errorf("failures %d, last %+v; want 1, VerificationFailed", st.Status.Failures, st.Status.LastFailure)
	}
	if c := meta.FindStatusCondition(st.Status.Conditions, syncv1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue || c.Reason != syncv1alpha1.ReasonVerificationFailed {
		t.Errorf("Degraded = %+v, want True/VerificationFailed", c)
	}
	if !hasReason(taskEvents(t, env.Client, ns, name), "WorkersStopped") {
		t.Error("no WorkersStopped event")
	}

	// Fixed on the target; run it again without changing the spec.
	if _, err := dc.Database("shop").Collection("orders").DeleteOne(ctx, bson.D{{Key: "_id", Value: "stray"}}); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(st.DeepCopy())
	st.Annotations = map[string]string{syncv1alpha1.RetryAnnotation: "1"}
	if err := env.Client.Patch(ctx, st, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Completed after the retry", 3*time.Minute, func() bool {
		st = get()
		return st.Status.Phase == syncv1alpha1.PhaseCompleted && len(workerPods(t, env.Client, ns, name)) == 0
	})
	t.Logf("kubectl get synctasks -o wide (retried):\n%s", syncTaskTable(t, env.Config, ns, true))
	if st.Status.LastRetry != "1" || st.Status.Failures != 1 {
		t.Errorf("lastRetry %q, failures %d; want 1, 1", st.Status.LastRetry, st.Status.Failures)
	}
	if v := st.Status.LastVerification; v == nil || v.Result != syncv1alpha1.VerificationPassed {
		t.Errorf("lastVerification %+v, want Passed", v)
	}
	if !hasReason(taskEvents(t, env.Client, ns, name), "Retrying") {
		t.Error("no Retrying event")
	}
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
}
