package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// promtoolPath returns bin/promtool (built by `make prometheus`, which
// `make test` runs), or $PROMTOOL.
func promtoolPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		p = filepath.Join(repoRoot(t), "bin", "promtool")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("promtool not found at %s: run `make prometheus` in the repository (`make test` does), or set PROMTOOL", p)
	}
	return p
}

// renderedRules writes the spec of the PrometheusRule the chart renders
// with its defaults (and extra) to dir/rules.yaml: a Prometheus rule file,
// as the prometheus-operator hands it to Prometheus.
func renderedRules(t *testing.T, dir string, extra ...string) string {
	t.Helper()
	pr := findOne(t, renderMonitoring(t, append([]string{"--set", "monitoring.prometheusRule.enabled=true"}, extra...)...), "PrometheusRule", "")
	b, err := yaml.Marshal(pr.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAlertRulesPromtool runs `promtool check rules` on the rendered
// PrometheusRule and `promtool test rules` on every file under
// testdata/rules: for each alert, synthetic series that fire it (with the
// labels and annotations the fired alert carries) and series that must
// stay quiet. Every alert of the chart has a file.
func TestAlertRulesPromtool(t *testing.T) {
	promtool := promtoolPath(t)
	dir := t.TempDir()
	rules := renderedRules(t, dir)
	if out, err := exec.Command(promtool, "check", "rules", "--lint-fatal", rules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}

	tests, err := filepath.Glob(filepath.Join("testdata", "rules", "*.yaml"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no rule tests under testdata/rules (%v)", err)
	}
	tested := map[string]bool{}
	for _, f := range tests {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Tests []struct {
				AlertRuleTest []struct {
					Alertname string `json:"alertname"`
				} `json:"alert_rule_test"`
			} `json:"tests"`
		}
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tc := range doc.Tests {
			for _, a := range tc.AlertRuleTest {
				tested[a.Alertname] = true
			}
		}
		// The test files name rules.yaml, which sits beside them in dir.
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range tests {
		name := filepath.Base(f)
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			cmd := exec.Command(promtool, "test", "rules", name)
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("promtool test rules %s: %v\n%s", f, err, out)
			}
		})
	}
	for _, a := range wantAlerts {
		if !tested[a] {
			t.Errorf("no promtool test under testdata/rules fires or checks %s", a)
		}
	}
	for a := range tested {
		if !slices.Contains(wantAlerts, a) {
			t.Errorf("testdata/rules tests %s, which the chart does not have", a)
		}
	}
}
