package kubectlplugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

// TestLogsInterleaved: logs -f reads every worker pod of the task (and no
// other pod) at once and writes whole lines, each prefixed with its pod,
// until interrupted. The pods are real API objects; their log streams,
// which a kubelet would serve through the API server, are pipes written
// a line at a time by two writers.
func TestLogsInterleaved(t *testing.T) {
	ns := env.Namespace(t)
	task := testTask(ns, "orders")
	task.Status = streaming()
	createTask(t, task)
	for _, p := range []struct{ name, task string }{{"orders-worker-0", "orders"}, {"orders-worker-1", "orders"}, {"other-worker-0", "other"}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, Labels: map[string]string{syncv1alpha1.TaskLabel: p.task}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "example.org/ferry:test"}}}}
		if err := env.Client.Create(context.Background(), pod); err != nil {
			t.Fatal(err)
		}
	}
	const lines = 200
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		openMu sync.Mutex
		opened []string
	)
	open := func(ctx context.Context, _, pod, container string, follow bool) (io.ReadCloser, error) {
		if !follow || container != "worker" {
			return nil, fmt.Errorf("opened %s/%s with follow %v", pod, container, follow)
		}
		openMu.Lock()
		opened = append(opened, pod)
		openMu.Unlock()
		r, w := io.Pipe()
		go func() {
			for i := range lines {
				// Each record (a worker logs JSON) in two writes: a
				// reader must not split it.
				_, _ = fmt.Fprintf(w, `{"time":"2026-11-28T00:00:00Z","level":"INFO","msg":"line","n":%d`, i)
				_, _ = io.WriteString(w, `,"pod":"`+pod+"\"}\n")
			}
			<-ctx.Done()
			_ = w.Close()
		}()
		return r, nil
	}
	var out syncBuffer
	cmd := NewCommand(Options{Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}, Logs: open})
	cmd.SetArgs([]string{"logs", "orders", "-f", "--kubeconfig", kubeconfig, "-n", ns})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), "\n") < 2*lines && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("logs -f: %v", err)
	}
	sort.Strings(opened)
	if strings.Join(opened, ",") != "orders-worker-0,orders-worker-1" {
		t.Errorf("opened the logs of %v, want the two workers of orders", opened)
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != 2*lines {
		t.Fatalf("%d lines, want %d", len(got), 2*lines)
	}
	for _, l := range got {
		pod, rest, ok := strings.Cut(strings.TrimPrefix(l, "["), "] ")
		var rec struct{ Msg, Pod string }
		if !ok || json.Unmarshal([]byte(rest), &rec) != nil || rec.Msg != "line" || rec.Pod != pod {
			t.Fatalf("line %q is not one whole record of its pod", l)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
