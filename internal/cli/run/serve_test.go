package run

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/verify"
	"github.com/mongoferry/mongoferry/pkg/metrics"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
	"github.com/mongoferry/mongoferry/pkg/workertls"
)

// TestServeTLS runs the worker's HTTPS server with the files the operator
// mounts (a serving certificate and the CA, issued by the operator's CA
// code) and reads it as the manager, Prometheus and strangers would: only
// the manager's client certificate reads /status; /metrics needs TLS and
// no client certificate.
func TestServeTLS(t *testing.T) {
	now := time.Now()
	ca, err := workertls.NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := workertls.NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key, err := ca.Issue(workertls.Leaf{CommonName: "orders-worker", DNSNames: []string{workertls.WorkerServerName}}, now)
	if err != nil {
		t.Fatal(err)
	}
	files := workertls.Files{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), ClientCA: filepath.Join(dir, "ca.crt")}
	for p, b := range map[string][]byte{files.Cert: cert, files.Key: key, files.ClientCA: ca.CertPEM} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logs testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	status := func() engine.Status { return engine.Status{Task: "orders", Phase: engine.PhaseStreaming} }
	addr := testutil.FreeAddr(t)
	stop, err := serve(Flags{listen: addr, tls: files, statusClient: workertls.ManagerName}, workerapi.Handler(metrics.HTTPHandler(metrics.NewRegistry()), status, nil), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	clientCert := func(ca *workertls.CA, name string) []tls.Certificate {
		c, err := workertls.NewClientCertificate(ca, name)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := c.GetClientCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{*pair}
	}
	manager, err := workertls.NewClientCertificate(ca, workertls.ManagerName)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		scheme string
		certs  []tls.Certificate
		// managerConfig uses the manager's own client configuration.
		managerConfig bool
		path          string
		want          int // 0: the request fails (TLS refused)
		body          string
	}{
		{name: "manager reads /status", scheme: "https", managerConfig: true, path: "/status", want: 200, body: `"phase": "Streaming"`},
		{name: "no client certificate, /status", scheme: "https", path: "/status", want: 403},
		{name: "another name from the same CA, /status", scheme: "https", certs: clientCert(ca, "someone"), path: "/status", want: 403},
		{name: "the manager's name from another CA, /status", scheme: "https", certs: clientCert(other, workertls.ManagerName), path: "/status", want: 0},
		{name: "Prometheus with the CA, /metrics", scheme: "https", path: "/metrics", want: 200, body: "go_goroutines"},
		{name: "the kubelet's probe, /healthz", scheme: "https", path: "/healthz", want: 200},
		{name: "plain HTTP, /metrics", scheme: "http", path: "/metrics", want: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: workertls.WorkerServerName, Certificates: tc.certs, MinVersion: tls.VersionTLS12}
			if tc.managerConfig {
				cfg = workertls.ClientConfig(ca, manager)
				cfg.ServerName = workertls.WorkerServerName
			}
			hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
			resp, err := hc.Get(tc.scheme + "://" + addr + tc.path)
			if tc.want == 0 {
				if err == nil {
					_ = resp.Body.Close()
					t.Fatalf("GET %s: %s, want a refused handshake", tc.path, resp.Status)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.want {
				t.Fatalf("GET %s: %s (%s), want %d", tc.path, resp.Status, body, tc.want)
			}
			if !strings.Contains(string(body), tc.body) {
				t.Fatalf("GET %s: body %q does not hold %q", tc.path, body, tc.body)
			}
			if tc.path == "/status" && tc.want == 200 {
				var s engine.Status
				if err := json.Unmarshal(body, &s); err != nil || s.Task != "orders" {
					t.Fatalf("/status: %v, task %q", err, s.Task)
				}
			}
		})
	}
	out := logs.String()
	if n := strings.Count(out, "refused /status"); n != 1 {
		t.Errorf("the log tells a refused /status %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "refused a connection") {
		t.Errorf("the log does not tell the refused handshake:\n%s", out)
	}
	if strings.Contains(out, "PRIVATE KEY") {
		t.Errorf("a private key reached the log")
	}
}

// TestListenTaken: a second ferry run on the host finds --listen's default
// port taken and serves on a free one, logging which; an address the user
// gave that is taken fails, naming --listen.
func TestListenTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	addr := taken.Addr().String()
	var logs testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	ln, err := listen(Flags{listen: addr, changed: func(string) bool { return false }}, log)
	if err != nil {
		t.Fatalf("default address taken: %v", err)
	}
	defer func() { _ = ln.Close() }()
	if ln.Addr().String() == addr || !strings.HasPrefix(ln.Addr().String(), "127.0.0.1:") {
		t.Errorf("listens on %s, want a free port of 127.0.0.1", ln.Addr())
	}
	if !strings.Contains(logs.String(), "serving on a free port instead") || !strings.Contains(logs.String(), ln.Addr().String()) {
		t.Errorf("log:\n%s", logs.String())
	}

	_, err = listen(Flags{listen: addr, changed: func(name string) bool { return name == "listen" }}, log)
	if err == nil || !strings.Contains(err.Error(), "--listen "+addr+": the address is in use") {
		t.Errorf("given address taken: %v", err)
	}
}

// TestVerifyEndpoint: POST /verify answers what the engine says of a new
// pass; other methods are refused.
func TestVerifyEndpoint(t *testing.T) {
	cases := []struct {
		name     string
		method   string
		startErr error
		want     int
	}{
		{"started", http.MethodPost, nil, http.StatusAccepted},
		{"a pass runs", http.MethodPost, verify.ErrPassRunning, http.StatusConflict},
		{"not streaming", http.MethodPost, engine.ErrNotStreaming, http.StatusServiceUnavailable},
		{"GET is not a start", http.MethodGet, nil, http.StatusMethodNotAllowed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			started := 0
			h := workerapi.Handler(nil, func() engine.Status { return engine.Status{} }, verifyAnswer(func() error { started++; return tc.startErr }))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, "/verify", nil))
			if rec.Code != tc.want {
				t.Errorf("%s /verify: %d %s, want %d", tc.method, rec.Code, rec.Body, tc.want)
			}
			if tc.method == http.MethodGet && started != 0 {
				t.Error("GET started a pass")
			}
		})
	}
}
