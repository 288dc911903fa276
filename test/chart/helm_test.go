package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/mongoferry/mongoferry/internal/envtestutil"
)

// The release the tests render: the names the README installs under.
const (
	releaseName      = "mongoferry"
	releaseNamespace = "mongoferry-system"
	// monitoringAPI is the API the monitoring objects need; helm template
	// has no cluster to ask, so the tests say it is there.
	monitoringAPI = "monitoring.coreos.com/v1"
)

// helmPath returns the Helm binary: $HELM when set, else bin/helm in the
// repository. The error says how to get it.
func helmPath() (string, error) {
	p := os.Getenv("HELM")
	how := "HELM names no executable file"
	if p == "" {
		root, err := envtestutil.RepoRoot()
		if err != nil {
			return "", err
		}
		p = filepath.Join(root, "bin", "helm")
		how = "run `make helm` in the repository to build it (`make test` does), or set HELM"
	}
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("helm not found at %s: %s", p, how)
	}
	return p, nil
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func chartDir(t *testing.T) string {
	t.Helper()
	return filepath.Join(repoRoot(t), "charts", "mongoferry")
}

// helm runs the Helm binary with args, with its caches and configuration
// in a temporary directory, and returns its stdout, or an error holding its
// stderr.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := helmPath()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
		// No cluster: helm template and lint must not look for one.
		"KUBECONFIG="+filepath.Join(home, "no-kubeconfig"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// renderArgs are the arguments of helm template for the release, followed
// by extra.
func renderArgs(t *testing.T, extra ...string) []string {
	return append([]string{"template", releaseName, chartDir(t), "--namespace", releaseNamespace}, extra...)
}

// render runs helm template on the chart with the extra arguments and
// decodes the objects.
func render(t *testing.T, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := helm(t, renderArgs(t, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, "helm template", []byte(out))
}

// renderMonitoring renders with the monitoring API available.
func renderMonitoring(t *testing.T, extra ...string) []*unstructured.Unstructured {
	t.Helper()
	return render(t, append([]string{"--api-versions", monitoringAPI}, extra...)...)
}

// ciValues lists the values files under the chart's ci/ directory.
func ciValues(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir(t), "ci", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no values files in charts/mongoferry/ci")
	}
	return files
}

// decodeObjects decodes every YAML document; empty ones are skipped.
func decodeObjects(t *testing.T, name string, b []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, path, b)
}

// find returns the objects of a kind, in rendering order.
func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// findOne returns the single object of a kind and name (any name when
// name is empty).
func findOne(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	var hit []*unstructured.Unstructured
	for _, o := range find(objs, kind) {
		if name == "" || o.GetName() == name {
			hit = append(hit, o)
		}
	}
	if len(hit) != 1 {
		t.Fatalf("%d %s objects named %q, want 1", len(hit), kind, name)
	}
	return hit[0]
}

// convert turns an unstructured object into a typed one.
func convert(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

func kinds(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if !slices.Contains(out, o.GetKind()) {
			out = append(out, o.GetKind())
		}
	}
	slices.Sort(out)
	return out
}

func TestHelmMissing(t *testing.T) {
	t.Run("repository without bin/helm", func(t *testing.T) {
		t.Setenv("HELM", "")
		repo := t.TempDir()
		if err := os.WriteFile(filepath.Join(repo, "go.mod"), []byte("module example.com/x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Chdir(repo)
		_, err := helmPath()
		want := "helm not found at " + filepath.Join(repo, "bin", "helm") +
			": run `make helm` in the repository to build it (`make test` does), or set HELM"
		if err == nil || err.Error() != want {
			t.Fatalf("helmPath: %v\nwant: %s", err, want)
		}
	})
	t.Run("HELM not executable", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "helm")
		if err := os.WriteFile(p, []byte("not a program"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("HELM", p)
		_, err := helmPath()
		if want := "helm not found at " + p + ": HELM names no executable file"; err == nil || err.Error() != want {
			t.Fatalf("helmPath: %v\nwant: %s", err, want)
		}
	})
}

// envOnce starts one control plane for the package's tests that need one.
var (
	envOnce   sync.Once
	sharedEnv *envtestutil.Env
	envErr    error
)

// testEnv returns the package's control plane with the MongoFerry CRDs and
// the prometheus-operator's ServiceMonitor, PodMonitor and PrometheusRule
// CRDs installed, starting it on first use.
func testEnv(t *testing.T) *envtestutil.Env {
	t.Helper()
	envOnce.Do(func() {
		root, err := envtestutil.RepoRoot()
		if err != nil {
			envErr = err
			return
		}
		sharedEnv, envErr = envtestutil.New(envtestutil.Options{
			CRDDirs: []string{filepath.Join(root, "test", "testdata", "prometheus-operator-crds")},
		})
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	return sharedEnv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedEnv != nil {
		if err := sharedEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop envtest control plane:", err)
		}
	}
	os.Exit(code)
}
