package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

func getStatus(addr string) (engine.Status, error) {
	var s engine.Status
	resp, err := http.Get("http://" + addr + "/status")
	if err != nil {
		return s, err
	}
	defer func() { _ = resp.Body.Close() }()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func rangeStates(t *testing.T, dst *testserver.Server, task string) map[string]checkpoint.Range {
	t.Helper()
	cur, err := dst.MustClient(t).Database("mongoferry").Collection(checkpoint.RangesCollection).Find(context.Background(), bson.D{{Key: "task", Value: task}})
	if err != nil {
		t.Fatal(err)
	}
	var rs []checkpoint.Range
	if err := cur.All(context.Background(), &rs); err != nil {
		t.Fatal(err)
	}
	out := map[string]checkpoint.Range{}
	for _, r := range rs {
		out[r.ID] = r
	}
	return out
}

// TestCopyKilledAndResumed kills `ferry run` with SIGKILL midway through
// the copy, runs it again, and checks that the target equals the source
// and that ranges finished before the kill were not copied again.
func TestCopyKilledAndResumed(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "app", "mixed", mixedIDDocs(6000))
	docs := make([]any, 6000)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("user%08d", i)}, {Key: "field0", Value: strings.Repeat("v", 200)}}
	}
	insertDocs(t, sc, "shop", "users", docs)

	taskYAML := func(rate int) string {
		return fmt.Sprintf(`name: resume
mode: full
source: {uri: %q}
target: {uri: %q}
threads: {readers: 2, writers: 2}
cache: {batchSize: 100}
fullSync: {rangeDocuments: 500, split: always}
rateLimit: %d
verify: {mode: hash}
`, src.URI, dst.URI, rate)
	}
	bin := ferryBinary(t)
	addr := testutil.FreeAddr(t)

	// First run, slowed down so it can be stopped midway.
	first := exec.Command(bin, "run", "-f", writeFile(t, taskYAML(1500)), "--progress", "none", "--listen", addr)
	first.Stdout, first.Stderr = io.Discard, os.Stderr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	var killedAt engine.Status
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if time.Now().After(deadline) {
			_ = first.Process.Kill()
			t.Fatal("the first run never reached the middle of the copy")
		}
		time.Sleep(100 * time.Millisecond)
		s, err := getStatus(addr)
		if err != nil {
			continue
		}
		if s.Copy.RangesDone >= 4 && s.Copy.RangesDone < s.Copy.Ranges-4 {
			killedAt = s
			break
		}
	}
	metricsText := scrape(t, addr)
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	for _, want := range []string{`mongoferry_copy_documents_total{task="resume"}`, `mongoferry_task_phase{phase="FullSync",task="resume"} 1`, "mongoferry_write_batch_duration_seconds_bucket"} {
		if !strings.Contains(metricsText, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	before := rangeStates(t, dst, "resume")
	var doneBefore []string
	for id, r := range before {
		if r.State == checkpoint.RangeDone {
			doneBefore = append(doneBefore, id)
		}
	}
	t.Logf("killed at %d/%d ranges, %d documents; %d ranges recorded done", killedAt.Copy.RangesDone, killedAt.Copy.Ranges, killedAt.Copy.Documents, len(doneBefore))
	if len(doneBefore) == 0 || len(doneBefore) == len(before) {
		t.Fatalf("kill did not land midway: %d of %d ranges done", len(doneBefore), len(before))
	}

	// Second run to the end.
	second := exec.Command(bin, "run", "-f", writeFile(t, taskYAML(0)), "--progress", "none", "--listen", "")
	out, err := second.CombinedOutput()
	if err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	assertSameDocs(t, sc, "app.mixed", dc, "app.mixed")
	assertSameDocs(t, sc, "shop.users", dc, "shop.users")

	after := rangeStates(t, dst, "resume")
	if len(after) != len(before) {
		t.Fatalf("the plan changed on resume: %d ranges before, %d after", len(before), len(after))
	}
	for _, id := range doneBefore {
		if after[id].Attempts != before[id].Attempts {
			t.Errorf("range %s was finished before the kill but copied again (attempts %d -> %d)", id, before[id].Attempts, after[id].Attempts)
		}
	}
	for id, r := range after {
		if r.State != checkpoint.RangeDone {
			t.Errorf("range %s is %s after the second run", id, r.State)
		}
	}
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape /metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
