package kubectlplugin

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// The tests run the plugin's commands against a real API server (envtest)
// through a kubeconfig file, as kubectl runs a plugin. No controller runs
// unless a test says so: where a command waits on what the operator
// writes, the test writes that status itself, in the shapes the
// controller writes (internal/controller/status.go), or calls the real
// reconciler.

var (
	env        *envtestutil.Env
	kubeconfig string
)

func TestMain(m *testing.M) {
	os.Exit(envtestutil.RunTests(m, func(e *envtestutil.Env) {
		env = e
		dir, err := os.MkdirTemp("", "kubectl-mongoferry-")
		if err != nil {
			panic(err)
		}
		kubeconfig = filepath.Join(dir, "kubeconfig")
		if err := e.WriteKubeconfig(kubeconfig); err != nil {
			panic(err)
		}
	}))
}

// fixedNow is the clock of status outputs compared with golden files.
var fixedNow = time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)

// run runs `kubectl mongoferry ARGS -n ns` and returns its output.
func run(t *testing.T, ns string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := NewCommand(Options{Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}, Now: func() time.Time { return fixedNow }})
	cmd.SetArgs(append(args, "--kubeconfig", kubeconfig, "-n", ns))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func testTask(ns, name string) *syncv1alpha1.SyncTask {
	return &syncv1alpha1.SyncTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: "mongodb://src-0.mongo:27017/?replicaSet=rs0", CredentialsSecret: "src-creds"},
			Target: syncv1alpha1.Target{URI: "mongodb://dst.mongo:27017/", CredentialsSecret: "dst-creds"},
		},
	}
}

// createTask creates a task and writes its status.
func createTask(t *testing.T, task *syncv1alpha1.SyncTask) {
	t.Helper()
	st := task.Status
	if err := env.Client.Create(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	task.Status = st
	if err := env.Client.Status().Update(context.Background(), task); err != nil {
		t.Fatal(err)
	}
}

func getTask(t *testing.T, ns, name string) *syncv1alpha1.SyncTask {
	t.Helper()
	task, err := readTask(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func readTask(ns, name string) (*syncv1alpha1.SyncTask, error) {
	var task syncv1alpha1.SyncTask
	err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &task)
	return &task, err
}

// editStatus changes a task's status as the controller would, retrying
// on conflicts. It reports failures with t.Error, so that goroutines
// standing in for the controller may call it.
func editStatus(t *testing.T, ns, name string, edit func(*syncv1alpha1.SyncTaskStatus)) {
	t.Helper()
	for range 20 {
		task, err := readTask(ns, name)
		if err != nil {
			t.Error(err)
			return
		}
		edit(&task.Status)
		if err := env.Client.Status().Update(context.Background(), task); err == nil {
			return
		}
	}
	t.Error("status update: conflicts")
}

func ts(min int) metav1.Time { return metav1.NewTime(fixedNow.Add(-time.Duration(min) * time.Minute)) }

func condition(typ, status, reason, msg string, minAgo int) metav1.Condition {
	return metav1.Condition{Type: typ, Status: metav1.ConditionStatus(status), Reason: reason, Message: msg, LastTransitionTime: ts(minAgo)}
}

// streaming is the status of a task streaming from a two-shard source.
func streaming() syncv1alpha1.SyncTaskStatus {
	ck, rep := ts(0), ts(0)
	return syncv1alpha1.SyncTaskStatus{
		Phase: syncv1alpha1.PhaseStreaming, StartedAt: &[]metav1.Time{ts(42)}[0],
		Progress:   &syncv1alpha1.CopyProgress{Documents: 120000, Bytes: 61 << 20, EstimatedDocuments: 120000, Percent: "100%"},
		LagSeconds: 1, OpsPerSecond: 38, BytesPerSecond: 19 << 10, CheckpointTime: &ck, ShardSummary: "2/2 streaming",
		Shards: []syncv1alpha1.ShardStatus{
			{Name: "rs0", Ordinal: 0, Phase: syncv1alpha1.PhaseStreaming, LagSeconds: 1, OpsPerSecond: 21, Documents: 61000, AppliedTimestamp: "1795582799:4", LastReportTime: &rep},
			{Name: "rs1", Ordinal: 1, Phase: syncv1alpha1.PhaseStreaming, LagSeconds: 0, OpsPerSecond: 17, HeldWrites: 3, Documents: 59000, AppliedTimestamp: "1795582800:1", LastReportTime: &rep},
		},
		Conditions: []metav1.Condition{
			condition(syncv1alpha1.ConditionReady, "True", "Streaming", "streaming, 1s behind the source", 30),
			condition(syncv1alpha1.ConditionProgressing, "True", "Streaming", "changes are replayed as the source takes them", 30),
			condition(syncv1alpha1.ConditionDegraded, "False", "Healthy", "", 42),
		},
		LastVerification: &syncv1alpha1.Verification{Mode: config.VerifyHash, Result: syncv1alpha1.VerificationPassed, Time: ts(31), Namespaces: 4},
	}
}

// TestStatusOutput: the status command's output for a task copying, one
// streaming from two shards, and one cutting over, against golden files
// (go test -run TestStatusOutput -update writes them).
func TestStatusOutput(t *testing.T) {
	ns := env.Namespace(t)
	copying := syncv1alpha1.SyncTaskStatus{Phase: syncv1alpha1.PhaseFullSync, StartedAt: &[]metav1.Time{ts(3)}[0],
		Progress:   &syncv1alpha1.CopyProgress{Documents: 52000, Bytes: 26 << 20, EstimatedDocuments: 120000, Percent: "43%"},
		Shards:     []syncv1alpha1.ShardStatus{{Name: "orders-worker-0", Phase: syncv1alpha1.PhaseFullSync, Documents: 52000}},
		Conditions: []metav1.Condition{condition(syncv1alpha1.ConditionReady, "False", "FullSync", "copying: 43% of about 120000 documents", 3)}}
	cutting := streaming()
	cutting.Cutover = &syncv1alpha1.CutoverStatus{Step: "Draining", CaughtUp: true, WritesBlocked: true, StartedAt: &[]metav1.Time{ts(1)}[0],
		Message: "replaying shards rs1 up to their newest positions"}
	cutting.Shards = append([]syncv1alpha1.ShardStatus(nil), cutting.Shards...)
	cutting.Shards[0].Cutover, cutting.Shards[1].Cutover = "Drained at 1795582800:7", "Draining to 1795582800:9"
	cutting.Conditions = append(cutting.Conditions, condition(syncv1alpha1.ConditionCutoverReady, "True", "CaughtUp", "lag 1s, at most 5s", 1),
		condition(syncv1alpha1.ConditionCutoverComplete, "False", "Draining", "draining to 1795582800,9", 1))
	cases := []struct {
		name   string
		status syncv1alpha1.SyncTaskStatus
		edit   func(*syncv1alpha1.SyncTask)
	}{
		{"copying", copying, nil},
		{"streaming", streaming(), func(st *syncv1alpha1.SyncTask) { st.Spec.Source.Kind = config.KindSharded }},
		{"cutting-over", cutting, func(st *syncv1alpha1.SyncTask) {
			st.Spec.Cutover = config.Cutover{Requested: true, BlockSourceWrites: true, Verify: config.VerifyHash, MaxLagSeconds: 5}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task := testTask(ns, c.name)
			if c.edit != nil {
				c.edit(task)
			}
			task.Status = c.status
			createTask(t, task)
			out, err := run(t, ns, "status", c.name)
			if err != nil {
				t.Fatalf("status: %v\n%s", err, out)
			}
			out = strings.ReplaceAll(out, ns, "shop")
			golden(t, filepath.Join("testdata", "status-"+c.name+".golden"), out)
		})
	}
}

// TestErrors: what a user is told when a command cannot do what was asked.
func TestErrors(t *testing.T) {
	ns := env.Namespace(t)
	copying := testTask(ns, "copying")
	copying.Status = syncv1alpha1.SyncTaskStatus{Phase: syncv1alpha1.PhaseFullSync}
	createTask(t, copying)
	paused := testTask(ns, "paused")
	paused.Spec.Suspend = true
	paused.Status = syncv1alpha1.SyncTaskStatus{Phase: syncv1alpha1.PhasePaused}
	createTask(t, paused)
	live := testTask(ns, "live")
	live.Status = streaming()
	createTask(t, live)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"status", "nope"}, `SyncTask "nope" not found in namespace "` + ns + `": list them with kubectl get synctasks -n ` + ns},
		{[]string{"cutover", "nope"}, `SyncTask "nope" not found in namespace "` + ns + `": list them with kubectl get synctasks -n ` + ns},
		{[]string{"cutover", "copying"}, "SyncTask copying is in phase FullSync: a cut-over starts from a streaming task (the copy done, changes replaying); wait until kubectl mongoferry status copying shows phase Streaming"},
		{[]string{"cutover", "paused"}, "SyncTask paused is suspended: a cut-over starts from a streaming task (the copy done, changes replaying); wait until kubectl mongoferry status paused shows phase Streaming (resume it first: kubectl mongoferry resume paused)"},
		{[]string{"cutover", "live", "--verify", "md5"}, `--verify: "md5" is not one of none, count, hash, sample`},
		{[]string{"reverse", "live"}, "SyncTask live: its cut-over has not been requested; a reverse sync starts from the target's position at a completed cut-over: run kubectl mongoferry cutover live --wait first"},
		{[]string{"verify", "paused"}, "SyncTask paused is suspended: a verification on demand runs while the workers stream (for a finished task, run ferry verify)"},
		{[]string{"logs", "live"}, "SyncTask live has no worker pods (phase Streaming): nothing to show"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out, err := run(t, ns, c.args...)
			if err == nil || err.Error() != c.want {
				t.Errorf("error %v\nwant  %s\n(output %q)", err, c.want, out)
			}
		})
	}
	if getTask(t, ns, "copying").Spec.Cutover.Requested {
		t.Error("a refused cut-over was requested anyway")
	}
}

// TestSuspendResume: suspend and resume set spec.suspend.
func TestSuspendResume(t *testing.T) {
	ns := env.Namespace(t)
	task := testTask(ns, "orders")
	task.Status = streaming()
	createTask(t, task)
	for _, c := range []struct {
		cmd, want string
		suspend   bool
	}{
		{"suspend", "synctask orders suspended\n", true},
		{"suspend", "synctask orders is already suspended\n", true},
		{"resume", "synctask orders resumed\n", false},
	} {
		out, err := run(t, ns, c.cmd, "orders")
		if err != nil || out != c.want {
			t.Errorf("%s: %q, %v; want %q", c.cmd, out, err, c.want)
		}
		if got := getTask(t, ns, "orders").Spec.Suspend; got != c.suspend {
			t.Errorf("after %s: spec.suspend %v", c.cmd, got)
		}
	}
}

// golden compares got with a golden file, or writes it with -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (write it with go test -run %s -update)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
