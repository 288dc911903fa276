package containers

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestImageLogsJSON runs the image's two binaries as containers under the
// chart's security context (user 65532, read-only root filesystem, every
// capability dropped, no privilege escalation), each to a failure it
// reports: the manager with no API server to talk to (its default
// --log-format json, the chart's logFormat), a worker's `ferry run` as the
// StatefulSet starts it (--log-format json) with a task that names no
// target. Each exits 1 and every line it wrote, its last word included, is
// one JSON record with time, level and msg.
func TestImageLogsJSON(t *testing.T) {
	img := image(t)
	for _, c := range []struct {
		name, entrypoint string
		args, env        []string
		want             string // in the last record's msg or err
	}{
		{"manager", "/manager", []string{"--metrics-bind-address=0", "--health-probe-bind-address=0"}, nil, "no Kubernetes API server"},
		{"worker", "/ferry", []string{"run", "--task-env", "MONGOFERRY_TASK", "--listen", "", "--progress", "log", "--log-format", "json"},
			[]string{"MONGOFERRY_TASK=name: orders\nmode: full\nsource: {uri: \"mongodb://127.0.0.1:1/\"}\n"}, "target"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"--runtime", "/usr/sbin/runc", "run", "--rm", "--network", "none",
				"--user", "65532:65532", "--read-only", "--read-only-tmpfs=false", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
				"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", "--entrypoint", c.entrypoint}
			for _, e := range c.env {
				args = append(args, "--env", e)
			}
			cmd := exec.Command("podman", append(append(args, img), c.args...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want exit status 1\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
			}
			out := strings.TrimSpace(stdout.String() + stderr.String())
			lines := strings.Split(out, "\n")
			var last map[string]any
			for i, line := range lines {
				last = nil
				if err := json.Unmarshal([]byte(line), &last); err != nil {
					t.Fatalf("line %d is not one JSON record: %q", i+1, line)
				}
				for _, key := range []string{"time", "level", "msg"} {
					if s, _ := last[key].(string); s == "" {
						t.Errorf("line %d has no %s: %q", i+1, key, line)
					}
				}
			}
			if last["level"] != "ERROR" || !strings.Contains(last["msg"].(string)+" "+stringOf(last["err"]), c.want) {
				t.Errorf("last record %v, want level ERROR and %q", last, c.want)
			}
			t.Logf("%d lines, each one JSON record; the last: %s", len(lines), lines[len(lines)-1])
		})
	}
}

func stringOf(v any) string {
	s, _ := v.(string)
	return s
}
