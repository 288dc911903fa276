package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/kubectlplugin"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// TestKubectlPlugin runs `kubectl mongoferry` against a SyncTask that the
// operator runs for real (envtest's API server, the controller in this
// process, the pod runner's `ferry run` worker, two FerretDB servers, a
// live load of about 10 operations per second), as a user would: status
// while streaming (the output shown in docs/operator.md), logs with each line
// prefixed by its pod (through the API server's pods/log, which the pod
// runner's kubelet stand-in answers), verify (one streaming pass on
// demand), reverse before any cut-over (refused), suspend and resume
// (the worker goes and comes back), and the cut-over under live load:
// refused with the fix when it asks FerretDB to block writes, requested
// again without, caught up, drained, verified, complete, the target equal
// to the source; then reverse, which carries a later write on the new
// deployment back to the old one.
func TestKubectlPlugin(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	src, dst := testserver.Start(t), testserver.Start(t)
	sc := src.MustClient(t)
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 2000, FieldCount: 5, FieldLength: 40, Seed: 16}
	if _, err := workload.Load(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	const name = "orders"
	get := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, FirstIP: "127.0.20.1",
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: src.URI},
			Target: syncv1alpha1.Target{URI: dst.URI},
		},
	}).get
	plugin := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := kubectlplugin.NewCommand(kubectlplugin.Options{Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}})
		cmd.SetArgs(append(args, "--kubeconfig", kubeconfig, "-n", ns))
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		err := cmd.ExecuteContext(cctx)
		return out.String(), err
	}

	// A live load of about 10 operations per second while streaming.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		run := base
		run.Workload, run.Threads, run.Rate, run.Distribution = workload.WorkloadMixed, 1, 10, workload.Uniform
		run.InsertProportion, run.UpdateProportion, run.DeleteProportion = 0.4, 0.4, 0.2
		_, _ = workload.Run(loadCtx, sc, run)
	})
	defer func() { stopLoad(); wg.Wait() }()
	waitFor(t, "phase Streaming with changes applied", 3*time.Minute, func() bool {
		st := get().Status
		return st.Phase == syncv1alpha1.PhaseStreaming && st.CheckpointTime != nil && st.OpsPerSecond > 0
	})
	out, err := plugin("status", name)
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	t.Logf("kubectl mongoferry status %s:\n%s", name, out)
	for _, want := range []string{"Phase:      Streaming (mode fullAndIncremental)", "[##############################] 100%",
		"orders-worker-0", "Ready", "Cut-over:\n  not requested (kubectl mongoferry cutover orders)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q", want)
		}
	}

	stopLoad()
	wg.Wait()
	out, err = plugin("logs", name)
	if err != nil || !strings.Contains(out, "[orders-worker-0] ") || !strings.Contains(out, `"phase":"Streaming"`) {
		t.Errorf("logs: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rec, ok := strings.CutPrefix(line, "[orders-worker-0] ")
		if !ok {
			t.Errorf("log line without its pod: %q", line)
			break
		}
		if err := logRecordCheck(rec); err != nil {
			t.Errorf("log line %q: %v", line, err)
			break
		}
	}

	// Verification on demand: the worker runs one streaming pass.
	out, err = plugin("verify", name, "--wait", "--timeout", "100s")
	if err != nil || !strings.Contains(out, "verification: pass 1 Passed") {
		t.Errorf("verify: %v\n%s", err, out)
	}
	if vr := get().Status.VerifyRequest; vr == nil || !vr.Accepted {
		t.Errorf("status.verifyRequest %+v: want the request taken", vr)
	}

	if _, err := plugin("reverse", name); err == nil || !strings.Contains(err.Error(), "its cut-over has not been requested") {
		t.Errorf("reverse before the cut-over: %v", err)
	}

	if out, err := plugin("suspend", name); err != nil || out != "synctask orders suspended\n" {
		t.Fatalf("suspend: %q, %v", out, err)
	}
	waitFor(t, "phase Paused with no worker", 2*time.Minute, func() bool {
		return get().Status.Phase == syncv1alpha1.PhasePaused && len(workerPods(t, env.Client, ns, name)) == 0
	})
	if _, err := plugin("cutover", name); err == nil || !strings.Contains(err.Error(), "SyncTask orders is suspended: a cut-over starts from a streaming task") {
		t.Errorf("cutover while suspended: %v", err)
	}
	if out, err := plugin("resume", name); err != nil || out != "synctask orders resumed\n" {
		t.Fatalf("resume: %q, %v", out, err)
	}
	waitFor(t, "the resumed worker to stream", 3*time.Minute, func() bool {
		return get().Status.Phase == syncv1alpha1.PhaseStreaming && len(workerPods(t, env.Client, ns, name)) == 1
	})

	// The cut-over under live load. FerretDB has no setUserWriteBlockMode:
	// blocking source writes fails with the fix in the message. Without
	// blocking, the application (the load here) stops writing first, as
	// the runbook says, and the cut-over requested right after catches up
	// with what it wrote, drains, verifies and finalizes. (Writes after
	// the drain position would make the verification fail, and the
	// cut-over with it: TestCutoverWritesAfterDrain.)
	loadCtx, stopLoad = context.WithCancel(ctx)
	wg.Go(func() {
		run := base
		run.Workload, run.Threads, run.Rate, run.Distribution = workload.WorkloadMixed, 1, 10, workload.Uniform
		run.InsertProportion, run.UpdateProportion, run.DeleteProportion = 0.4, 0.4, 0.2
		_, _ = workload.Run(loadCtx, sc, run)
	})
	out, err = plugin("cutover", name, "--block-source-writes", "--max-lag", "10", "--wait", "--timeout", "100s")
	if err == nil || !strings.Contains(err.Error(), "blockSourceWrites: false") {
		t.Fatalf("cutover with blocked writes on FerretDB: %v, want the fix named\n%s", err, out)
	}
	stopLoad() // the application stops writing to the source
	wg.Wait()
	out, err = plugin("cutover", name, "--max-lag", "10", "--wait", "--timeout", "110s")
	t.Logf("kubectl mongoferry cutover %s --wait:\n%s", name, out)
	if err != nil || !strings.Contains(out, "cut-over complete") {
		t.Fatalf("cutover: %v\n%s", err, out)
	}
	done := get()
	if c := done.Status.Cutover; done.Status.Phase != syncv1alpha1.PhaseCompleted || c == nil || c.TargetPosition == "" ||
		c.Verification == nil || c.Verification.Result != syncv1alpha1.VerificationPassed {
		t.Errorf("after the cut-over: phase %s, status.cutover %+v", done.Status.Phase, c)
	}
	verifySame(t, sc, dst.MustClient(t))

	// Reverse sync: a write on the new deployment reaches the old one.
	out, err = plugin("reverse", name, "--wait", "--timeout", "100s")
	if err != nil || !strings.Contains(out, "orders-reverse") {
		t.Fatalf("reverse: %v\n%s", err, out)
	}
	dc := dst.MustClient(t)
	if _, err := dc.Database("shop").Collection("orders").InsertOne(ctx, bson.D{{Key: "_id", Value: "after-cutover"}, {Key: "v", Value: int32(1)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the write on the new deployment to reach the old one", 3*time.Minute, func() bool {
		n, err := sc.Database("shop").Collection("orders").CountDocuments(ctx, bson.D{{Key: "_id", Value: "after-cutover"}})
		return err == nil && n == 1
	})
}
