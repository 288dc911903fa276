package chart

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/metrics"
)

// targetLabels are the labels Prometheus adds to every series it scrapes
// through a ServiceMonitor or a PodMonitor.
var targetLabels = []string{"job", "instance", "namespace", "pod", "container", "service", "endpoint"}

// exported maps each metric name the code exports (histograms as their
// _bucket, _sum and _count series) to its label names.
type exported map[string][]string

func (e exported) add(mfs []*dto.MetricFamily) {
	for _, mf := range mfs {
		names := []string{mf.GetName()}
		extra := map[string][]string{}
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			names = []string{mf.GetName() + "_bucket", mf.GetName() + "_sum", mf.GetName() + "_count"}
			extra[mf.GetName()+"_bucket"] = []string{"le"}
		}
		for _, n := range names {
			labels := slices.Clone(extra[n])
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName())
				}
			}
			labels = append(labels, e[n]...)
			slices.Sort(labels)
			e[n] = slices.Compact(labels)
		}
	}
}

// workerStatus is a worker's /status in every part: copying done, replay
// running with every kind of operation, the oplog tailer's counters, one
// shard's subtask, a finished verification, a finished streaming
// verification pass, a cut-over draining with the source's writes
// blocked, the start-up time.
const workerStatus = `{"task":"orders","mode":"fullAndIncremental","phase":"Streaming",
  "copy":{"stage":"done","estimatedDocuments":1000,"documents":1000,"bytes":51200,"ranges":2,"rangesDone":2,"percent":100,
          "namespaces":[{"ns":"shop.orders","target":"shop.orders","documents":1000,"percent":100,"done":true}],
          "overwritten":1,"skipped":2,"retries":3,"bufferedBytes":4096,"maxBytes":1048576},
  "replay":{"appliedTS":{"T":1700000000,"I":3},"appliedTime":"2023-11-14T22:13:20Z","newestTS":{"T":1700000002,"I":1},
            "lagSeconds":2,"opsPerSecond":21.4,"applied":{"insert":5,"update":4,"delete":1},"skipped":{"noop":7},
            "bufferedBytes":512,"toleratedConflicts":1,
            "writeCommands":{"insert":2,"delete":1},"writesSent":{"insert":100,"delete":1},
            "shard":"rs0","holds":{"heldWrites":3,"heldNow":1,"holdSeconds":0.5,"commitWaits":1}},
  "shards":[{"shard":"rs0","phase":"Streaming",
             "replay":{"appliedTS":{"T":1700000000,"I":3},"readTS":{"T":1700000001,"I":1},"newestTS":{"T":1700000002,"I":1},
                       "lagSeconds":2,"opsPerSecond":21.4,"applied":{"insert":5},"skipped":{"fromMigrate":7},
                       "shard":"rs0","holds":{"heldWrites":3,"heldNow":1,"holdSeconds":0.5,"commitWaits":1}}}],
  "oplogWindows":[{"spanSeconds":7200,"headroomSeconds":7100}],
  "source":{"reopens":3,"newestReads":1,"lateEntries":1,"oplogQueries":4},
  "verify":{"mode":"hash","running":false,"ok":true},
  "streamingVerify":{"running":false,"passes":2,"namespaces":1,"namespacesDone":1,"documentsCompared":1000,"mismatches":3,"resolved":3,
                     "pendingRechecks":0,"pendingBytes":0,"maxPendingBytes":16777216,"persisting":0,"ok":true},
  "cutover":{"step":"Draining","caughtUp":true,"writesBlocked":true,"startedAt":"2023-11-14T22:10:00Z"},
  "startedAt":"2023-11-14T22:00:00Z","startupSeconds":1.5}`

// exportedMetrics gathers what the code exports: a worker's registry (as
// `ferry run` builds it: the status collector, the write latency histogram,
// the Go and process collectors) fed a status with every part set, and the
// manager's SyncTask collector reading a SyncTask with a full status and a
// worker pod from a real API server.
func exportedMetrics(t *testing.T) exported {
	t.Helper()
	e := exported{}

	var st engine.Status
	if err := json.Unmarshal([]byte(workerStatus), &st); err != nil {
		t.Fatal(err)
	}
	status := metrics.NewCollector(func() engine.Status { return st })
	latency := metrics.WriteLatency(st.Task)
	latency.WithLabelValues("insert").Observe(0.01)
	reg := metrics.NewRegistry(status, latency)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	e.add(mfs)
	// Every metric the status collector describes is in the gathering:
	// a new one the fixture does not reach fails here, not silently.
	descs := make(chan *prometheus.Desc, 100)
	status.Describe(descs)
	close(descs)
	gathered := 0
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "mongoferry_") && mf.GetName() != "mongoferry_write_batch_duration_seconds" {
			gathered++
		}
	}
	if len(descs) != gathered {
		t.Fatalf("the worker's collector describes %d metrics, the fixture status yields %d: complete workerStatus", len(descs), gathered)
	}

	env := testEnv(t)
	ns := env.Namespace(t)
	ctx := testContext(t, time.Minute)
	task := &syncv1alpha1.SyncTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
		Spec: syncv1alpha1.SyncTaskSpec{
			Source: syncv1alpha1.Source{URI: "mongodb://src.example:27017/?replicaSet=rs0", CredentialsSecret: "src"},
			Target: syncv1alpha1.Target{URI: "mongodb://dst.example:27017/", CredentialsSecret: "dst"},
		},
	}
	if err := env.Client.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
	checkpoint := metav1.NewTime(time.Unix(1700000000, 0))
	task.Status = syncv1alpha1.SyncTaskStatus{
		Phase: syncv1alpha1.PhaseStreaming, LagSeconds: 2, OpsPerSecond: 21, BytesPerSecond: 10,
		Progress:       &syncv1alpha1.CopyProgress{Documents: 1000, EstimatedDocuments: 1000, Percent: "100%"},
		CheckpointTime: &checkpoint,
		Shards:         []syncv1alpha1.ShardStatus{{Name: "orders-worker-0", Phase: syncv1alpha1.PhaseStreaming, LagSeconds: 2}},
	}
	meta.SetStatusCondition(&task.Status.Conditions, metav1.Condition{Type: syncv1alpha1.ConditionDegraded, Status: metav1.ConditionFalse, Reason: "Healthy", Message: "no problems seen"})
	if err := env.Client.Status().Update(ctx, task); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-worker-0", Labels: map[string]string{
			"app.kubernetes.io/name": "mongoferry-worker", controller.ManagedByLabel: controller.ManagedBy, controller.TaskLabel: "orders"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: controller.WorkerContainer, Image: "ghcr.io/mongoferry/mongoferry:test"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: controller.WorkerContainer, Image: pod.Spec.Containers[0].Image, RestartCount: 1}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	mreg := prometheus.NewRegistry()
	mreg.MustRegister(&controller.SyncTaskCollector{Reader: env.Client})
	mfs, err = mreg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	e.add(mfs)
	for _, name := range []string{"mongoferry_synctask_worker_restarts_total", "mongoferry_synctask_checkpoint_timestamp_seconds", "mongoferry_synctask_condition"} {
		if e[name] == nil {
			t.Fatalf("the manager's collector exported no %s for a task with a full status", name)
		}
	}
	return e
}

// grafanaVars stand in for the dashboard's variables when its queries are
// parsed.
var grafanaVars = map[string]string{
	"__rate_interval": "5m", "__interval": "1m", "__range": "1h",
	"namespace": "shop", "task": "orders", "datasource": "prometheus",
}

var grafanaVarRE = regexp.MustCompile(`\$\{(\w+)\}|\$(\w+)`)

// expandGrafana replaces the dashboard's variables in a query.
func expandGrafana(t *testing.T, q string) string {
	t.Helper()
	return grafanaVarRE.ReplaceAllStringFunc(q, func(m string) string {
		name := strings.Trim(m, "${}")
		v, ok := grafanaVars[name]
		if !ok {
			t.Errorf("query %q uses the unknown variable %s", q, m)
		}
		return v
	})
}

// pendingMetrics are named by the dashboard ahead of the code that exports
// them (none now).
var pendingMetrics = map[string]bool{}

// checkQuery parses a PromQL expression and checks that every metric it
// selects is exported, with the labels its matchers and groupings name.
// It returns the selectors.
func checkQuery(t *testing.T, e exported, where, q string) []*parser.VectorSelector {
	t.Helper()
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(q)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, q, err)
		return nil
	}
	var sels []*parser.VectorSelector
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			sels = append(sels, vs)
		}
		return nil
	})
	labelsOf := func(vs []*parser.VectorSelector) []string {
		out := slices.Clone(targetLabels)
		for _, v := range vs {
			out = append(out, e[v.Name]...)
		}
		return out
	}
	for _, vs := range sels {
		if vs.Name == "" {
			t.Errorf("%s: %q selects series without a metric name", where, q)
			continue
		}
		if _, ok := e[vs.Name]; !ok && pendingMetrics[vs.Name] {
			continue
		} else if !ok {
			t.Errorf("%s: %q uses %s, which the code does not export", where, q, vs.Name)
			continue
		}
		for _, m := range vs.LabelMatchers {
			if m.Name != "__name__" && !slices.Contains(labelsOf([]*parser.VectorSelector{vs}), m.Name) {
				t.Errorf("%s: %q matches label %s, which %s does not have (it has %v)", where, q, m.Name, vs.Name, e[vs.Name])
			}
		}
	}
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		agg, ok := n.(*parser.AggregateExpr)
		if !ok {
			return nil
		}
		var inner []*parser.VectorSelector
		parser.Inspect(agg.Expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				inner = append(inner, vs)
			}
			return nil
		})
		for _, l := range agg.Grouping {
			if !slices.Contains(labelsOf(inner), l) {
				t.Errorf("%s: %q groups by %s, which none of its series has", where, q, l)
			}
		}
		return nil
	})
	return sels
}

// matcherValue returns the value a selector requires for a label, or "".
func matcherValue(vs *parser.VectorSelector, label string) string {
	for _, m := range vs.LabelMatchers {
		if m.Name == label {
			return m.Value
		}
	}
	return ""
}

// dashboard is the part of the Grafana dashboard JSON the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasourceRef  `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	Targets    []struct {
		Expr         string         `json:"expr"`
		LegendFormat string         `json:"legendFormat"`
		Datasource   *datasourceRef `json:"datasource"`
	} `json:"targets"`
	GridPos *struct{ X, Y, W, H int } `json:"gridPos"`
}

const dashboardFile = "dashboards/mongoferry-synctask.json"

func readDashboard(t *testing.T) ([]byte, dashboard) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir(t), dashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return b, d
}

// requiredPanels are what a migration owner looks at, per task.
var requiredPanels = []string{
	"Phase", "Copy progress", "Lag", "Checkpoint age", "Applied ops/s by operation", "Bytes/s",
	"Buffered bytes", "Write latency p50 / p99", "Errors and retries", "Lag per shard",
	"Lag per shard heatmap", "Writes per command", "Held writes", "Verification mismatches", "Time to catch up", "Oplog headroom",
}

// TestMonitoringMetricNames parses every alert expression and every
// dashboard query and fails on a metric (or a label) the code does not
// export.
func TestMonitoringMetricNames(t *testing.T) {
	e := exportedMetrics(t)

	rules := alertRules(t, renderMonitoring(t, "--set", "monitoring.prometheusRule.enabled=true"))
	if len(rules) == 0 {
		t.Fatal("no alert rules rendered")
	}
	for _, r := range rules {
		checkQuery(t, e, "alert "+r.Alert, r.Expr)
	}

	_, d := readDashboard(t)
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			where := fmt.Sprintf("panel %q", p.Title)
			for _, vs := range checkQuery(t, e, where, expandGrafana(t, tg.Expr)) {
				// Every query is about the chosen task.
				taskLabel := "task"
				if strings.HasPrefix(vs.Name, "mongoferry_synctask_") {
					taskLabel = "synctask"
				}
				if matcherValue(vs, "namespace") != grafanaVars["namespace"] || matcherValue(vs, taskLabel) != grafanaVars["task"] {
					t.Errorf("%s: %s is not filtered on namespace=\"$namespace\", %s=\"$task\"", where, vs, taskLabel)
				}
			}
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		for _, vs := range checkQuery(t, e, "variable "+v.Name, expandGrafana(t, m[1])) {
			if !slices.Contains(e[vs.Name], m[2]) {
				t.Errorf("variable %s: %s has no label %s", v.Name, vs.Name, m[2])
			}
		}
	}

	// docs/metrics.md documents every metric the code exports.
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name := range e {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "mongoferry_") && !strings.Contains(string(doc), "`"+base+"`") {
			t.Errorf("docs/metrics.md does not document %s", base)
		}
	}
}

// TestDashboard checks the dashboard's shape: a stable uid, datasource,
// namespace and task variables, every panel on the datasource variable,
// the panels a migration owner needs, and the ConfigMap that ships it.
func TestDashboard(t *testing.T) {
	raw, d := readDashboard(t)
	if d.UID != "mongoferry-synctask" || d.Title == "" {
		t.Errorf("uid %q, title %q; want the stable uid mongoferry-synctask", d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "datasource" && string(v.Query) != `"prometheus"` {
			t.Errorf("datasource variable %s queries %s, want prometheus", v.Name, v.Query)
		}
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != "${datasource}") {
			t.Errorf("variable %s reads datasource %+v, want ${datasource}", v.Name, v.Datasource)
		}
	}
	if want := map[string]string{"datasource": "datasource", "namespace": "query", "task": "query"}; !maps.Equal(vars, want) {
		t.Errorf("variables %v, want %v", vars, want)
	}
	ids := map[int]bool{}
	var titles []string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos == nil || p.GridPos.W == 0 || p.GridPos.H == 0 {
			t.Errorf("panel %q has no size", p.Title)
		}
		if p.Type == "row" {
			continue
		}
		if slices.Contains(titles, p.Title) {
			t.Errorf("two panels titled %q", p.Title)
		}
		titles = append(titles, p.Title)
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %+v, %d queries; want ${datasource} and queries", p.Title, p.Datasource, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" || tg.Expr == "" {
				t.Errorf("panel %q: a query without expression or on datasource %+v", p.Title, tg.Datasource)
			}
		}
	}
	for _, want := range requiredPanels {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q (panels: %q)", want, titles)
		}
	}

	// The ConfigMap holds the file as it is, with the sidecar's label and
	// the folder annotation the values name.
	cm := findOne(t, render(t, "--set", "monitoring.dashboard.enabled=true", "--set", "monitoring.dashboard.folder=Data Platform",
		"--set", "monitoring.dashboard.folderAnnotation=k8s-sidecar-target-directory", "--set", "monitoring.dashboard.namespace=monitoring"), "ConfigMap", releaseName+"-dashboard")
	if got, _, _ := unstructured.NestedString(cm.Object, "data", "mongoferry-synctask.json"); got != strings.TrimRight(string(raw), "\n") {
		t.Error("the dashboard ConfigMap does not hold " + dashboardFile + " as it is")
	}
	if cm.GetLabels()["grafana_dashboard"] != "1" || cm.GetAnnotations()["k8s-sidecar-target-directory"] != "Data Platform" || cm.GetNamespace() != "monitoring" {
		t.Errorf("dashboard ConfigMap %s/%s labels %v annotations %v", cm.GetNamespace(), cm.GetName(), cm.GetLabels(), cm.GetAnnotations())
	}
	cm = findOne(t, render(t, "--set", "monitoring.dashboard.enabled=true"), "ConfigMap", releaseName+"-dashboard")
	if cm.GetAnnotations()["grafana_folder"] != "MongoFerry" || cm.GetNamespace() != releaseNamespace {
		t.Errorf("default dashboard ConfigMap %s annotations %v", cm.GetNamespace(), cm.GetAnnotations())
	}
}

// alertRule is one rule of the PrometheusRule.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func alertRules(t *testing.T, objs []*unstructured.Unstructured) []alertRule {
	t.Helper()
	pr := findOne(t, objs, "PrometheusRule", "")
	var spec struct {
		Groups []struct {
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	b, err := json.Marshal(pr.Object["spec"])
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range spec.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// The alerts a migration owner needs, each with a runbook.
var wantAlerts = []string{
	"MongoFerryLagHigh", "MongoFerrySyncTaskDegraded", "MongoFerrySyncTaskFailed", "MongoFerryCopyStalled",
	"MongoFerryOplogWindowLost", "MongoFerryOplogHeadroomLow", "MongoFerryCheckpointStalled", "MongoFerryWorkerRestarting",
}

// TestAlerts: every alert has a severity, a summary, a description and a
// runbook_url pointing at its section of docs/runbooks.md; the thresholds
// come from the values; an alert can be turned off.
func TestAlerts(t *testing.T) {
	runbooks, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := runbookSections(string(runbooks))
	rules := alertRules(t, renderMonitoring(t, "--set", "monitoring.prometheusRule.enabled=true"))
	var names []string
	for _, r := range rules {
		names = append(names, r.Alert)
		if r.Labels["severity"] == "" {
			t.Errorf("%s has no severity", r.Alert)
		}
		for _, a := range []string{"summary", "description"} {
			if len(r.Annotations[a]) < 20 || !strings.Contains(r.Annotations[a], "{{ $labels.") {
				t.Errorf("%s: %s %q should say which task, with $labels", r.Alert, a, r.Annotations[a])
			}
		}
		want := "https://github.com/mongoferry/mongoferry/blob/main/docs/runbooks.md#" + strings.ToLower(r.Alert)
		if r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %s", r.Alert, r.Annotations["runbook_url"], want)
		}
		body, ok := sections[r.Alert]
		if !ok {
			t.Errorf("docs/runbooks.md has no section ## %s", r.Alert)
			continue
		}
		for _, part := range []string{"**Meaning**", "**Impact**", "**Diagnosis**", "**Mitigation**"} {
			if !strings.Contains(body, part) {
				t.Errorf("docs/runbooks.md ## %s has no %s", r.Alert, part)
			}
		}
		if !strings.Contains(body, strings.TrimSpace(firstLine(r.Expr))) {
			t.Errorf("docs/runbooks.md ## %s does not show the alert's expression (first line %q)", r.Alert, firstLine(r.Expr))
		}
	}
	if !slices.Equal(names, wantAlerts) {
		t.Errorf("alerts %v, want %v", names, wantAlerts)
	}

	// The values set thresholds, durations and severities.
	rules = alertRules(t, renderMonitoring(t, "--values", filepath.Join(chartDir(t), "ci", "monitoring-values.yaml"),
		"--set", "monitoring.prometheusRule.alerts.copyStalled.minutes=45", "--set", "monitoring.prometheusRule.alerts.checkpointStalled.minutes=20",
		"--set", "monitoring.prometheusRule.alerts.oplogWindowLost.severity=page"))
	byName := map[string]alertRule{}
	for _, r := range rules {
		byName[r.Alert] = r
	}
	for name, want := range map[string]string{
		"MongoFerryLagHigh":           "> 120",
		"MongoFerryWorkerRestarting":  "[30m])) >= 5",
		"MongoFerryCopyStalled":       "[45m]",
		"MongoFerryCheckpointStalled": "> 1200)",
	} {
		if !strings.Contains(byName[name].Expr, want) {
			t.Errorf("%s: expr %q lacks %q", name, byName[name].Expr, want)
		}
	}
	if byName["MongoFerryLagHigh"].For != "15m" || byName["MongoFerryOplogWindowLost"].Labels["severity"] != "page" {
		t.Errorf("lag for %q, window lost severity %q", byName["MongoFerryLagHigh"].For, byName["MongoFerryOplogWindowLost"].Labels["severity"])
	}
	for _, r := range alertRules(t, renderMonitoring(t, "--set", "monitoring.prometheusRule.enabled=true", "--set", "monitoring.prometheusRule.alerts.lagHigh.enabled=false")) {
		if r.Alert == "MongoFerryLagHigh" {
			t.Error("lagHigh.enabled=false still renders MongoFerryLagHigh")
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// runbookSections maps each "## Name" heading of a Markdown file to the
// text up to the next such heading.
func runbookSections(doc string) map[string]string {
	out := map[string]string{}
	parts := strings.Split("\n"+doc, "\n## ")
	for _, p := range parts[1:] {
		title, body, _ := strings.Cut(p, "\n")
		out[strings.TrimSpace(title)] = body
	}
	return out
}
