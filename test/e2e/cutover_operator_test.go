package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// TestOperatorCutover: a streaming SyncTask under live load; the cut-over
// is requested with blockSourceWrites, and the application goes on
// writing until the block stops it. The source is reached, by the worker
// and by the application, through wiresim.WriteBlockProxy, which stands in
// for MongoDB 6.0's user write blocking in front of FerretDB. The worker,
// restarted with the new task file, resumes from its checkpoint, blocks
// the source's writes, drains, verifies and completes: the
// CutoverComplete condition turns True (what `kubectl wait
// --for=condition=CutoverComplete` waits for) and says the source's
// writes stay blocked, status.cutover holds both positions, the
// verification and writesBlocked, the phase is Completed with the worker
// stopped, and the target equals the source.
func TestOperatorCutover(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const name = "moving"
	src, dst := testserver.Start(t), testserver.Start(t)
	proxy, app := writeBlockProxy(t, src.Addr)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 1500, FieldCount: 4, FieldLength: 30, Seed: 21}
	if _, err := workload.Load(ctx, app, base); err != nil {
		t.Fatal(err)
	}
	task := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, FirstIP: "127.0.18.1",
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: proxy.URI()},
			Target: syncv1alpha1.Target{URI: dst.URI},
			Verify: config.Verify{Mode: config.VerifyNone},
		},
	})
	stopLoad := startLoad(app, base, 20)
	defer stopLoad()
	get := task.get
	waitFor(t, "Streaming under load", 3*time.Minute, func() bool {
		st := get().Status
		return st.Phase == syncv1alpha1.PhaseStreaming && st.OpsPerSecond > 0
	})

	// The cut-over is requested while the application writes; the block
	// stops its writes. kubectl wait --for=condition=CutoverComplete
	st := task.cutover(config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyHash, MaxLagSeconds: 5}, 3*time.Minute)
	stopLoad()
	if y, err := yaml.Marshal(map[string]any{"cutover": st.Status.Cutover, "conditions": st.Status.Conditions}); err == nil {
		t.Logf("kubectl get synctask %s -o yaml (status, after the cut-over):\n%s", name, y)
	}
	co := st.Status.Cutover
	if co == nil || co.Step != workerapi.CutoverComplete || !co.CaughtUp || co.SourcePosition == "" || co.TargetPosition == "" || co.FinishedAt == nil ||
		co.Verification == nil || co.Verification.Result != syncv1alpha1.VerificationPassed || !co.WritesBlocked {
		t.Errorf("status.cutover %+v, want Complete with both positions, a passed verification and writes blocked", co)
	}
	if c := meta.FindStatusCondition(st.Status.Conditions, syncv1alpha1.ConditionCutoverComplete); c == nil || !strings.Contains(c.Message, "writes on the source stay blocked") {
		t.Errorf("CutoverComplete = %+v, want a message that says the source's writes stay blocked", c)
	}
	if !proxy.Blocked() {
		t.Error("the source's writes are not blocked after the cut-over")
	}
	if c := meta.FindStatusCondition(st.Status.Conditions, syncv1alpha1.ConditionCutoverReady); c == nil || c.Status != metav1.ConditionTrue || c.Reason != syncv1alpha1.ReasonCaughtUp {
		t.Errorf("CutoverReady = %+v, want True/CaughtUp", c)
	}
	if !hasReason(taskEvents(t, env.Client, ns, name), syncv1alpha1.ReasonCutoverComplete) {
		t.Error("no CutoverComplete event")
	}
	if rec := taskRecord(t, dc, name); rec.Cutover == nil || rec.Cutover.Step != workerapi.CutoverComplete {
		t.Errorf("checkpoint record's cut-over %+v", rec.Cutover)
	}
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
}
