package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecuteLastWord checks ferry's final error, what an operator's
// worker says last before it exits: under --log-format json one JSON
// record (time, level ERROR, msg "ferry", err), as every other line of its
// log; otherwise the line "ferry: <err>".
func TestExecuteLastWord(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "task.yaml")
	for _, c := range []struct {
		name string
		args []string
		json bool
	}{
		{"text by default", []string{"run", "-f", missing}, false},
		{"text", []string{"run", "--log-format", "text", "-f", missing}, false},
		{"json", []string{"run", "--log-format", "json", "-f", missing}, true},
		{"json, flag after the file", []string{"run", "-f", missing, "--log-format=json"}, true},
		{"cutover, json", []string{"cutover", "--log-format", "json", "-f", missing}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := Execute(context.Background(), c.args, &stderr); code != 1 {
				t.Fatalf("exit code %d, want 1; stderr:\n%s", code, stderr.String())
			}
			out := stderr.String()
			if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
				t.Fatalf("stderr is not one line:\n%s", out)
			}
			if !c.json {
				if !strings.HasPrefix(out, "ferry: ") || !strings.Contains(out, missing) {
					t.Errorf("stderr %q, want ferry: and the file", out)
				}
				return
			}
			var rec struct{ Time, Level, Msg, Err string }
			if err := json.Unmarshal([]byte(out), &rec); err != nil {
				t.Fatalf("stderr is not one JSON record: %v\n%s", err, out)
			}
			if rec.Time == "" || rec.Level != "ERROR" || rec.Msg != "ferry" || !strings.Contains(rec.Err, missing) {
				t.Errorf("record %+v, want time, level ERROR, msg ferry, err naming %s", rec, missing)
			}
		})
	}
}
