package podrunner

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
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mongoferry/mongoferry/internal/envtestutil"
)

// The kubelet's log endpoint, as far as pods/log needs it: the API server
// answers `kubectl logs` (and client-go's GetLogs) by calling
// https://<node address>:<kubelet port>/containerLogs/<ns>/<pod>/<container>
// on the pod's node. One server per test process stands in for it: it
// serves the container logs of every running Runner, from their log
// directories, with envtestutil's kubelet certificate, which the control
// planes envtestutil starts trust. Each Runner's Run points the Node
// NodeName at it.

// logServer is the process's kubelet log endpoint.
var logServer struct {
	once    sync.Once
	port    int
	err     error
	mu      sync.Mutex
	runners map[string]*Runner // by namespace
}

// logFollowPoll is how often a followed log is read again for new lines.
const logFollowPoll = 200 * time.Millisecond

func startLogServer() {
	s := &logServer
	s.runners = map[string]*Runner{}
	cert, err := envtestutil.KubeletServingCertificate()
	if err != nil {
		s.err = err
		return
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		s.err = fmt.Errorf("podrunner: listen for the kubelet log endpoint: %w", err)
		return
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", serveContainerLog)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
}

// registerLogs makes r's logs reachable through pods/log: the Node the
// runner binds pods to names the log endpoint.
func (r *Runner) registerLogs(ctx context.Context) error {
	logServer.once.Do(startLogServer)
	if logServer.err != nil {
		return logServer.err
	}
	logServer.mu.Lock()
	logServer.runners[r.opts.Namespace] = r
	logServer.mu.Unlock()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName}}
	if err := r.c.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("podrunner: create node %s: %w", NodeName, err)
	}
	if err := r.c.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
		return err
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(logServer.port)
	if err := r.c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("podrunner: point node %s at the log endpoint: %w", NodeName, err)
	}
	return nil
}

func (r *Runner) unregisterLogs() {
	logServer.mu.Lock()
	defer logServer.mu.Unlock()
	if logServer.runners[r.opts.Namespace] == r {
		delete(logServer.runners, r.opts.Namespace)
	}
}

// serveContainerLog writes a container's log: its latest run's file, and
// with follow=true the lines added to it until that run is replaced by a
// newer one or the caller goes away (a real kubelet ends the stream when
// the container exits).
func serveContainerLog(w http.ResponseWriter, req *http.Request) {
	logServer.mu.Lock()
	r := logServer.runners[req.PathValue("namespace")]
	logServer.mu.Unlock()
	if r == nil {
		http.Error(w, "no pod runner for namespace "+req.PathValue("namespace"), http.StatusNotFound)
		return
	}
	pod, container := req.PathValue("pod"), req.PathValue("container")
	run, file := r.latestRun(pod, container)
	if file == "" {
		http.Error(w, fmt.Sprintf("container %q in pod %q has not started", container, pod), http.StatusNotFound)
		return
	}
	f, err := os.Open(file)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer func() { _ = f.Close() }()
	w.Header().Set("Content-Type", "text/plain")
	follow, _ := strconv.ParseBool(req.URL.Query().Get("follow"))
	flusher, _ := w.(http.Flusher)
	for {
		if _, err := io.Copy(w, f); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if !follow {
			return
		}
		if next, _ := r.latestRun(pod, container); next != run {
			_, _ = io.Copy(w, f) // the last lines of the run that ended
			return
		}
		select {
		case <-req.Context().Done():
			return
		case <-time.After(logFollowPoll):
		}
	}
}

// latestRun returns the number and the log file of a container's latest
// run (<pod>_<container>_<n>.log), -1 and "" before its first.
func (r *Runner) latestRun(pod, container string) (int, string) {
	prefix := pod + "_" + container + "_"
	files, _ := filepath.Glob(filepath.Join(r.opts.LogDir, prefix+"*.log"))
	run, file := -1, ""
	for _, f := range files {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), prefix), ".log"))
		if err == nil && n > run {
			run, file = n, f
		}
	}
	return run, file
}
