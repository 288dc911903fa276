package containers

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/internal/podrunner"
)

// TestSuiteNeverPassesSilently runs this package's image tests again, in a
// child process of this test binary, where containers cannot run: they
// skip only when nothing asks for containers, and fail, naming the cause
// and the fix, when make test-containers asks for them
// (MONGOFERRY_CONTAINERS=required) and podman is missing, broken or not
// selected. It needs no podman: the podman of the child is a script.
func TestSuiteNeverPassesSilently(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A podman that has the image but cannot run a container, as on a
	// machine without the rights to create one.
	fake := t.TempDir()
	script := "#!/bin/sh\nfor a in \"$@\"; do case $a in\n" +
		"image) echo sha256:0123; exit 0;;\n" +
		"run|create|start) echo 'Error: runc: fake podman: creating a container is not allowed here' >&2; exit 126;;\n" +
		"esac; done\nexit 125\n"
	if err := os.WriteFile(filepath.Join(fake, "podman"), []byte(script), 0o755); err != nil { //nolint:gosec // G306: an executable
		t.Fatal(err)
	}
	empty := t.TempDir()
	const img = "localhost/mongoferry:never-built"

	for _, tc := range []struct {
		name     string
		env      []string // besides PATH
		path     string
		wantFail bool
		want     []string
	}{{
		name: "nothing asks for containers: skips and says how to run them",
		path: empty,
		want: []string{"--- SKIP: TestImageLayout", "--- SKIP: TestImageLogsJSON", podrunner.RuntimeEnv + "=podman (make test-containers)"},
	}, {
		name:     "required without the podman runtime",
		env:      []string{podrunner.RequiredEnv + "=required"},
		path:     empty,
		wantFail: true,
		want:     []string{"--- FAIL: TestImageLayout", "--- FAIL: TestImageLogsJSON", podrunner.RequiredEnv + "=required, but " + podrunner.RuntimeEnv + `=""`},
	}, {
		name:     "required, podman not installed",
		env:      []string{podrunner.RequiredEnv + "=required", podrunner.RuntimeEnv + "=podman", podrunner.ImageEnv + "=" + img},
		path:     empty,
		wantFail: true,
		want:     []string{"--- FAIL: TestImageLayout", "podman is not installed", "make container-tools"},
	}, {
		name:     "required, podman cannot run a container",
		env:      []string{podrunner.RequiredEnv + "=required", podrunner.RuntimeEnv + "=podman", podrunner.ImageEnv + "=" + img},
		path:     fake,
		wantFail: true,
		want: []string{"--- FAIL: TestImageLayout", "--- FAIL: TestImageLogsJSON", "podman cannot run a container of " + img,
			"fake podman: creating a container is not allowed here", "make container-tools"},
	}, {
		name:     "podman runtime asked for by hand, podman cannot run a container",
		env:      []string{podrunner.RuntimeEnv + "=podman", podrunner.ImageEnv + "=" + img},
		path:     fake,
		wantFail: true,
		want:     []string{"--- FAIL: TestImageLayout", "podman cannot run a container of " + img},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(self, "-test.run", "^(TestImageLayout|TestImageLogsJSON)$", "-test.count=1", "-test.v") //nolint:gosec // G204: this test binary
			cmd.Env = append(childEnv(), "PATH="+tc.path)
			cmd.Env = append(cmd.Env, tc.env...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var ee *exec.ExitError
			switch {
			case tc.wantFail && !errors.As(err, &ee):
				t.Fatalf("the suite did not fail (%v):\n%s", err, out.String())
			case !tc.wantFail && err != nil:
				t.Fatalf("the suite failed (%v):\n%s", err, out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the suite's output does not say %q:\n%s", w, out.String())
				}
			}
			if tc.wantFail && strings.Contains(out.String(), "--- SKIP") {
				t.Errorf("a test skipped where containers are required:\n%s", out.String())
			}
		})
	}
}

// childEnv is this process's environment without PATH and the container
// mode's variables.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "PATH", podrunner.RuntimeEnv, podrunner.ImageEnv, podrunner.RequiredEnv:
			continue
		}
		env = append(env, kv)
	}
	return env
}
