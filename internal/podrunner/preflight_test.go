package podrunner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakePodman puts a podman script on an otherwise empty PATH: it answers
// `podman ... image inspect` with inspect's exit code and output, and
// `podman ... run` with run's.
func fakePodman(t *testing.T, inspect, run string) {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\nfor a in \"$@\"; do case $a in\n" +
		"image) " + inspect + ";;\n" +
		"run) " + run + ";;\n" +
		"esac; done\necho 'Error: unexpected podman command' >&2; exit 125\n"
	if err := os.WriteFile(filepath.Join(dir, "podman"), []byte(script), 0o755); err != nil { //nolint:gosec // G306: an executable
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
}

// TestCheckPodman checks that container mode's preflight fails when
// podman cannot run a container, naming the cause (podman's words) and
// the fix, and passes when a container of the image prints the version.
func TestCheckPodman(t *testing.T) {
	const img = "localhost/mongoferry:check"
	for _, tc := range []struct {
		name          string
		noPodman      bool
		inspect, run  string
		want, wantErr []string
	}{{
		name: "no podman on the PATH", noPodman: true,
		wantErr: []string{"podman is not installed", "make container-tools"},
	}, {
		name:    "podman fails at everything",
		inspect: "echo 'Error: cannot re-exec process to join the existing user namespace' >&2; exit 1",
		wantErr: []string{"cannot find or read the image " + img, "cannot re-exec process", "make image IMG=" + img},
	}, {
		name:    "the OCI runtime cannot start a container",
		inspect: "echo sha256:0123; exit 0",
		run:     "echo 'Error: OCI runtime error: runc: container_linux.go:380: starting container process caused: permission denied' >&2; exit 126",
		wantErr: []string{"podman cannot run a container of " + img, "exit status 126", "runc: container_linux.go:380", "make container-tools"},
	}, {
		name:    "the container runs and exits 1",
		inspect: "echo sha256:0123; exit 0",
		run:     "exit 1",
		wantErr: []string{"podman cannot run a container", "exit status 1: no output"},
	}, {
		name:    "a container prints the version",
		inspect: "echo sha256:0123; exit 0",
		run:     "echo 'ferry v0.1.0'; exit 0",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noPodman {
				t.Setenv("PATH", t.TempDir())
			} else {
				fakePodman(t, tc.inspect, tc.run)
			}
			err := CheckPodman(context.Background(), img, "/usr/sbin/runc")
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("CheckPodman: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckPodman passed, want an error with %q", tc.wantErr)
			}
			t.Log(err)
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
