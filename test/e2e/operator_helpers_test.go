package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/podrunner"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// managerLog collects the manager's log lines; they are written to the
// test log only when the test fails.
type managerLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *managerLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

var (
	operatorLog     = &managerLog{}
	operatorLogOnce sync.Once
)

// startOperator runs the SyncTask controller in a controller-runtime
// manager in this process, as cmd/manager does (no leader election, no
// metrics or probe listeners), until the test ends. edit, when given,
// adjusts the reconciler before it starts.
func startOperator(t *testing.T, env *envtestutil.Env, edit ...func(*controller.SyncTaskReconciler)) {
	t.Helper()
	operatorLogOnce.Do(func() {
		ctrl.SetLogger(funcr.New(func(prefix, args string) {
			fmt.Fprintf(operatorLog, "%s %s %s\n", time.Now().Format("15:04:05.000"), prefix, args)
		}, funcr.Options{Verbosity: 1}))
	})
	skip := true
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlconfig.Controller{SkipNameValidation: &skip},
		Cache:                  cache.Options{ByObject: controller.CacheByObject()},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &controller.SyncTaskReconciler{
		Client:       mgr.GetClient(),
		Scheme:       mgr.GetScheme(),
		Recorder:     mgr.GetEventRecorder("mongoferry-manager"),
		WorkerImage:  "ghcr.io/mongoferry/mongoferry:e2e",
		StatusClient: &http.Client{Timeout: 2 * time.Second},
	}
	for _, e := range edit {
		e(r)
	}
	if err := r.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
		if t.Failed() {
			operatorLog.mu.Lock()
			b := operatorLog.buf.Bytes()
			if len(b) > 32<<10 {
				b = b[len(b)-32<<10:]
			}
			t.Logf("manager log (tail):\n%s", b)
			operatorLog.mu.Unlock()
		}
	})
}

// operatorTaskOptions is what startOperatorTask sets up in the test's
// namespace.
type operatorTaskOptions struct {
	// Name and Spec are the SyncTask's.
	Name string
	Spec syncv1alpha1.SyncTaskSpec
	// FirstIP is the pod runner's first pod address (127.x.y.z); empty
	// for the runner's random one. Tests that run at once take distinct
	// ranges.
	FirstIP string
	// LogDir receives the worker pods' logs; empty for a directory of the
	// runner's own.
	LogDir string
	// Reconciler adjusts the reconciler before it starts.
	Reconciler func(*controller.SyncTaskReconciler)
	// RecordPhases notes the task's phases from before it is created.
	RecordPhases bool
	// RunnerLogf receives the pod runner's lines (pod starts, exits,
	// stops); the test log when nil.
	RunnerLogf func(format string, args ...any)
}

// operatorTask is a SyncTask run by an in-process operator whose worker
// pods run as local processes.
type operatorTask struct {
	t      *testing.T
	env    *envtestutil.Env
	ns     string
	name   string
	runner *podrunner.Runner
	phases *phaseRecorder // with RecordPhases
}

// startOperatorTask starts the operator (startOperator) and a pod runner
// for the ferry binary in ns, then creates the SyncTask; all stop when the
// test ends. Secrets the task names are created before (createCredentials).
func startOperatorTask(t *testing.T, env *envtestutil.Env, ns string, o operatorTaskOptions) *operatorTask {
	t.Helper()
	ferry := ferryBinary(t)
	var edit []func(*controller.SyncTaskReconciler)
	if o.Reconciler != nil {
		edit = append(edit, o.Reconciler)
	}
	startOperator(t, env, edit...)
	// MONGOFERRY_POD_RUNTIME=podman runs the workers as containers of the
	// image (make test-containers).
	ro := podrunner.FromEnv(podrunner.Options{Client: env.Client, Namespace: ns, Binaries: map[string]string{"ferry": ferry}, LogDir: o.LogDir, Logf: o.RunnerLogf})
	if o.FirstIP != "" {
		ro.FirstIP = netip.MustParseAddr(o.FirstIP)
	}
	ot := &operatorTask{t: t, env: env, ns: ns, name: o.Name, runner: podrunner.Start(t, ro)}
	if o.RecordPhases {
		ot.phases = recordPhases(t, env.Client, ns, o.Name)
	}
	task := &syncv1alpha1.SyncTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: o.Name}, Spec: o.Spec}
	if err := env.Client.Create(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	return ot
}

// get reads the SyncTask as it is now.
func (ot *operatorTask) get() *syncv1alpha1.SyncTask {
	ot.t.Helper()
	var st syncv1alpha1.SyncTask
	if err := ot.env.Client.Get(context.Background(), types.NamespacedName{Namespace: ot.ns, Name: ot.name}, &st); err != nil {
		ot.t.Fatal(err)
	}
	return &st
}

// cutover requests a cut-over with c, as `kubectl mongoferry cutover`
// does (spec.cutover), and waits, as `kubectl wait
// --for=condition=CutoverComplete` would, until the condition is True,
// the phase Completed and the workers gone; it returns the task then.
func (ot *operatorTask) cutover(c config.Cutover, within time.Duration) *syncv1alpha1.SyncTask {
	ot.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := ot.get()
		cur.Spec.Cutover = c
		return ot.env.Client.Update(context.Background(), cur)
	})
	if err != nil {
		ot.t.Fatal(err)
	}
	deadline := time.Now().Add(within)
	for {
		st := ot.get()
		cond := meta.FindStatusCondition(st.Status.Conditions, syncv1alpha1.ConditionCutoverComplete)
		if cond != nil && cond.Status == metav1.ConditionTrue && st.Status.Phase == syncv1alpha1.PhaseCompleted && len(workerPods(ot.t, ot.env.Client, ot.ns, ot.name)) == 0 {
			return st
		}
		if time.Now().After(deadline) {
			y, _ := yaml.Marshal(st.Status)
			ot.t.Fatalf("timed out waiting for CutoverComplete, phase Completed and the workers stopped; status:\n%s", y)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// createCredentials creates a Secret with username and password for each
// name.
func createCredentials(t *testing.T, env *envtestutil.Env, ns, user string, passwords map[string]string) {
	t.Helper()
	for s, pass := range passwords {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s}, StringData: map[string]string{"username": user, "password": pass}}
		if err := env.Client.Create(context.Background(), secret); err != nil {
			t.Fatal(err)
		}
	}
}

// phaseRecorder notes every phase a SyncTask's status shows, polling it
// more often than the controller updates it.
type phaseRecorder struct {
	mu     sync.Mutex
	phases []syncv1alpha1.Phase
}

func recordPhases(t *testing.T, c client.Client, ns, name string) *phaseRecorder {
	pr := &phaseRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var task syncv1alpha1.SyncTask
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &task); err == nil && task.Status.Phase != "" {
				pr.mu.Lock()
				if n := len(pr.phases); n == 0 || pr.phases[n-1] != task.Status.Phase {
					pr.phases = append(pr.phases, task.Status.Phase)
				}
				pr.mu.Unlock()
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return pr
}

// seen returns the phases so far, in order.
func (pr *phaseRecorder) seen() []syncv1alpha1.Phase {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return append([]syncv1alpha1.Phase(nil), pr.phases...)
}

// syncTaskTable renders the namespace's SyncTasks as `kubectl get
// synctasks` does (`-o wide` with wide): the API server's Table for the
// CRD's printer columns, priority 0 columns only unless wide, absent
// values as <none>.
func syncTaskTable(t *testing.T, cfg *rest.Config, ns string, wide bool) string {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(cfg.Host, "/") + "/apis/sync.mongoferry.io/v1alpha1/namespaces/" + ns + "/synctasks"
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s as Table: %s\n%s", url, resp.Status, body)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	w := tabwriter.NewWriter(&out, 0, 8, 3, ' ', 0)
	var cols []int
	for i, c := range table.ColumnDefinitions {
		if c.Priority == 0 || wide {
			cols = append(cols, i)
		}
	}
	for j, i := range cols {
		if j > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, strings.ToUpper(table.ColumnDefinitions[i].Name))
	}
	fmt.Fprintln(w)
	for _, row := range table.Rows {
		for j, i := range cols {
			if j > 0 {
				fmt.Fprint(w, "\t")
			}
			v := any("<none>")
			if i < len(row.Cells) && row.Cells[i] != nil {
				v = row.Cells[i]
			}
			fmt.Fprint(w, v)
		}
		fmt.Fprintln(w)
	}
	_ = w.Flush()
	return out.String()
}

// events returns the events.k8s.io Events about an object, oldest first.
func taskEvents(t *testing.T, c client.Client, ns, name string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == "SyncTask" {
			out = append(out, e)
		}
	}
	return out
}

func hasReason(evs []eventsv1.Event, reason string) bool {
	for _, e := range evs {
		if e.Reason == reason {
			return true
		}
	}
	return false
}
