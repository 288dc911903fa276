package podrunner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mongoferry/mongoferry/internal/envtestutil"
)

// The test binary doubles as the containers' program: with
// PODRUNNER_HELPER=1 in its environment it serves /healthz, /env and /file
// (?path=: a file's content and mode) on the address after --listen, and
// with --exit CODE it prints a line and exits after --after.
const helperEnv = "PODRUNNER_HELPER"

var env *envtestutil.Env

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helper(os.Args[1:]))
	}
	os.Exit(envtestutil.RunTests(m, func(e *envtestutil.Env) { env = e }))
}

func helper(args []string) int {
	var listen string
	exit, after := -1, time.Duration(0)
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--listen":
			listen = args[i+1]
		case "--exit":
			exit, _ = strconv.Atoi(args[i+1])
		case "--after":
			after, _ = time.ParseDuration(args[i+1])
		}
	}
	if exit >= 0 {
		time.Sleep(after)
		fmt.Println("starting")
		fmt.Printf("helper: giving up with code %d\n", exit)
		return exit
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/env", func(w http.ResponseWriter, _ *http.Request) {
		m := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		m["ARGS"] = strings.Join(os.Args[1:], " ")
		_ = json.NewEncoder(w).Encode(m)
	})
	mux.HandleFunc("/file", func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("path")
		b, err := os.ReadFile(p)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		st, _ := os.Stat(p)
		_ = json.NewEncoder(w).Encode(map[string]string{"data": string(b), "mode": fmt.Sprintf("%o", st.Mode().Perm())})
	})
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: time.Second}
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func startRunner(t *testing.T, ns string) *Runner {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Pod addresses come from a random 127.x.y.0/24, apart from those of
	// end-to-end tests running at the same time in another test process.
	return Start(t, Options{Client: env.Client, Namespace: ns, Binaries: map[string]string{"helper": bin}})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func pods(t *testing.T, ns string) map[string]corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := env.Client.List(ctx(t), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Pod{}
	for _, p := range list.Items {
		out[p.Name] = p
	}
	return out
}

func envOf(t *testing.T, ip string) map[string]string {
	t.Helper()
	resp, err := http.Get("http://" + net.JoinHostPort(ip, "8080") + "/env")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var m map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func helperSet(ns string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": "helper"}
	optional := true
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, ServiceName: "web",
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "main", Image: "example/helper", Command: []string{"/bin/helper"},
					Args:  []string{"--listen", "0.0.0.0:8080", "--name", "$(POD)"},
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					Env: []corev1.EnvVar{
						{Name: helperEnv, Value: "1"},
						{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
							LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "token"}}},
						{Name: "MISSING", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
							LocalObjectReference: corev1.LocalObjectReference{Name: "nope"}, Key: "x", Optional: &optional}}},
						{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						{Name: "INDEX", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['apps.kubernetes.io/pod-index']"}}},
						{Name: "GREETING", Value: "hello $(POD), $$(POD) stays"},
					},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}}},
				}}},
			},
		},
	}
}

// TestStatefulSetPods: pods per replica, each on its own address, env
// resolved, ready by probe; scaling down and a template change replace
// pods and stop their processes.
func TestStatefulSetPods(t *testing.T) {
	ns := env.Namespace(t)
	r := startRunner(t, ns)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"}, StringData: map[string]string{"token": "t0ken"}}
	if err := env.Client.Create(ctx(t), secret); err != nil {
		t.Fatal(err)
	}
	sts := helperSet(ns, 2)
	if err := env.Client.Create(ctx(t), sts); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two ready pods", func() bool {
		ps := pods(t, ns)
		return len(ps) == 2 && podReady(ptr(ps["web-0"])) && podReady(ptr(ps["web-1"]))
	})
	ps := pods(t, ns)
	ips := map[string]bool{}
	for i, name := range []string{"web-0", "web-1"} {
		p := ps[name]
		ip := p.Status.PodIP
		addr, err := netip.ParseAddr(ip)
		if err != nil || ips[ip] || !addr.Is4() || !addr.IsLoopback() || r.PodIP(name) != ip {
			t.Errorf("%s: pod IP %q (runner says %q), want a distinct IPv4 loopback address", name, ip, r.PodIP(name))
		}
		ips[ip] = true
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].State.Running == nil {
			t.Errorf("%s: status %+v", name, p.Status)
		}
		if !metav1.IsControlledBy(&p, sts) || p.Spec.NodeName != NodeName || p.Labels[podIndexLabel] != strconv.Itoa(i) {
			t.Errorf("%s: owner %v, node %q, labels %v", name, p.OwnerReferences, p.Spec.NodeName, p.Labels)
		}
		e := envOf(t, ip)
		want := map[string]string{"TOKEN": "t0ken", "POD": name, "INDEX": strconv.Itoa(i),
			"GREETING": "hello " + name + ", $(POD) stays", "ARGS": "--listen " + ip + ":8080 --name " + name}
		for k, v := range want {
			if e[k] != v {
				t.Errorf("%s: %s = %q, want %q", name, k, e[k], v)
			}
		}
		if _, ok := e["MISSING"]; ok {
			t.Errorf("%s: an optional missing Secret set MISSING", name)
		}
		if _, ok := e["KUBEBUILDER_ASSETS"]; ok {
			t.Errorf("%s: the test's environment leaked into the pod", name)
		}
	}
	waitFor(t, "StatefulSet status", func() bool {
		var s appsv1.StatefulSet
		_ = env.Client.Get(ctx(t), types.NamespacedName{Namespace: ns, Name: "web"}, &s)
		return s.Status.ReadyReplicas == 2 && s.Status.Replicas == 2
	})

	// Scale down: web-1 goes, and its process with it.
	ip1 := ps["web-1"].Status.PodIP
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))
	if err := env.Client.Patch(ctx(t), sts, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web-1 to go", func() bool { _, ok := pods(t, ns)["web-1"]; return !ok })
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip1, "8080"), time.Second); err == nil {
		_ = c.Close()
		t.Error("web-1's process still listens after its pod was deleted")
	}

	// A template change replaces web-0.
	uid := ps["web-0"].UID
	patch = client.RawPatch(types.MergePatchType, []byte(`{"spec":{"template":{"metadata":{"annotations":{"rev":"2"}}}}}`))
	if err := env.Client.Patch(ctx(t), sts, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web-0 to be replaced", func() bool {
		p, ok := pods(t, ns)["web-0"]
		return ok && p.UID != uid && podReady(&p) && p.Annotations["rev"] == "2"
	})
}

// TestRestartsAndConfigErrors: a crashing container restarts with its
// exit kept in lastState and its last log lines as the termination
// message; a missing Secret holds the container in
// CreateContainerConfigError until the Secret exists.
func TestRestartsAndConfigErrors(t *testing.T) {
	ns := env.Namespace(t)
	startRunner(t, ns)
	crash := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "crash"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "example/helper", Command: []string{"helper"},
			Args:                     []string{"--exit", "3", "--after", "100ms"},
			Env:                      []corev1.EnvVar{{Name: helperEnv, Value: "1"}},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError}}},
	}
	if err := env.Client.Create(ctx(t), crash); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two restarts", func() bool {
		p := pods(t, ns)["crash"]
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 2
	})
	cs := pods(t, ns)["crash"].Status.ContainerStatuses[0]
	last := cs.LastTerminationState.Terminated
	if last == nil || last.ExitCode != 3 || last.Reason != "Error" || last.Message != "starting\nhelper: giving up with code 3" {
		t.Errorf("last termination %+v", last)
	}

	blocked := helperSet(ns, 1)
	blocked.Name = "blocked"
	if err := env.Client.Create(ctx(t), blocked); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "CreateContainerConfigError", func() bool {
		p := pods(t, ns)["blocked-0"]
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Waiting != nil &&
			p.Status.ContainerStatuses[0].State.Waiting.Reason == "CreateContainerConfigError" &&
			strings.Contains(p.Status.ContainerStatuses[0].State.Waiting.Message, `secret "creds"`)
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "creds"}, StringData: map[string]string{"token": "late"}}
	if err := env.Client.Create(ctx(t), secret); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to start once the Secret exists", func() bool { p := pods(t, ns)["blocked-0"]; return podReady(&p) })
	if cs := pods(t, ns)["blocked-0"].Status.ContainerStatuses[0]; cs.RestartCount != 0 {
		t.Errorf("restartCount %d, want 0: a container that never started did not restart", cs.RestartCount)
	}
}

func ptr[T any](v T) *T { return &v }

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{
		"$(A)-$(B)": "1-two", "$$(A)": "$(A)", "$(C)": "$(C)", "$(A": "$(A", "x$": "x$", "$A": "$A", "": "",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestVolumes: the Secret, projected and emptyDir volumes a container
// mounts are written with their items' paths and modes, and the mount
// paths in its env and args lead to them.
func TestVolumes(t *testing.T) {
	ns := env.Namespace(t)
	startRunner(t, ns)
	for name, data := range map[string]map[string]string{"ca": {"ca.crt": "CA PEM", "other": "x"}, "client": {"tls.pem": "CLIENT PEM"}} {
		if err := env.Client.Create(ctx(t), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}); err != nil {
			t.Fatal(err)
		}
	}
	mode := int32(0o400)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vols"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "main", Image: "example/helper", Command: []string{"helper"},
				Args: []string{"--listen", "0.0.0.0:8080", "--ca", "/etc/app/tls/source/ca.pem"},
				Env: []corev1.EnvVar{{Name: helperEnv, Value: "1"},
					{Name: "TASK", Value: "caFile: /etc/app/tls/source/ca.pem\ncertificateKeyFile: /etc/app/tls/source/client.pem\nall: /etc/app/all"}},
				VolumeMounts: []corev1.VolumeMount{{Name: "tls", MountPath: "/etc/app/tls", ReadOnly: true}, {Name: "all", MountPath: "/etc/app/all"}, {Name: "scratch", MountPath: "/scratch"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "tls", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "source/ca.pem", Mode: &mode}}}},
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "client"}, Items: []corev1.KeyToPath{{Key: "tls.pem", Path: "source/client.pem", Mode: &mode}}}},
				}}}},
				{Name: "all", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "ca"}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "unused", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "no-such-secret"}}},
			},
		},
	}
	if err := env.Client.Create(ctx(t), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to run", func() bool {
		p := pods(t, ns)["vols"]
		return p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning
	})
	ip := pods(t, ns)["vols"].Status.PodIP
	var e map[string]string
	waitFor(t, "the helper to answer", func() bool {
		resp, err := http.Get("http://" + net.JoinHostPort(ip, "8080") + "/env")
		if err != nil {
			return false
		}
		defer func() { _ = resp.Body.Close() }()
		return json.NewDecoder(resp.Body).Decode(&e) == nil
	})
	paths := map[string]string{}
	for _, line := range strings.Split(e["TASK"], "\n") {
		k, v, _ := strings.Cut(line, ": ")
		paths[k] = v
	}
	_, caArg, _ := strings.Cut(e["ARGS"], "--ca ")
	if caArg != paths["caFile"] || strings.HasPrefix(caArg, "/etc/app") {
		t.Errorf("--ca %q, caFile %q: want the same path, outside /etc/app", caArg, paths["caFile"])
	}
	file := func(p string) map[string]string {
		resp, err := http.Get("http://" + net.JoinHostPort(ip, "8080") + "/file?path=" + p)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		m := map[string]string{}
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return m
	}
	for _, c := range []struct{ path, data, mode string }{
		{paths["caFile"], "CA PEM", "400"},
		{paths["certificateKeyFile"], "CLIENT PEM", "400"},
		{paths["all"] + "/ca.crt", "CA PEM", "644"},
		{paths["all"] + "/other", "x", "644"},
	} {
		if got := file(c.path); got["data"] != c.data || got["mode"] != c.mode {
			t.Errorf("%s: %v, want %q with mode %s", c.path, got, c.data, c.mode)
		}
	}
}

// TestPodLogs reads a pod's log as `kubectl logs` does, through the API
// server's pods/log, which calls the log endpoint of the pod's node (the
// runner's stand-in for the kubelet) over TLS: the latest run's lines,
// and with follow a stream that ends once that run is replaced (the
// container exits and restarts).
func TestPodLogs(t *testing.T) {
	ns := env.Namespace(t)
	startRunner(t, ns)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "talker"},
		// Bound to the runner's node, as the pods it creates are: the API
		// server answers pods/log of an unbound pod with nothing.
		Spec: corev1.PodSpec{NodeName: NodeName, Containers: []corev1.Container{{Name: "main", Image: "example/helper", Command: []string{"helper"},
			Args: []string{"--exit", "5", "--after", "1s"}, Env: []corev1.EnvVar{{Name: helperEnv, Value: "1"}}}}},
	}
	if err := env.Client.Create(ctx(t), pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a restart", func() bool {
		p := pods(t, ns)["talker"]
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
	})
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	read := func(follow bool) string {
		t.Helper()
		rc, err := cs.CoreV1().Pods(ns).GetLogs("talker", &corev1.PodLogOptions{Container: "main", Follow: follow}).Stream(ctx(t))
		if err != nil {
			t.Fatalf("pods/log (follow %v): %v", follow, err)
		}
		defer func() { _ = rc.Close() }()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatalf("pods/log (follow %v): %v", follow, err)
		}
		return string(b)
	}
	const want = "starting\nhelper: giving up with code 5\n"
	// A run prints its lines once, after a second; between its exit and
	// the next run (a back-off of a second or more) its log is whole.
	waitFor(t, "a whole run's log", func() bool { return read(false) == want })
	// Followed, the log of the run going on now ends with that run.
	if got := read(true); got != want {
		t.Errorf("followed log %q, want %q", got, want)
	}
	_, err = cs.CoreV1().Pods(ns).GetLogs("nobody", &corev1.PodLogOptions{}).Stream(ctx(t))
	if !apierrors.IsNotFound(err) {
		t.Errorf("logs of a pod that does not exist: %v, want NotFound", err)
	}
}
