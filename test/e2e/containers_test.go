package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/podrunner"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// The tests of this file check what only a real container shows (a
// kubelet would catch it, a local process does not); they run with
// MONGOFERRY_POD_RUNTIME=podman (make test-containers) and skip otherwise,
// unless MONGOFERRY_CONTAINERS=required (make test-containers): then they
// fail, as they do when podman cannot run a container.
func requireContainerMode(t *testing.T) {
	t.Helper()
	podrunner.RequireContainerMode(t)
}

// runnerLines keeps the pod runner's lines for a test to read.
type runnerLines struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (r *runnerLines) logf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.lines = append(r.lines, s)
	r.mu.Unlock()
	r.t.Log(s)
}

func (r *runnerLines) matching(re *regexp.Regexp) [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out [][]string
	for _, l := range r.lines {
		if m := re.FindStringSubmatch(l); m != nil {
			out = append(out, m)
		}
	}
	return out
}

// TestContainerWorkerMemoryLimit copies 1 MiB documents (192 MiB) with a
// worker whose container has the memory limit docs/reliability.md promises
// is enough: cache.maxBytes 64MiB plus 100 MiB. The worker must not be
// OOM-killed or restart, and the target ends equal to the source. While it
// copies, /metrics and /status answer from the container on the port the
// worker Service names, and its log is one record per line.
func TestContainerWorkerMemoryLimit(t *testing.T) {
	requireContainerMode(t)
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	const docs, size = 192, 1 << 20
	payload := strings.Repeat("m", size-100)
	for start := 0; start < docs; start += 16 {
		batch := make([]any, 0, 16)
		for i := start; i < start+16; i++ {
			batch = append(batch, bson.D{{Key: "_id", Value: int32(i)}, {Key: "blob", Value: payload}})
		}
		insertDocs(t, sc, "big", "blobs", batch)
	}
	limit := resource.MustParse("164Mi")
	lines := &runnerLines{t: t}
	const name = "big"
	task := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, RunnerLogf: lines.logf,
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:     config.ModeFull,
			Source:   syncv1alpha1.Source{URI: src.URI},
			Target:   syncv1alpha1.Target{URI: dst.URI},
			Threads:  config.Threads{Readers: 4, Writers: 4},
			Cache:    config.Cache{MaxBytes: "64MiB", BatchSize: 1000, BucketNum: 4, BucketSize: 4},
			FullSync: config.FullSync{RangeDocuments: 24, Split: config.SplitAlways},
			Verify:   config.Verify{Mode: config.VerifyNone},
			Resources: &corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: limit},
			},
		},
	})

	var endpoints bool
	waitFor(t, "the copy to complete", 10*time.Minute, func() bool {
		for _, p := range workerPods(t, env.Client, ns, name) {
			for _, cs := range p.Status.ContainerStatuses {
				// Exit 0 (the copy done) restarts by the StatefulSet's
				// policy until the operator scales it down; anything else
				// is a failure.
				for _, term := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
					if term != nil && (term.ExitCode != 0 || term.Reason == "OOMKilled") {
						t.Fatalf("worker %s: exit code %d (%s) under a %s memory limit:\n%s", p.Name, term.ExitCode, term.Reason, limit.String(), term.Message)
					}
				}
			}
			if !endpoints && podReady(&p) {
				endpoints = true
				checkWorkerEndpoints(t, env, ns, name, &p)
			}
		}
		return task.get().Status.Phase == syncv1alpha1.PhaseCompleted
	})
	if !endpoints {
		t.Error("the worker was never Ready: /metrics and /status not checked")
	}
	assertSameDocs(t, sc, "big.blobs", dc, "big.blobs")

	files := task.runner.LogFiles()
	if len(files) == 0 {
		t.Fatal("no worker log")
	}
	out := oneRecordPerLine(t, files[0])
	m := regexp.MustCompile(`"peakRSSBytes":(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no peakRSSBytes in the worker's log")
	}
	rss, _ := strconv.ParseInt(m[1], 10, 64)
	t.Logf("copied %d MiB of 1 MiB documents in a container limited to %s (cache.maxBytes 64MiB): peak RSS %d MiB, no OOM kill, no restart",
		docs*size>>20, limit.String(), rss>>20)
}

// checkWorkerEndpoints reads /metrics and /status from a worker container
// on the port its Service's "metrics" port targets (what the chart's
// ServiceMonitor and PodMonitor scrape).
func checkWorkerEndpoints(t *testing.T, env *envtestutil.Env, ns, task string, pod *corev1.Pod) {
	t.Helper()
	var svc corev1.Service
	if err := env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: controller.WorkerName(task)}, &svc); err != nil {
		t.Fatal(err)
	}
	var port string
	for _, sp := range svc.Spec.Ports {
		if sp.Name != controller.MetricsPortName {
			continue
		}
		port = sp.TargetPort.String()
		for _, cp := range pod.Spec.Containers[0].Ports {
			if cp.Name == port {
				port = strconv.Itoa(int(cp.ContainerPort))
			}
		}
	}
	if port == "" {
		t.Fatalf("the worker Service has no %q port: %+v", controller.MetricsPortName, svc.Spec.Ports)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	for path, want := range map[string]string{"/metrics": "mongoferry_", "/status": `"phase"`} {
		resp, err := hc.Get("http://" + net.JoinHostPort(pod.Status.PodIP, port) + path)
		if err != nil {
			t.Errorf("%s from the container: %v", path, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("%s from the container on port %s: %s, %d bytes without %q", path, port, resp.Status, len(b), want)
			continue
		}
		t.Logf("%s answers from the container on %s:%s (%d bytes)", path, pod.Status.PodIP, port, len(b))
	}
}

// logRecordCheck says why line is not one whole JSON log record with
// time, level and msg (slog's JSON handler; the workers run with
// --log-format json and the manager with the chart's logFormat: json),
// or nil.
func logRecordCheck(line string) error {
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		return fmt.Errorf("not one JSON object: %w", err)
	}
	for _, key := range []string{"time", "level", "msg"} {
		if s, ok := rec[key].(string); !ok || s == "" {
			return fmt.Errorf("no %s", key)
		}
	}
	// slog names the levels between its four DEBUG+1 ... ERROR+4 (logr's
	// V(n) is DEBUG+3 and below).
	for _, level := range []string{"DEBUG", "INFO", "WARN", "ERROR"} {
		if strings.HasPrefix(rec["level"].(string), level) {
			return nil
		}
	}
	return fmt.Errorf("level %v", rec["level"])
}

// oneRecordPerLine checks that every line of a container's log (stdout
// and stderr) is one whole JSON record, and returns the log (empty for a
// container that has written nothing yet).
func oneRecordPerLine(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	recordLines(t, filepath.Base(file), string(b))
	return string(b)
}

// recordLines checks that every line of out (what names it) is one whole
// JSON record, and returns the number of lines.
func recordLines(t *testing.T, what, out string) int {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		n++
		if err := logRecordCheck(line); err != nil {
			t.Errorf("%s: line %d is not one record (%v): %q", what, n, err, line)
		}
	}
	t.Logf("%s: %d lines, each one JSON record", what, n)
	return n
}

// TestContainerSIGTERMDuringReplay deletes the worker pod while it replays
// a live load: its container gets SIGTERM, must save its checkpoint and
// exit within the grace period (not be killed), and the next container
// resumes from the checkpoint without copying again. The target ends
// equal to the source: nothing lost, nothing doubled.
func TestContainerSIGTERMDuringReplay(t *testing.T) {
	requireContainerMode(t)
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 1000, FieldCount: 5, FieldLength: 40, Seed: 21}
	if _, err := workload.Load(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	lines := &runnerLines{t: t}
	const name = "orders"
	task := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, RunnerLogf: lines.logf,
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: src.URI},
			Target: syncv1alpha1.Target{URI: dst.URI},
		},
	})
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		run := base
		run.Workload, run.Threads, run.Rate, run.Distribution = workload.WorkloadMixed, 1, 20, workload.Uniform
		run.InsertProportion, run.UpdateProportion, run.DeleteProportion = 0.4, 0.4, 0.2
		_, _ = workload.Run(loadCtx, sc, run)
	})
	defer func() { stopLoad(); wg.Wait() }()

	waitFor(t, "phase Streaming", 3*time.Minute, func() bool { return task.get().Status.Phase == syncv1alpha1.PhaseStreaming })
	time.Sleep(3 * time.Second) // replaying the live load
	before := taskRecord(t, dc, name)
	pods := workerPods(t, env.Client, ns, name)
	if len(pods) != 1 {
		t.Fatalf("%d worker pods, want 1", len(pods))
	}
	old := pods[0]
	if err := env.Client.Delete(ctx, &old); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new worker pod streaming", 3*time.Minute, func() bool {
		p := workerPods(t, env.Client, ns, name)
		return len(p) == 1 && p[0].UID != old.UID && podReady(&p[0]) && task.get().Status.Phase == syncv1alpha1.PhaseStreaming
	})
	stops := lines.matching(regexp.MustCompile(`pod ` + old.Name + ` container worker stopped with exit code (\d+)(?: \((\w+)\))? ([0-9.]+)s after SIGTERM \(grace period (\S+)\)`))
	if len(stops) != 1 {
		t.Fatalf("the runner's stop lines for the deleted pod: %q, want one", stops)
	}
	code, secs, grace := stops[0][1], stops[0][3], stops[0][4]
	t.Logf("SIGTERM during replay: the container exited with code %s after %ss (grace period %s)", code, secs, grace)
	if code != "130" {
		t.Errorf("exit code %s after SIGTERM, want 130 (interrupted; 137 means it was killed at the end of the grace period)", code)
	}
	first := task.runner.LogFiles()[0]
	if out := oneRecordPerLine(t, first); !strings.Contains(out, "run the same command again to continue from the checkpoint") {
		t.Errorf("the stopped worker's log does not say it stopped at its checkpoint:\n%s", lastLines(out, 10))
	}

	stopLoad()
	wg.Wait()
	waitCaughtUp(t, env.Client, sc, ns, name)
	verifySame(t, sc, dc)
	after := taskRecord(t, dc, name)
	if after.Runs <= before.Runs || !after.CopyDone {
		t.Errorf("checkpoint after the restart: runs %d (before %d), copyDone %v: want one more run, the copy not redone", after.Runs, before.Runs, after.CopyDone)
	}
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}
