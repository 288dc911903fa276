package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// metricsScrape is one read of a /metrics endpoint.
type metricsScrape struct {
	at       time.Time
	body     string
	families map[string]*dto.MetricFamily
}

func readMetrics(t *testing.T, url string) metricsScrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("GET %s: not the Prometheus text format: %v", url, err)
	}
	return metricsScrape{at: time.Now(), body: string(b), families: fams}
}

// managerMetricsServer serves the manager's metrics endpoint until the
// test ends: the SyncTask collector reading the API server, on a registry
// of its own (the manager serves controller-runtime's registry; the
// collector is the same).
func managerMetricsServer(t *testing.T, env *envtestutil.Env) *httptest.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(&controller.SyncTaskCollector{Reader: env.Client})
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv
}

// stageScrapes are the manager's and the worker's scrapes at one stage of
// a task, with `kubectl get synctasks -o wide` at that moment.
type stageScrapes struct {
	stage           string
	manager, worker metricsScrape
	table           string
}

// value returns the value of the series of a family whose labels include
// the given ones (name=value pairs), and whether there is one.
func (s metricsScrape) value(name string, labels ...string) (float64, bool) {
	mf := s.families[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestOperatorMetrics runs a SyncTask through the operator (as TestOperator
// does: envtest, the controller, the pod runner, two FerretDB servers, a
// live load) with the manager's SyncTask collector served on /metrics, and
// scrapes the manager and the worker during the copy and twice while
// streaming. It checks that every metric the chart's dashboard and alert
// rules name shows up in those scrapes with the task's labels, and the
// values a user would see. With MONGOFERRY_SCRAPE_DIR set it writes the
// scrapes there (docs/observability.md quotes them).
func TestOperatorMetrics(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const name = "orders"
	const user, srcPass, dstPass = "ferry", "src-Metrics-Pa55", "dst-Metrics-Pa55"
	src := testserver.Start(t, testserver.Options{Host: "127.0.0.4", Username: user, Password: srcPass})
	dst := testserver.Start(t, testserver.Options{Host: "127.0.0.5", Username: user, Password: dstPass})
	sc := src.MustClient(t)
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 4000, FieldCount: 5, FieldLength: 40, Seed: 12}
	if _, err := workload.Load(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	createCredentials(t, env, ns, user, map[string]string{"src-creds": srcPass, "dst-creds": dstPass})
	managerSrv := managerMetricsServer(t, env)
	task := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name,
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: src.URI, CredentialsSecret: "src-creds"},
			Target: syncv1alpha1.Target{URI: dst.URI, CredentialsSecret: "dst-creds"},
			// A copy slow enough (about 15 s) to be scraped while it runs.
			Threads:   config.Threads{Readers: 2, Writers: 2},
			Cache:     config.Cache{BatchSize: 100},
			FullSync:  config.FullSync{RangeDocuments: 500, Split: config.SplitAlways},
			RateLimit: 250,
		},
	})
	runner := task.runner
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		run := base
		run.Workload, run.Threads, run.Rate, run.Distribution = workload.WorkloadMixed, 1, 20, workload.Uniform
		run.InsertProportion, run.UpdateProportion, run.DeleteProportion = 0.4, 0.4, 0.2
		_, _ = workload.Run(loadCtx, sc, run)
	})
	defer func() { stopLoad(); wg.Wait() }()

	status := func() syncv1alpha1.SyncTaskStatus {
		var st syncv1alpha1.SyncTask
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &st); err != nil {
			t.Fatal(err)
		}
		return st.Status
	}
	workerURL := func() string {
		ip := runner.PodIP(controller.WorkerName(name) + "-0")
		if ip == "" {
			return ""
		}
		return fmt.Sprintf("http://%s:%d/metrics", ip, controller.DefaultMetricsPort)
	}
	managerURL := managerSrv.URL + "/metrics"
	mlabels := []string{"namespace", ns, "synctask", name}

	var scrapes []stageScrapes
	take := func(stage string) {
		t.Helper()
		m, w := readMetrics(t, managerURL), readMetrics(t, workerURL())
		scrapes = append(scrapes, stageScrapes{stage: stage, manager: m, worker: w, table: syncTaskTable(t, env.Config, ns, true)})
	}

	// During the copy: the worker reports documents copied.
	waitFor(t, "the copy to be under way", 2*time.Minute, func() bool {
		st := status()
		if st.Phase != syncv1alpha1.PhaseFullSync || workerURL() == "" {
			return false
		}
		w := readMetrics(t, workerURL())
		docs, _ := w.value("mongoferry_copy_documents_total", "task", name)
		m := readMetrics(t, managerURL)
		mdocs, _ := m.value("mongoferry_synctask_copy_documents_total", mlabels...)
		return docs > 500 && mdocs > 0
	})
	take("copy")
	copied := func(s metricsScrape) float64 {
		v, _ := s.value("mongoferry_copy_documents_total", "task", name)
		return v
	}
	// Far enough apart for the manager's status poll (every 5 s) to
	// have moved too.
	copyFirst := copied(scrapes[0].worker)
	managerFirst, _ := scrapes[0].manager.value("mongoferry_synctask_copy_documents_total", mlabels...)
	waitFor(t, "1000 more documents copied (or the copy done)", 2*time.Minute, func() bool {
		mdocs, _ := readMetrics(t, managerURL).value("mongoferry_synctask_copy_documents_total", mlabels...)
		w := readMetrics(t, workerURL())
		done, _ := w.value("mongoferry_copy_progress_ratio", "task", name)
		return (copied(w) >= copyFirst+1000 || done == 1) && mdocs > managerFirst
	})
	take("copy, later")

	// Streaming under the live load, twice, some operations apart.
	waitFor(t, "Streaming, 100%, lag under 5 s", 5*time.Minute, func() bool {
		st := status()
		return st.Phase == syncv1alpha1.PhaseStreaming && st.Progress != nil && st.Progress.Percent == "100%" &&
			st.LagUnknown == "" && st.LagSeconds < 5 && st.OpsPerSecond > 0 && st.CheckpointTime != nil
	})
	take("streaming")
	applied := func(s metricsScrape) float64 {
		var sum float64
		for _, op := range []string{"insert", "update", "delete"} {
			v, _ := s.value("mongoferry_replay_applied_ops_total", "task", name, "op", op)
			sum += v
		}
		return sum
	}
	first := applied(scrapes[2].worker)
	waitFor(t, "200 more operations applied", 3*time.Minute, func() bool {
		return applied(readMetrics(t, workerURL())) >= first+200
	})
	take("streaming, later")

	// What a user sees on the manager's endpoint while streaming.
	last := scrapes[3]
	for _, want := range []struct {
		name   string
		labels []string
		check  func(float64) bool
		what   string
	}{
		{"mongoferry_synctask_phase", []string{"phase", "Streaming"}, func(v float64) bool { return v == 1 }, "1"},
		{"mongoferry_synctask_progress_ratio", nil, func(v float64) bool { return v == 1 }, "1"},
		{"mongoferry_synctask_lag_seconds", nil, func(v float64) bool { return v < 30 }, "under 30"},
		{"mongoferry_synctask_condition", []string{"type", "Ready", "status", "True", "reason", "Streaming"}, func(v float64) bool { return v == 1 }, "1"},
		{"mongoferry_synctask_shard_lag_seconds", []string{"shard", "orders-worker-0"}, func(v float64) bool { return v < 30 }, "under 30"},
		{"mongoferry_synctask_copy_documents_total", nil, func(v float64) bool { return v >= 4000 }, "at least 4000"},
	} {
		v, ok := last.manager.value(want.name, append(slices.Clone(mlabels), want.labels...)...)
		if !ok || !want.check(v) {
			t.Errorf("manager: %s%v = %v (present %v), want %s", want.name, want.labels, v, ok, want.what)
		}
	}
	// The Degraded condition and the restart count are what the API
	// server says (a worker may have restarted: another test's process can
	// hold its address for a moment).
	degraded := meta.FindStatusCondition(status().Conditions, syncv1alpha1.ConditionDegraded)
	if degraded == nil {
		t.Error("no Degraded condition")
	} else if v, ok := last.manager.value("mongoferry_synctask_condition", append(slices.Clone(mlabels),
		"type", "Degraded", "status", string(degraded.Status), "reason", degraded.Reason)...); !ok || v != 1 {
		t.Errorf("manager: no mongoferry_synctask_condition series for Degraded=%s (%s)", degraded.Status, degraded.Reason)
	}
	var pod corev1.Pod
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: controller.WorkerName(name) + "-0"}, &pod); err != nil {
		t.Fatal(err)
	}
	if len(pod.Status.ContainerStatuses) != 1 {
		t.Fatalf("pod %s: container statuses %+v", pod.Name, pod.Status.ContainerStatuses)
	}
	restarts, ok := last.manager.value("mongoferry_synctask_worker_restarts_total", append(slices.Clone(mlabels), "pod", pod.Name)...)
	if want := float64(pod.Status.ContainerStatuses[0].RestartCount); !ok || restarts != want {
		t.Errorf("manager: mongoferry_synctask_worker_restarts_total{pod=%q} = %v (present %v), want the pod's restartCount %v", pod.Name, restarts, ok, want)
	}
	if ws, ok := last.worker.value("mongoferry_task_phase", "task", name, "phase", "Streaming"); !ok || ws != 1 {
		t.Errorf("worker: mongoferry_task_phase{phase=Streaming} = %v, want 1", ws)
	}
	if now, before := applied(last.worker), first; now < before+200 {
		t.Errorf("worker: applied operations %v, then %v", before, now)
	}

	// Every metric the dashboard and the alert rules name is in the
	// scrapes (the PromQL-level check is in test/chart).
	root, err := envtestutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range []string{"charts/mongoferry/dashboards/mongoferry-synctask.json", "charts/mongoferry/templates/prometheusrule.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		// Names, not prefixes such as mongoferry_synctask_* in a
		// description.
		for _, m := range regexp.MustCompile(`(mongoferry_[a-z_]+[a-z])([^a-z_*]|$)`).FindAllStringSubmatch(string(b), -1) {
			if n := m[1]; !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("only %d metric names in the dashboard and the rules: %v", len(names), names)
	}
	for _, n := range names {
		if panelsWithoutData[n] != "" {
			continue // see TestPrometheusMonitoring
		}
		family := strings.TrimSuffix(n, "_bucket")
		found := false
		for _, s := range scrapes {
			if s.manager.families[family] != nil || s.worker.families[family] != nil {
				found = true
			}
		}
		if !found {
			t.Errorf("%s (used by the dashboard or the alerts) is in none of the scrapes", n)
		}
	}

	if dir := os.Getenv("MONGOFERRY_SCRAPE_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i, s := range scrapes {
			for _, side := range []struct {
				name string
				s    metricsScrape
			}{{"manager", s.manager}, {"worker", s.worker}} {
				header := fmt.Sprintf("# %s scrape %d (%s) at %s (unix %s)\n# namespace %s, task %s\n", side.name, i+1, s.stage,
					side.s.at.UTC().Format(time.RFC3339Nano), strconv.FormatFloat(float64(side.s.at.UnixMilli())/1000, 'f', 3, 64), ns, name)
				p := filepath.Join(dir, fmt.Sprintf("%d-%s.txt", i+1, side.name))
				if err := os.WriteFile(p, []byte(header+side.s.body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d-kubectl-get.txt", i+1)), []byte(s.table), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("scrapes written to %s", dir)
	}
}
