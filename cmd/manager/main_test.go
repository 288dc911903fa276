package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/internal/version"
)

// One control plane and one pair of static binaries for the package's
// tests, started or built by the first test that needs them and removed in
// TestMain.
var (
	envOnce   sync.Once
	sharedEnv *envtestutil.Env
	envErr    error

	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	code := m.Run()
	if sharedEnv != nil {
		if err := sharedEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop envtest control plane:", err)
		}
	}
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// testEnv returns the package's control plane, starting it on first use.
func testEnv(t *testing.T) *envtestutil.Env {
	t.Helper()
	testutil.SkipInShort(t, "the envtest control plane")
	envOnce.Do(func() { sharedEnv, envErr = envtestutil.New() })
	if envErr != nil {
		t.Fatal(envErr)
	}
	return sharedEnv
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := envtestutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// The flags the Dockerfile stamps the version and the default worker image
// with; TestStaticDockerfile checks that the Dockerfile uses them.
const (
	versionLDFlag = "-X github.com/mongoferry/mongoferry/internal/version.Version="
	imageLDFlag   = "-X main.defaultWorkerImage="

	testVersion = "v9.9.9-static-test"
	testImage   = "registry.example.invalid/mongoferry:static-test"
)

// staticBinaries builds /manager and /ferry as the Dockerfile does
// (CGO_ENABLED=0, -trimpath, -s -w, version and image stamped) and returns
// the directory holding them.
func staticBinaries(t *testing.T) string {
	t.Helper()
	testutil.SkipInShort(t, "the manager and ferry built by the test")
	if runtime.GOOS != "linux" {
		t.Skip("the image's binaries are linux ones")
	}
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		root, err := envtestutil.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "mongoferry-static-"); buildErr != nil {
			return
		}
		for _, b := range []struct{ name, ldflags string }{
			{"manager", "-s -w " + versionLDFlag + testVersion + " " + imageLDFlag + testImage},
			{"ferry", "-s -w " + versionLDFlag + testVersion},
		} {
			cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", b.ldflags, "-o", filepath.Join(buildDir, b.name), "./cmd/"+b.name)
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("CGO_ENABLED=0 %s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// managerFlags is the manager's flag set, as main defines it.
func managerFlags() (*flag.FlagSet, *options) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	o := bindFlags(fs)
	config.RegisterFlags(fs)
	return fs, o
}

func TestFlagDefaults(t *testing.T) {
	fs, o := managerFlags()
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if o.metricsAddr != ":8080" || o.probeAddr != ":8081" || o.leaderElect {
		t.Errorf("defaults: metrics %q, probes %q, leader election %v; want :8080, :8081, false", o.metricsAddr, o.probeAddr, o.leaderElect)
	}
	if want := "ghcr.io/mongoferry/mongoferry:" + version.Version; o.workerImage != want {
		t.Errorf("--worker-image defaults to %q, want %q", o.workerImage, want)
	}
	if fs.Lookup("kubeconfig") == nil {
		t.Error("no --kubeconfig flag")
	}
	if o.watchNamespaces != "" || !o.workerPodMonitors {
		t.Errorf("defaults: --watch-namespaces %q, --worker-podmonitors %v; want every namespace and a PodMonitor per task", o.watchNamespaces, o.workerPodMonitors)
	}
}

func TestParseNamespaces(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"", nil, ""},
		{"shop", []string{"shop"}, ""},
		{" shop , billing,,shop ", []string{"shop", "billing"}, ""},
		{"shop,Billing", nil, `--watch-namespaces: "Billing" is not a namespace name: a lowercase RFC 1123 label`},
	} {
		got, err := parseNamespaces(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("parseNamespaces(%q): %v, want %s", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseNamespaces(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestNewLogger(t *testing.T) {
	var b strings.Builder
	log, err := newLogger(&b, "json", "warn")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "task", "t1")
	if got := b.String(); strings.Contains(got, "hidden") || !strings.Contains(got, `"msg":"shown","task":"t1"`) {
		t.Errorf("json at warn wrote %q", got)
	}
	for _, tc := range []struct{ format, level, want string }{
		{"yaml", "info", `--log-format: "yaml" is not json or text`},
		{"text", "loud", `--log-level: "loud" is not one of debug, info, warn, error`},
	} {
		if _, err := newLogger(&b, tc.format, tc.level); err == nil || err.Error() != tc.want {
			t.Errorf("newLogger(%q, %q) = %v, want %s", tc.format, tc.level, err, tc.want)
		}
	}
}
