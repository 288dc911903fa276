package controller

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/workertls"
)

// TestWorkerTLS: with worker TLS on, the manager's CA Secret is made once
// and reused; each task gets a worker TLS Secret with a serving
// certificate from that CA, mounted into the workers, whose args and
// probes switch to HTTPS; the controller reads a worker's /status over
// mutual TLS (the worker here is the worker's own server config and
// /status guard, on loopback, with the files from the Secret); a
// certificate near its end is issued again and rolls the workers; no
// private key reaches the pod template, the status or the events.
func TestWorkerTLS(t *testing.T) {
	ctx := testCtx(t)
	managerNS := env.Namespace(t)
	ca, err := EnsureWorkerCA(ctx, env.Client, managerNS, "mongoferry-worker-ca")
	if err != nil {
		t.Fatal(err)
	}
	again, err := EnsureWorkerCA(ctx, env.Client, managerNS, "mongoferry-worker-ca")
	if err != nil {
		t.Fatal(err)
	}
	if string(again.CertPEM) != string(ca.CertPEM) {
		t.Fatal("a second start made a new CA instead of reusing the Secret's")
	}
	caSecret := get(t, managerNS, "mongoferry-worker-ca", &corev1.Secret{})
	if caSecret.Type != corev1.SecretTypeTLS || string(caSecret.Data[corev1.TLSCertKey]) != string(ca.CertPEM) {
		t.Fatalf("CA Secret: type %s, keys %d", caSecret.Type, len(caSecret.Data))
	}
	wt, err := NewWorkerTLS(ca)
	if err != nil {
		t.Fatal(err)
	}

	// The worker's port, held until the worker serves on it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, portStr, _ := net.SplitHostPort(ln.Addr().String())
	port, _ := strconv.Atoi(portStr)
	ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) { st.Spec.MetricsPort = int32(port) })
	r, rec := newReconciler()
	r.WorkerTLS = wt
	reconcile(t, r, ns, "orders")

	task := getTask(t, ns, "orders")
	s := get(t, ns, "orders-worker-tls", &corev1.Secret{})
	checkOwned(t, s, task)
	if s.Type != corev1.SecretTypeTLS || string(s.Data[WorkerTLSCAKey]) != string(ca.CertPEM) || len(s.Data[WorkerTLSKeyKey]) == 0 {
		t.Fatalf("worker TLS Secret: type %s, CA matches %v", s.Type, string(s.Data[WorkerTLSCAKey]) == string(ca.CertPEM))
	}
	leaf := parseLeaf(t, s.Data[WorkerTLSCertKey])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "orders-worker-3.orders-worker." + ns + ".svc"}); err != nil {
		t.Errorf("serving certificate for pod 3: %v", err)
	}
	if err := leaf.VerifyHostname(workertls.WorkerServerName); err != nil {
		t.Errorf("serving certificate for scrapers: %v", err)
	}

	sts := get(t, ns, "orders-worker", &appsv1.StatefulSet{})
	spec := sts.Spec.Template.Spec
	c := spec.Containers[0]
	vi := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "worker-tls" })
	if vi < 0 || spec.Volumes[vi].Secret == nil || spec.Volumes[vi].Secret.SecretName != "orders-worker-tls" {
		t.Fatalf("volumes %+v, want worker-tls from Secret orders-worker-tls", spec.Volumes)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "worker-tls" && m.MountPath == WorkerTLSMountPath && m.ReadOnly
	}) {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--tls-cert-file " + WorkerTLSMountPath + "/tls.crt", "--tls-key-file " + WorkerTLSMountPath + "/tls.key",
		"--tls-client-ca-file " + WorkerTLSMountPath + "/ca.crt", "--status-client " + workertls.ManagerName} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if c.ReadinessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS || c.LivenessProbe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("probes %+v, %+v: want HTTPS", c.ReadinessProbe.HTTPGet, c.LivenessProbe.HTTPGet)
	}
	hash := sts.Spec.Template.Annotations[ConfigHashAnnotation]

	// The worker: the files from the Secret, as the volume holds them.
	dir := t.TempDir()
	files := workertls.Files{Cert: filepath.Join(dir, WorkerTLSCertKey), Key: filepath.Join(dir, WorkerTLSKeyKey), ClientCA: filepath.Join(dir, WorkerTLSCAKey)}
	for k, p := range map[string]string{WorkerTLSCertKey: files.Cert, WorkerTLSKeyKey: files.Key, WorkerTLSCAKey: files.ClientCA} {
		if err := os.WriteFile(p, s.Data[k], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := workertls.ServerConfig(files)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"task":"orders","mode":"fullAndIncremental","phase":"Streaming",
	  "copy":{"stage":"done","estimatedDocuments":10,"documents":10,"bytes":512,"ranges":1,"rangesDone":1,"percent":100},
	  "replay":{"appliedTS":{"T":1700000000,"I":3},"lagSeconds":1,"opsPerSecond":3}}`
	worker := &http.Server{ReadHeaderTimeout: time.Second, Handler: workertls.StatusGuard(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(body))
	}), workertls.ManagerName, slog.New(slog.DiscardHandler))}
	go func() { _ = worker.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() { _ = worker.Close() })

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders-worker-0", Labels: sts.Spec.Template.Labels}, Spec: spec}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1",
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: WorkerContainer, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, ns, "orders")
	st := getTask(t, ns, "orders").Status
	if st.Phase != syncv1alpha1.PhaseStreaming || st.Progress == nil || st.Progress.Documents != 10 || st.LagSeconds != 1 {
		t.Errorf("status %+v, want the worker's report read over TLS", st)
	}

	// Without the manager's certificate the worker refuses /status.
	plain := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca.Pool(), ServerName: workertls.WorkerServerName, MinVersion: tls.VersionTLS12}}}
	resp, err := plain.Get("https://" + ln.Addr().String() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("/status without a client certificate: %s, want 403", resp.Status)
	}

	// A certificate near its end is issued again, and the workers roll.
	oldCert, oldKey, err := ca.Issue(workerTLSLeaf(task), time.Now().Add(-workertls.LeafValidity+10*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	s.Data[WorkerTLSCertKey], s.Data[WorkerTLSKeyKey] = oldCert, oldKey
	if err := env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, ns, "orders")
	renewed := parseLeaf(t, get(t, ns, "orders-worker-tls", &corev1.Secret{}).Data[WorkerTLSCertKey])
	if time.Until(renewed.NotAfter) < workertls.LeafValidity-48*time.Hour {
		t.Errorf("certificate valid until %v: not issued again", renewed.NotAfter)
	}
	if h := get(t, ns, "orders-worker", &appsv1.StatefulSet{}).Spec.Template.Annotations[ConfigHashAnnotation]; h == hash {
		t.Error("a new certificate did not roll the workers")
	}

	// No private key outside the Secrets.
	sts = get(t, ns, "orders-worker", &appsv1.StatefulSet{})
	seen := fmt.Sprintf("%+v %+v %q", sts.Spec.Template, getTask(t, ns, "orders").Status, drainEvents(rec))
	if strings.Contains(seen, "PRIVATE KEY") || strings.Contains(seen, "BEGIN") {
		t.Error("PEM in the pod template, the status or the events")
	}
}

func parseLeaf(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	if b == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
