package e2e

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"sigs.k8s.io/yaml"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestOperatorShardedCutover: a SyncTask on a sharded source (the cluster
// stand-in of TestOperatorShardedSource, two FerretDB shards and a
// FerretDB mongos) streams with one worker pod per shard under a live
// load with a chunk migration; the application stops writing (FerretDB
// cannot block writes) and spec.cutover.requested is set. The workers,
// restarted with the new task file, cut over together through the
// checkpoint database: CutoverComplete turns True, status.cutover holds
// both positions and the passed verification, each status.shards entry
// says its shard drained, the task ends Completed with its workers
// stopped, and the target equals the union of the shards.
func TestOperatorShardedCutover(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const name = "fleet-cut"
	c := testserver.StartCluster(t, 2)
	dst := testserver.Start(t)
	const coll = "app.items"
	var seed []bson.D
	var keys []int64
	for k := int64(0); k < 2000; k += 5 {
		seed = append(seed, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}, {Key: "pad", Value: "seed"}})
		keys = append(keys, k)
	}
	if err := c.Insert(ctx, coll, seed...); err != nil {
		t.Fatal(err)
	}
	task := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, FirstIP: "127.0.17.1",
		Reconciler: func(r *controller.SyncTaskReconciler) { r.ShardRefreshInterval = 2 * time.Second },
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: c.RouterURI(), Kind: config.KindSharded, Shards: c.Overrides()},
			Target: syncv1alpha1.Target{URI: dst.URI},
			Verify: config.Verify{Mode: config.VerifyNone},
		},
	})
	load := testserver.NewClusterLoad(c, coll, keys, 2001, 15)
	load.Quiet = -1
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadErr := make(chan error, 1)
	go func() { loadErr <- load.Run(loadCtx, rand.New(rand.NewPCG(17, 1))) }()
	defer stopLoad()
	get := task.get
	waitFor(t, "two workers streaming", 4*time.Minute, func() bool {
		st := get()
		return st.Status.ShardSummary == "2/2 streaming" && st.Status.Phase == syncv1alpha1.PhaseStreaming
	})
	if n, err := load.Move(ctx, 0, 500, 1); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("moved %d documents of [0,500) to shard1", n)
	}
	time.Sleep(3 * time.Second)

	// The application stops writing; the cut-over is requested.
	stopLoad()
	if err := <-loadErr; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("load: %v", err)
	}
	st := task.cutover(config.Cutover{Requested: true, Verify: config.VerifyHash, MaxLagSeconds: 5}, 4*time.Minute)
	if y, err := yaml.Marshal(map[string]any{"cutover": st.Status.Cutover, "shards": st.Status.Shards}); err == nil {
		t.Logf("kubectl get synctask %s -o yaml (status, after the cut-over):\n%s", name, y)
	}
	co := st.Status.Cutover
	if co == nil || co.Step != workerapi.CutoverComplete || !co.CaughtUp || co.SourcePosition == "" || co.TargetPosition == "" ||
		co.Verification == nil || co.Verification.Result != syncv1alpha1.VerificationPassed {
		t.Errorf("status.cutover %+v, want Complete with both positions and a passed verification", co)
	}
	if len(st.Status.Shards) != 2 {
		t.Errorf("status.shards %+v, want two entries", st.Status.Shards)
	}
	for _, s := range st.Status.Shards {
		if !strings.HasPrefix(s.Cutover, "Drained at ") {
			t.Errorf("status.shards[%s].cutover %q, want Drained at its position", s.Name, s.Cutover)
		}
	}
	if !hasReason(taskEvents(t, env.Client, ns, name), syncv1alpha1.ReasonCutoverComplete) {
		t.Error("no CutoverComplete event")
	}
	assertSameDocs(t, c.RouterClient(), coll, dst.MustClient(t), coll)
}
