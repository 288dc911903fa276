package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// TestWorkerLogsJSON runs `ferry run --log-format json` as an operator's
// worker runs it (progress as log lines), here at debug level: a copy
// that verifies, one whose verification finds a difference (exit 2) and
// one with a wrong password (exit 1). Every line of stdout and stderr is
// one JSON record with time, level and msg, the verification report
// included; the last record of a failed run is ferry's error (level
// ERROR, msg "ferry", err), what the operator quotes; the servers'
// password, in the source URI and the environment, appears nowhere.
func TestWorkerLogsJSON(t *testing.T) {
	src := testserver.Start(t, testserver.Options{Username: "ferry", Password: canary})
	dst := testserver.Start(t, testserver.Options{Username: "ferry", Password: canary, OplogBytes: -1})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	docs := make([]any, 200)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: fmt.Sprintf("value-%d", i)}}
	}
	insertDocs(t, sc, "app", "orders", docs)
	// A document the copy skips (onConflict: skip) differs on the target.
	if _, err := dc.Database("app2").Collection("orders").InsertOne(context.Background(), bson.D{{Key: "_id", Value: int32(1)}, {Key: "v", Value: "different"}}); err != nil {
		t.Fatal(err)
	}
	bin := ferryBinary(t)
	srcURI := fmt.Sprintf("mongodb://ferry:%s@%s/?directConnection=true", canary, src.Addr)
	for _, c := range []struct {
		name, extra, password string
		code                  int
		want                  []string // msgs of records
		last                  string   // in the last record's err
	}{
		{"verified", "verify: {mode: hash}", canary, workerapi.ExitDone,
			[]string{"starting", "verification: the namespace matches", "done"}, ""},
		{"verification differs", "namespaces: {rename: [{from: app, to: app2}]}\nfullSync: {onConflict: skip}\nverify: {mode: hash}", canary,
			workerapi.ExitVerificationFailed, []string{"verification: the namespace differs"}, "verification found differences"},
		{"wrong password", "", canary + "-wrong", workerapi.ExitFailed, nil, "target"},
	} {
		t.Run(c.name, func(t *testing.T) {
			task := writeFile(t, fmt.Sprintf("name: logs-%s\nmode: full\nsource: {uri: %q}\ntarget: {uri: %q, username: ferry, passwordEnv: FERRY_PW}\n%s\n",
				strings.ReplaceAll(c.name, " ", "-"), srcURI, dst.URI, c.extra))
			stdout, stderr, code := ferryCommand(t, bin, []string{"FERRY_PW=" + c.password}, "",
				"run", "-f", task, "--log-format", "json", "--log-level", "debug", "--progress", "log", "--progress-interval", "200ms", "--listen", "")
			if code != c.code {
				t.Fatalf("exit code %d, want %d\nstderr:\n%s", code, c.code, stderr)
			}
			recordLines(t, "stdout", stdout)
			if recordLines(t, "stderr", stderr) == 0 {
				t.Fatal("nothing logged")
			}
			if strings.Contains(stdout+stderr, canary) {
				t.Errorf("the password appears in the output:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
			var msgs []string
			var last struct{ Level, Msg, Err string }
			for _, line := range strings.Split(strings.TrimSpace(stdout+stderr), "\n") {
				if json.Unmarshal([]byte(line), &last) == nil {
					msgs = append(msgs, last.Msg)
				}
			}
			for _, w := range c.want {
				if !strings.Contains(strings.Join(msgs, "\n"), w) {
					t.Errorf("no record %q among %q", w, msgs)
				}
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			last = struct{ Level, Msg, Err string }{}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
				t.Fatal(err)
			}
			t.Logf("last record: %s", lines[len(lines)-1])
			if c.last != "" && (last.Level != "ERROR" || last.Msg != "ferry" || !strings.Contains(last.Err, c.last)) {
				t.Errorf("last record %+v, want level ERROR, msg ferry, err with %q", last, c.last)
			}
		})
	}
	assertSameDocs(t, sc, "app.orders", dc, "app.orders")
}
