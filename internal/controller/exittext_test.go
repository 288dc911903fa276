package controller

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestExitText checks the line a failed worker's exit puts in the SyncTask's
// conditions: the last log line, read as a record when the worker logs JSON
// (the StatefulSet's --log-format json), and the same words either way.
func TestExitText(t *testing.T) {
	for _, c := range []struct {
		name string
		code int32
		msg  string
		want string
	}{
		{"text: the last line", 1, "time=1 level=INFO msg=starting\nferry: source: authentication failed at mongodb://src/",
			"exit code 1: ferry: source: authentication failed at mongodb://src/"},
		{"json: ferry's final error record", 3,
			`{"time":"2026-11-28T00:00:00Z","level":"INFO","msg":"starting","task":"orders"}` + "\n" +
				`{"time":"2026-11-28T00:00:01Z","level":"ERROR","msg":"ferry","err":"source: oplog window lost: checkpoint 1:1 is older than the oldest entry"}` + "\n",
			"exit code 3: ferry: source: oplog window lost: checkpoint 1:1 is older than the oldest entry"},
		{"json: the tail's first line cut, the last whole", 1,
			`:"INFO","msg":"copying"}` + "\n" + `{"time":"t","level":"ERROR","msg":"ferry","err":"check source.tls.caFile"}`,
			"exit code 1: ferry: check spec.source.tls.caSecret"},
		{"json: a record without err", 130,
			`{"time":"t","level":"INFO","msg":"stopped; run the same command again to continue from the checkpoint","task":"orders"}`,
			"exit code 130: stopped; run the same command again to continue from the checkpoint"},
		{"not json though it starts with a brace", 2, "{ not a record", "exit code 2: { not a record"},
		{"json without msg stays as it is", 1, `{"level":"ERROR"}`, `exit code 1: {"level":"ERROR"}`},
		{"empty: the reason", 137, "", "exit code 137: OOMKilled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := &corev1.ContainerStateTerminated{ExitCode: c.code, Message: c.msg}
			if c.msg == "" {
				e.Reason = "OOMKilled"
			}
			if got := exitText(e); got != c.want {
				t.Errorf("exitText = %q, want %q", got, c.want)
			}
		})
	}
	long := `{"level":"ERROR","msg":"ferry","err":"` + strings.Repeat("x", 2*maxTerminationMessageLen) + `"}`
	if got := exitText(&corev1.ContainerStateTerminated{ExitCode: 1, Message: long}); !strings.HasPrefix(got, "exit code 1: ferry: xxx") ||
		!strings.HasSuffix(got, "...") || len(got) > maxTerminationMessageLen+len("exit code 1: ...") {
		t.Errorf("a long record: %d bytes %q..., want cut at %d", len(got), got[:40], maxTerminationMessageLen)
	}
}
