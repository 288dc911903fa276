package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/podrunner"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// testAlertValues are the chart values the test renders the alert rules
// with: the chart's expressions, with thresholds and for: durations that
// a test can reach in minutes. The headroom alert fires on the share of
// the span only (thresholdSeconds 0): a test oplog holds seconds, not hours.
const testAlertValues = `
monitoring:
  prometheusRule:
    alerts:
      lagHigh: {thresholdSeconds: 20, for: 5s}
      degraded: {for: 5s}
      failed: {for: 5s}
      copyStalled: {minutes: 1, for: 5s}
      oplogWindowLost: {for: 0s}
      oplogHeadroomLow: {thresholdSeconds: 0, spanFraction: 0.25, trendWindow: 15s, for: 2s}
      checkpointStalled: {minutes: 2, for: 10s}
      workerRestarts: {count: 2, minutes: 3, for: 0s}
`

// panelsWithoutData are the dashboard queries a replica-set task on this
// branch's engine does not feed, each with why.
var panelsWithoutData = map[string]string{
	// Set once a verification finished: at the end of a task (mode full,
	// or once caught up), whose worker then exits; a streaming task has
	// none.
	"mongoferry_verify_differing_namespaces": "a streaming task has not verified",
	// Set once a cut-over is requested; TestOperatorCutover and
	// TestKubectlPlugin run one, this test does not.
	"mongoferry_cutover_step":                  "no cut-over is requested",
	"mongoferry_cutover_source_writes_blocked": "no cut-over is requested",
}

// TestPrometheusMonitoring runs SyncTasks through the operator (envtest,
// the controller, the pod runner, FerretDB servers) with a real Prometheus
// (bin/prometheus) scraping the manager's SyncTask collector and the
// worker pods every second and evaluating the chart's alert rules. While a
// healthy task streams under a live load, every query of the dashboard is
// evaluated through the HTTP API and must return sensible data, and no
// alert fires for that task. Then faults fire their alerts:
//
//   - a worker that cannot log in to its target restarts again and again:
//     MongoFerryWorkerRestarting, and MongoFerrySyncTaskDegraded with it;
//   - a slow copy from a source whose oplog is small (256 KiB) while the
//     source keeps writing: the oplog rolls towards and past the start
//     position, MongoFerryOplogHeadroomLow fires, and once the copy is done
//     the worker stops with OplogWindowLost: MongoFerryOplogWindowLost;
//   - the healthy task's target stops answering (SIGSTOP, a host gone
//     silent) while the source writes: MongoFerryLagHigh;
//   - a copy whose source stops answering: MongoFerryCopyStalled.
//
// With MONGOFERRY_PROM_DIR set it writes what Prometheus returned (every
// panel's query and result, every fired alert) there as JSON
// (docs/observability.md quotes it).
func TestPrometheusMonitoring(t *testing.T) {
	ferry := ferryBinary(t)
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const user, srcPass, dstPass = "ferry", "src-Prom-Pa55", "dst-Prom-Pa55"
	src := testserver.Start(t, testserver.Options{Username: user, Password: srcPass})
	dst := testserver.Start(t, testserver.Options{Username: user, Password: dstPass})
	small := testserver.Start(t, testserver.Options{Username: user, Password: srcPass, OplogBytes: 256 << 10})
	smallDst := testserver.Start(t, testserver.Options{Username: user, Password: dstPass})
	sc, smc := src.MustClient(t), small.MustClient(t)
	orders := workload.Options{Database: "shop", Collection: "orders", RecordCount: 2000, FieldCount: 5, FieldLength: 40, Seed: 21}
	stallDocs := workload.Options{Database: "stall", Collection: "docs", RecordCount: 3000, FieldCount: 5, FieldLength: 40, Seed: 22}
	windowDocs := workload.Options{Database: "shop", Collection: "orders", RecordCount: 1500, FieldCount: 5, FieldLength: 40, Seed: 23}
	if _, err := workload.Load(ctx, sc, orders); err != nil {
		t.Fatal(err)
	}
	if _, err := workload.Load(ctx, sc, stallDocs); err != nil {
		t.Fatal(err)
	}
	if _, err := workload.Load(ctx, smc, windowDocs); err != nil {
		t.Fatal(err)
	}
	createCredentials(t, env, ns, user, map[string]string{"src-creds": srcPass, "dst-creds": dstPass, "wrong-creds": "not-the-password"})
	startOperator(t, env)
	runner := podrunner.Start(t, podrunner.Options{Client: env.Client, Namespace: ns, Binaries: map[string]string{"ferry": ferry}})
	managerSrv := managerMetricsServer(t, env)
	prom := startPrometheus(t, chartRules(t, testAlertValues), managerSrv.Listener.Addr().String())

	// The worker pods as a PodMonitor finds them: each task's pod, on its
	// pod IP, while it has one.
	tasks := []string{"orders", "crashing", "window", "stall"}
	discoverCtx, stopDiscover := context.WithCancel(ctx)
	var discoverWG sync.WaitGroup
	discoverWG.Go(func() {
		for discoverCtx.Err() == nil {
			for _, task := range tasks {
				pod := controller.WorkerName(task) + "-0"
				addr := ""
				if ip := runner.PodIP(pod); ip != "" {
					addr = fmt.Sprintf("%s:%d", ip, controller.DefaultMetricsPort)
				}
				prom.setWorker(t, ns, pod, addr)
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	defer func() { stopDiscover(); discoverWG.Wait() }()

	create := func(name string, s *testserver.Server, d *testserver.Server, dstSecret string, edit func(*syncv1alpha1.SyncTaskSpec)) {
		t.Helper()
		spec := syncv1alpha1.SyncTaskSpec{
			Mode:     config.ModeFullAndIncremental,
			Source:   syncv1alpha1.Source{URI: s.URI, CredentialsSecret: "src-creds"},
			Target:   syncv1alpha1.Target{URI: d.URI, CredentialsSecret: dstSecret},
			Threads:  config.Threads{Readers: 2, Writers: 2},
			FullSync: config.FullSync{RangeDocuments: 500, Split: config.SplitAlways},
		}
		edit(&spec)
		task := &syncv1alpha1.SyncTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
		if err := env.Client.Create(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	// The healthy task, under a live load of about 20 operations a second.
	create("orders", src, dst, "dst-creds", func(s *syncv1alpha1.SyncTaskSpec) { s.Namespaces.Include = []string{`shop\..*`} })
	// A worker whose target refuses its password: it exits and restarts.
	create("crashing", src, dst, "wrong-creds", func(s *syncv1alpha1.SyncTaskSpec) { s.Namespaces.Include = []string{`shop\..*`} })
	// A copy of 1500 documents at 25 a second (about a minute) from a
	// source whose 256 KiB oplog holds about 20 seconds of its load.
	create("window", small, smallDst, "dst-creds", func(s *syncv1alpha1.SyncTaskSpec) {
		s.RateLimit = 25
		s.Cache.BatchSize = 25
	})

	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadWG sync.WaitGroup
	for _, l := range []struct {
		c    *mongo.Client
		base workload.Options
		rate float64
	}{{sc, orders, 20}, {smc, windowDocs, 30}} {
		c := l.c
		run := l.base
		run.Workload, run.Threads, run.Rate, run.Distribution = workload.WorkloadMixed, 1, l.rate, workload.Uniform
		run.InsertProportion, run.UpdateProportion, run.DeleteProportion = 0.4, 0.4, 0.2
		loadWG.Go(func() { _, _ = workload.Run(loadCtx, c, run) })
	}
	defer func() { stopLoad(); loadWG.Wait() }()

	status := func(name string) syncv1alpha1.SyncTaskStatus {
		var st syncv1alpha1.SyncTask
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &st); err != nil {
			t.Fatal(err)
		}
		return st.Status
	}
	report := promReport{Namespace: ns}
	fired := func(alert string, labels map[string]string, timeout time.Duration) {
		t.Helper()
		var got seenAlert
		waitFor(t, alert+" firing for "+fmt.Sprint(labels), timeout, func() bool {
			a, ok := prom.firedOnce(alert, labels)
			got = a
			return ok
		})
		report.Alerts = append(report.Alerts, got)
		t.Logf("%s firing at %s: labels %v, value %s, active since %s", alert, got.At.Format(time.RFC3339), got.Labels, got.Value, got.ActiveAt.Format(time.RFC3339))
	}

	// The healthy task streams: every panel's query returns data.
	waitFor(t, "orders Streaming, 100%, lag under 5 s, applying", 5*time.Minute, func() bool {
		st := status("orders")
		return st.Phase == syncv1alpha1.PhaseStreaming && st.Progress != nil && st.Progress.Percent == "100%" &&
			st.LagUnknown == "" && st.LagSeconds < 5 && st.OpsPerSecond > 0 && st.CheckpointTime != nil
	})
	// Enough streaming samples for rate() over the panels' interval.
	time.Sleep(20 * time.Second)
	report.Panels = checkPanels(t, prom, ns, "orders")

	// No alert has fired for the healthy task, nor is one pending.
	for _, a := range prom.alerts(t) {
		if a.Labels["synctask"] == "orders" || a.Labels["task"] == "orders" {
			t.Errorf("healthy task: alert %s is %s: %v (value %s)", a.Labels["alertname"], a.State, a.Labels, a.Value)
		}
	}
	for _, name := range []string{"MongoFerryLagHigh", "MongoFerrySyncTaskDegraded", "MongoFerrySyncTaskFailed", "MongoFerryCopyStalled",
		"MongoFerryOplogWindowLost", "MongoFerryCheckpointStalled", "MongoFerryWorkerRestarting"} {
		if a, ok := prom.firedOnce(name, map[string]string{"synctask": "orders"}); ok {
			t.Errorf("healthy task: %s fired at %s: %v (value %s)", name, a.At.Format(time.RFC3339), a.Labels, a.Value)
		}
	}
	if a, ok := prom.firedOnce("MongoFerryOplogHeadroomLow", map[string]string{"task": "orders"}); ok {
		t.Errorf("healthy task: MongoFerryOplogHeadroomLow fired at %s: %v (value %s)", a.At.Format(time.RFC3339), a.Labels, a.Value)
	}

	// Faults.
	fired("MongoFerryWorkerRestarting", map[string]string{"namespace": ns, "synctask": "crashing", "pod": "crashing-worker-0"}, 4*time.Minute)
	fired("MongoFerrySyncTaskDegraded", map[string]string{"namespace": ns, "synctask": "crashing"}, 2*time.Minute)
	fired("MongoFerryOplogHeadroomLow", map[string]string{"namespace": ns, "task": "window"}, 4*time.Minute)
	fired("MongoFerryOplogWindowLost", map[string]string{"namespace": ns, "synctask": "window"}, 5*time.Minute)

	// The target of the healthy task stops answering: lag.
	if err := dst.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func(s *testserver.Server) {
		if err := s.Signal(syscall.SIGCONT); err != nil {
			t.Error(err)
		}
	}
	defer func() {
		if !resumed {
			resume(dst)
		}
	}()
	fired("MongoFerryLagHigh", map[string]string{"namespace": ns, "synctask": "orders"}, 3*time.Minute)
	resume(dst)
	resumed = true

	// A copy whose source stops answering: a stalled copy.
	create("stall", src, smallDst, "dst-creds", func(s *syncv1alpha1.SyncTaskSpec) {
		s.Namespaces.Include = []string{`stall\..*`}
		s.RateLimit = 40
		s.Cache.BatchSize = 20
	})
	waitFor(t, "stall copying", 3*time.Minute, func() bool {
		st := status("stall")
		return st.Phase == syncv1alpha1.PhaseFullSync && st.Progress != nil && st.Progress.Documents > 100
	})
	stopLoad()
	loadWG.Wait()
	if err := src.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer resume(src)
	fired("MongoFerryCopyStalled", map[string]string{"namespace": ns, "synctask": "stall"}, 4*time.Minute)

	if dir := os.Getenv("MONGOFERRY_PROM_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "prometheus.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("what Prometheus returned is in %s", filepath.Join(dir, "prometheus.json"))
	}
}

// promReport is what the test writes with MONGOFERRY_PROM_DIR.
type promReport struct {
	Namespace string        `json:"namespace"`
	Panels    []panelResult `json:"panels"`
	Alerts    []seenAlert   `json:"alerts"`
}

type panelResult struct {
	Panel  string       `json:"panel"`
	Query  string       `json:"query"`
	At     time.Time    `json:"at"`
	Result []promSample `json:"result"`
}

// checkPanels evaluates every query of the dashboard for one task and
// checks that it returns data with sensible values; it returns what
// Prometheus answered.
func checkPanels(t *testing.T, prom *promServer, ns, task string) []panelResult {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "charts", "mongoferry", "dashboards", "mongoferry-synctask.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var out []panelResult
	queries := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			queries++
			// $__rate_interval: four scrape intervals at least, as Grafana
			// computes it, with room for a loaded machine.
			q := expandPanelQuery(tg.Expr, ns, task, "20s")
			skip := ""
			for metric, why := range panelsWithoutData {
				if strings.Contains(q, metric) {
					skip = why
				}
			}
			var res []promSample
			var qerr error
			ok := func() bool {
				res, qerr = prom.query(t, q)
				if qerr != nil || len(res) == 0 {
					return false
				}
				return sensible(q, res) == ""
			}
			if skip != "" {
				// The query must still evaluate.
				if _, err := prom.query(t, q); err != nil {
					t.Errorf("panel %q: %s: %v", p.Title, q, err)
				}
				t.Logf("panel %q: %s: no data expected (%s)", p.Title, q, skip)
				continue
			}
			deadline := time.Now().Add(90 * time.Second)
			for !ok() && time.Now().Before(deadline) {
				time.Sleep(time.Second)
			}
			switch {
			case qerr != nil:
				t.Errorf("panel %q: %s: %v", p.Title, q, qerr)
			case len(res) == 0:
				t.Errorf("panel %q: %s returned no data", p.Title, q)
			case sensible(q, res) != "":
				t.Errorf("panel %q: %s: %s", p.Title, q, sensible(q, res))
			}
			sort.Slice(res, func(i, j int) bool { return fmt.Sprint(res[i].Metric) < fmt.Sprint(res[j].Metric) })
			out = append(out, panelResult{Panel: p.Title, Query: tg.Expr, At: time.Now().UTC(), Result: res})
		}
	}
	if queries < 20 {
		t.Errorf("the dashboard has %d queries", queries)
	}
	return out
}

// sensible checks a panel query's values by what it measures; "" when
// they make sense.
func sensible(q string, res []promSample) string {
	var sum float64
	for _, s := range res {
		sum += s.float()
	}
	switch {
	case strings.Contains(q, "progress_ratio") && !strings.Contains(q, "rate("):
		for _, s := range res {
			if v := s.float(); v < 0 || v > 1 {
				return fmt.Sprintf("copy progress %v, want 0 to 1", v)
			}
		}
	case strings.Contains(q, "applied_ops_total") || strings.Contains(q, "ops_per_second"):
		if sum <= 0 {
			return fmt.Sprintf("ops/s %v while the load runs, want above 0", sum)
		}
	case strings.Contains(q, "lag_seconds") && !strings.Contains(q, "deriv"):
		for _, s := range res {
			if v := s.float(); v < 0 || v >= 20 {
				return fmt.Sprintf("lag %v s, want under the test's 20 s", v)
			}
		}
	case strings.Contains(q, "headroom_seconds") || strings.Contains(q, "span_seconds"):
		for _, s := range res {
			if v := s.float(); v <= 0 {
				return fmt.Sprintf("oplog window %v s, want above 0", v)
			}
		}
	}
	return ""
}
