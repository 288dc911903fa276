package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testutil"
)

// promServer is a Prometheus server (bin/prometheus, built by `make
// prometheus`) on a loopback port: it scrapes the manager's endpoint
// (honor_labels, as the chart's ServiceMonitor) and the worker pods listed
// in a file (as a PodMonitor would, with the pod's namespace and name as
// target labels), every second, and evaluates the chart's alert rules every
// second.
type promServer struct {
	url     string
	workers string // the file_sd file of worker targets

	mu      sync.Mutex
	targets map[string]promTarget
	// seen holds each alert (by its labels) as it was first seen firing:
	// an alert of a worker that stops is resolved with its series.
	seen []seenAlert
}

// seenAlert is an alert as first seen firing.
type seenAlert struct {
	At time.Time `json:"seenFiringAt"`
	promAlert
}

type promTarget struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// repoBinary returns bin/<name> of the repository, or fails with how to
// build it.
func repoBinary(t *testing.T, name, make string) string {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "bin", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found at %s: run `%s` in the repository (`make test` does)", name, p, make)
	}
	return p
}

// chartRules renders the chart's PrometheusRule with the given values
// (YAML) and returns its spec: a Prometheus rule file.
func chartRules(t *testing.T, values string) []byte {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"template", "mongoferry", filepath.Join(root, "charts", "mongoferry"), "--api-versions", "monitoring.coreos.com/v1",
		"--show-only", "templates/prometheusrule.yaml", "--set", "monitoring.prometheusRule.enabled=true"}
	home := t.TempDir()
	vf := filepath.Join(home, "values.yaml")
	if err := os.WriteFile(vf, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	args = append(args, "--values", vf)
	cmd := exec.Command(repoBinary(t, "helm", "make helm"), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home, "KUBECONFIG="+filepath.Join(home, "none"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	var pr struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := yaml.Unmarshal(out, &pr); err != nil {
		t.Fatal(err)
	}
	rules, err := yaml.JSONToYAML(pr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// startPrometheus starts the server with rules, scraping the manager at
// managerAddr (host:port); it stops when the test ends.
func startPrometheus(t *testing.T, rules []byte, managerAddr string) *promServer {
	t.Helper()
	bin := repoBinary(t, "prometheus", "make prometheus")
	dir := t.TempDir()
	p := &promServer{workers: filepath.Join(dir, "workers.json"), targets: map[string]promTarget{}}
	p.writeTargets(t)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [rules.yaml]
scrape_configs:
  - job_name: manager
    honor_labels: true
    static_configs: [{targets: [%q]}]
  - job_name: workers
    file_sd_configs: [{files: [%q], refresh_interval: 1s}]
`, managerAddr, p.workers)
	for name, b := range map[string][]byte{"prometheus.yml": []byte(cfg), "rules.yaml": rules} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := testutil.FreeAddr(t)
	var logBuf bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus log:\n%s", logBuf.String())
		}
	})
	p.url = "http://" + addr
	waitFor(t, "Prometheus to be ready", time.Minute, func() bool {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	watchCtx, stopWatch := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for watchCtx.Err() == nil {
			p.noteFiring()
			time.Sleep(500 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { stopWatch(); <-watched })
	return p
}

// noteFiring records the alerts firing now that were not seen before.
func (p *promServer) noteFiring() {
	var body struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/alerts", &body); err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range body.Data.Alerts {
		if a.State != "firing" {
			continue
		}
		key := fmt.Sprint(a.Labels)
		known := false
		for _, s := range p.seen {
			if fmt.Sprint(s.Labels) == key {
				known = true
			}
		}
		if !known {
			p.seen = append(p.seen, seenAlert{At: time.Now().UTC(), promAlert: a})
		}
	}
}

// setWorker adds (or, with an empty address, removes) a worker pod's
// /metrics target.
func (p *promServer) setWorker(t *testing.T, ns, pod, addr string) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	key := ns + "/" + pod
	if old, ok := p.targets[key]; ok && len(old.Targets) == 1 && old.Targets[0] == addr {
		return
	}
	if addr == "" {
		delete(p.targets, key)
	} else {
		p.targets[key] = promTarget{Targets: []string{addr}, Labels: map[string]string{"namespace": ns, "pod": pod}}
	}
	p.writeTargetsLocked(t)
}

func (p *promServer) writeTargets(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.writeTargetsLocked(t)
}

func (p *promServer) writeTargetsLocked(t *testing.T) {
	list := []promTarget{}
	for _, tg := range p.targets {
		list = append(list, tg)
	}
	b, err := json.Marshal(list)
	if err != nil {
		t.Error(err)
		return
	}
	// Prometheus watches the file: replace it whole.
	tmp := p.workers + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Error(err)
	} else if err := os.Rename(tmp, p.workers); err != nil {
		t.Error(err)
	}
}

// promSample is one series of an instant query's result.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) float() float64 {
	str, _ := s.Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return 0
	}
	return v
}

// query evaluates an instant query now through the HTTP API.
func (p *promServer) query(t *testing.T, q string) ([]promSample, error) {
	t.Helper()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(q), &body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, body.Error)
	}
	switch body.Data.ResultType {
	case "vector":
		var out []promSample
		err := json.Unmarshal(body.Data.Result, &out)
		return out, err
	case "scalar":
		var v [2]any
		err := json.Unmarshal(body.Data.Result, &v)
		return []promSample{{Value: v}}, err
	}
	return nil, fmt.Errorf("query %s: result type %s", q, body.Data.ResultType)
}

// promAlert is one alert of /api/v1/alerts.
type promAlert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

// alerts returns the pending and firing alerts.
func (p *promServer) alerts(t *testing.T) []promAlert {
	t.Helper()
	var body struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/alerts", &body); err != nil {
		t.Fatal(err)
	}
	return body.Data.Alerts
}

// firedOnce returns the alert of that name whose labels include the given
// ones as it was first seen firing, if it has fired since Prometheus
// started.
func (p *promServer) firedOnce(name string, labels map[string]string) (seenAlert, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.seen {
		if a.Labels["alertname"] != name {
			continue
		}
		match := true
		for k, v := range labels {
			if a.Labels[k] != v {
				match = false
			}
		}
		if match {
			return a, true
		}
	}
	return seenAlert{}, false
}

func (p *promServer) get(path string, into any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	return json.NewDecoder(resp.Body).Decode(into)
}

// expandPanelQuery replaces the dashboard's variables in a panel's query.
func expandPanelQuery(q, ns, task, rateInterval string) string {
	return strings.NewReplacer("$__rate_interval", rateInterval, "${namespace}", ns, "$namespace", ns, "${task}", task, "$task", task).Replace(q)
}
