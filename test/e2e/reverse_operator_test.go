package e2e

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestOperatorReverse: after a cut-over, the reverse SyncTask the
// controller creates for spec.reverse runs (the pod runner's worker) and
// carries writes made on the new deployment back to the old one, from the
// target position recorded at cut-over: a write after it arrives, a write
// before it does not.
//
// The cut-over itself is not run here: its end is written into the
// status as the controller records it from the workers (status.cutover
// with the target's newest oplog position, CutoverComplete True), after
// the forward task was suspended, as a completed task's workers are
// stopped.
func TestOperatorReverse(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	oldDep, newDep := testserver.Start(t), testserver.Start(t)
	oc, nc := oldDep.MustClient(t), newDep.MustClient(t)
	docs := make([]any, 300)
	for i := range docs {
		docs[i] = doc("_id", int32(i), "v", int32(0))
	}
	insertDocs(t, oc, "app", "c", docs)
	const name = "move"
	startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, FirstIP: "127.0.20.101",
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:    config.ModeFullAndIncremental,
			Source:  syncv1alpha1.Source{URI: oldDep.URI},
			Target:  syncv1alpha1.Target{URI: newDep.URI},
			Reverse: &syncv1alpha1.Reverse{Enabled: true},
		},
	})
	get := func(name string) *syncv1alpha1.SyncTask {
		var st syncv1alpha1.SyncTask
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &st); err != nil {
			return nil
		}
		return &st
	}
	waitCaughtUp(t, env.Client, oc, ns, name)
	assertSameDocs(t, oc, "app.c", nc, "app.c")
	setSuspend(t, env.Client, ns, name, true)
	waitFor(t, "the forward task's worker to stop", 2*time.Minute, func() bool {
		return len(workerPods(t, env.Client, ns, name)) == 0 && get(name).Status.Phase == syncv1alpha1.PhasePaused
	})
	if get(name+"-reverse") != nil {
		t.Fatal("a reverse task exists before the cut-over completed")
	}

	app := nc.Database("app").Collection("c")
	if _, err := app.InsertOne(ctx, doc("_id", "before-cutover")); err != nil {
		t.Fatal(err)
	}
	pos := config.FormatPosition(newestTS(t, nc))
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		st := get(name)
		st.Status.Cutover = &syncv1alpha1.CutoverStatus{Step: "Complete", CaughtUp: true, TargetPosition: pos}
		meta.SetStatusCondition(&st.Status.Conditions, metav1.Condition{Type: syncv1alpha1.ConditionCutoverComplete, Status: metav1.ConditionTrue,
			Reason: "CutoverComplete", Message: "drained, verified and finalized", ObservedGeneration: st.Generation})
		return env.Client.Status().Update(ctx, st)
	})
	if err != nil {
		t.Fatal(err)
	}
	// A status write does not wake the controller; its own cut-over
	// reconcile would. A label does.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		st := get(name)
		metav1.SetMetaDataLabel(&st.ObjectMeta, "example.org/cutover", "done")
		return env.Client.Update(ctx, st)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The application writes to the new deployment.
	if _, err := app.InsertOne(ctx, doc("_id", "after-cutover", "v", int32(1))); err != nil {
		t.Fatal(err)
	}
	if _, err := app.UpdateOne(ctx, doc("_id", int32(7)), doc("$set", doc("v", int32(9)))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "status.reverseTask", time.Minute, func() bool { return get(name).Status.ReverseTask == name+"-reverse" })
	rev := get(name + "-reverse")
	if rev.Spec.Incremental.StartAt != pos || rev.Spec.Source.URI != newDep.URI || rev.Spec.Target.URI != oldDep.URI {
		t.Fatalf("reverse task spec: startAt %s (want %s), %s -> %s", rev.Spec.Incremental.StartAt, pos, rev.Spec.Source.URI, rev.Spec.Target.URI)
	}
	waitFor(t, "the writes after the cut-over on the old deployment", 3*time.Minute, func() bool {
		got := docsByID(t, oc, "app", "c")
		_, after := got[idKey(t, "after-cutover")]
		return after && got[idKey(t, int32(7))].Lookup("v").Int32() == 9
	})
	want := docsByID(t, nc, "app", "c")
	delete(want, idKey(t, "before-cutover"))
	if d := diffDocs(want, docsByID(t, oc, "app", "c"), "old deployment"); d != "" {
		t.Errorf("the old deployment is not the new one's documents but the one written before the cut-over position:\n%s", d)
	}
	if p := get(name + "-reverse").Status.Phase; p != syncv1alpha1.PhaseStreaming {
		t.Errorf("reverse task phase %s, want Streaming", p)
	}
}
