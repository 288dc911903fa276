package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestSecretsNeverLeakOperator puts the canary password in the credentials
// Secrets of a SyncTask and runs it through the operator: streaming, a
// wrong password in the target's Secret (the workers roll and fail), and a
// target that goes away. After each it scans the SyncTask's status, its
// events, the StatefulSet and pod specs (command, args, env), the workers'
// /status and /metrics, every worker log line and the manager's log for
// the canary: zero hits. Every worker log line is one JSON record. (A verification failure is covered through the
// CLI by TestSecretsNeverLeak; the Secrets themselves hold the password by
// design and are not scanned.)
func TestSecretsNeverLeakOperator(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	src := testserver.Start(t, testserver.Options{Host: "127.0.0.2", Username: "ferry", Password: canary})
	dst := testserver.Start(t, testserver.Options{Host: "127.0.0.3", Username: "ferry", Password: canary, OplogBytes: -1})
	docs := make([]any, 300)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: fmt.Sprintf("v%d", i)}}
	}
	insertDocs(t, src.MustClient(t), "shop", "orders", docs)
	createCredentials(t, env, ns, "ferry", map[string]string{"src-creds": canary, "dst-creds": canary})
	logDir := t.TempDir()
	const name = "canary"
	get := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, LogDir: logDir,
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:   config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: src.URI, CredentialsSecret: "src-creds"},
			Target: syncv1alpha1.Target{URI: dst.URI, CredentialsSecret: "dst-creds"},
		},
	}).get
	scan := &canaryScan{texts: map[string]string{}}
	collect := func(stage string) {
		j, _ := json.Marshal(get().Status)
		scan.add(stage+" status", string(j))
		for _, e := range taskEvents(t, env.Client, ns, name) {
			scan.add(stage+" event", e.Reason+" "+e.Note)
		}
		var sets appsv1.StatefulSetList
		if err := env.Client.List(ctx, &sets, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		j, _ = json.Marshal(sets.Items)
		scan.add(stage+" statefulsets", string(j))
		var pods corev1.PodList
		if err := env.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		j, _ = json.Marshal(pods.Items)
		scan.add(stage+" pods", string(j))
		hc := &http.Client{Timeout: 2 * time.Second}
		for _, p := range pods.Items {
			for _, c := range p.Spec.Containers {
				for _, port := range c.Ports {
					for _, path := range []string{"/status", "/metrics"} {
						resp, err := hc.Get("http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort))) + path)
						if err != nil {
							continue
						}
						b, _ := io.ReadAll(resp.Body)
						_ = resp.Body.Close()
						scan.add(stage+" worker "+path, string(b))
					}
				}
			}
		}
	}

	waitFor(t, "phase Streaming", 3*time.Minute, func() bool { return get().Status.Phase == syncv1alpha1.PhaseStreaming })
	collect("streaming")

	// A wrong password in the target's Secret: the workers roll and fail
	// to authenticate.
	var s corev1.Secret
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "dst-creds"}, &s); err != nil {
		t.Fatal(err)
	}
	s.Data["password"] = []byte(canary + "-wrong")
	if err := env.Client.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(15 * time.Second)
	collect("wrong password")
	// The conditions quote a failed worker's last record as text (msg:
	// err), not as the JSON it logged.
	for _, c := range get().Status.Conditions {
		if strings.Contains(c.Message, `"msg"`) || strings.Contains(c.Message, `"level"`) {
			t.Errorf("condition %s quotes a raw log record: %s", c.Type, c.Message)
		} else if strings.Contains(c.Message, "exit code") {
			t.Logf("condition %s: %s", c.Type, c.Message)
		}
	}
	s.Data["password"] = []byte(canary)
	if err := env.Client.Update(ctx, &s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "phase Streaming again", 3*time.Minute, func() bool { return get().Status.Phase == syncv1alpha1.PhaseStreaming })

	// The target goes away for a while.
	dst.Kill()
	time.Sleep(15 * time.Second)
	collect("target gone")
	if err := dst.Restart(ctx); err != nil {
		t.Fatal(err)
	}

	// Every worker log (each run of each pod, the failed ones too) is one
	// JSON record per line, what a log collector reads.
	logs, _ := filepath.Glob(filepath.Join(logDir, "*.log"))
	logged := 0
	for _, l := range logs {
		out := oneRecordPerLine(t, l)
		logged += len(out)
		scan.add("worker log "+filepath.Base(l), out)
	}
	if logged == 0 {
		t.Error("the workers logged nothing")
	}
	operatorLog.mu.Lock()
	scan.add("manager log", operatorLog.buf.String())
	operatorLog.mu.Unlock()
	if hits := scan.hits(); len(hits) > 0 {
		t.Errorf("the canary password appeared %d times:\n%s", len(hits), joinLines(hits))
	}
	t.Logf("scanned %d texts (%d worker logs): 0 hits", len(scan.texts), len(logs))
}

func joinLines(s []string) string {
	out := ""
	for _, l := range s {
		out += l + "\n"
	}
	return out
}
