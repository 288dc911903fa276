package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workertls"
)

// TestOperatorWorkerTLS runs a SyncTask with worker TLS on, as the
// manager's --worker-tls sets it up: a CA Secret in the manager's
// namespace (made here as at the manager's start), a serving certificate
// per task in a Secret mounted into the worker (the pod runner writes the
// Secret volume under the pod's directory and rewrites the mount path in
// the args), the worker `ferry run` serving HTTPS. The task's status
// filling in (phase Streaming, progress 100 %, a shard entry with its
// applied position) shows that the manager reads /status over mutual TLS:
// the worker answers nothing else there. The same worker refuses /status
// to a client without the manager's certificate, serves /metrics to one
// that only trusts the CA (as Prometheus scrapes), and the target's
// documents equal the source's.
func TestOperatorWorkerTLS(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	managerNS := env.Namespace(t)
	ctx := context.Background()
	const name = "wtls"
	src := testserver.Start(t, testserver.Options{Host: "127.0.0.2"})
	dst := testserver.Start(t, testserver.Options{Host: "127.0.0.3"})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	docs := make([]any, 500)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "sku", Value: fmt.Sprintf("sku-%04d", i)}}
	}
	insertDocs(t, sc, "shop", "orders", docs)

	ca, err := controller.EnsureWorkerCA(ctx, env.Client, managerNS, "mongoferry-worker-ca")
	if err != nil {
		t.Fatal(err)
	}
	wt, err := controller.NewWorkerTLS(ca)
	if err != nil {
		t.Fatal(err)
	}
	logDir := t.TempDir()
	get := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, FirstIP: "127.0.15.1", LogDir: logDir,
		Reconciler: func(r *controller.SyncTaskReconciler) {
			r.WorkerTLS = wt
			r.StatusClient = wt.HTTPClient(2 * time.Second)
		},
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: src.URI},
			Target: syncv1alpha1.Target{URI: dst.URI},
		},
	}).get
	waitFor(t, "Streaming, 100%, the worker's shard entry", 4*time.Minute, func() bool {
		st := get().Status
		return st.Phase == syncv1alpha1.PhaseStreaming && st.Progress != nil && st.Progress.Percent == "100%" &&
			st.Progress.Documents == 500 && len(st.Shards) == 1 && st.Shards[0].AppliedTimestamp != ""
	})
	waitCaughtUp(t, env.Client, sc, ns, name)
	verifySame(t, sc, dc)

	// The worker, read as others would.
	var pod corev1.Pod
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: controller.WorkerName(name) + "-0"}, &pod); err != nil {
		t.Fatal(err)
	}
	base := "https://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(controller.DefaultMetricsPort))
	withCA := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca.Pool(), ServerName: workertls.WorkerServerName, MinVersion: tls.VersionTLS12}}}
	for _, tc := range []struct {
		path string
		want int
	}{{"/status", http.StatusForbidden}, {"/metrics", http.StatusOK}} {
		resp, err := withCA.Get(base + tc.path)
		if err != nil {
			t.Fatalf("GET %s with the CA only: %v", tc.path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s with the CA only: %s, want %d", tc.path, resp.Status, tc.want)
		}
		if tc.path == "/metrics" && !strings.Contains(string(body), "mongoferry_") {
			t.Errorf("/metrics over TLS holds no mongoferry_ series")
		}
	}
	if resp, err := http.Get("http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(controller.DefaultMetricsPort)) + "/status"); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("/status answered plain HTTP")
		}
	}

	// The worker's log tells the refusal, and no key reaches it.
	logs, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	var all strings.Builder
	for _, f := range logs {
		b, _ := os.ReadFile(f)
		all.Write(b)
	}
	if !strings.Contains(all.String(), "refused /status") {
		t.Errorf("the worker's log does not tell the refused /status")
	}
	if strings.Contains(all.String(), "PRIVATE KEY") {
		t.Error("a private key reached the worker's log")
	}
}
