package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// The names config/default deploys under.
const (
	managerNamespace      = "mongoferry-system"
	managerServiceAccount = "mongoferry-controller-manager"
)

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// readObjects decodes every YAML document of a file; documents that are
// only comments are skipped.
func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, path, b)
}

func decodeObjects(t *testing.T, name string, b []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// kustomization is the part of a kustomization.yaml these tests read.
type kustomization struct {
	Namespace string   `json:"namespace"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	return k
}

// kustomizeFiles lists the manifest files a kustomization takes in,
// following directories, and fails on a resource that does not exist. The
// kustomizations here only list resources and set a namespace and an
// image, so the files' objects are what `kustomize build` outputs but for
// the image name.
func kustomizeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	for _, r := range readKustomization(t, dir).Resources {
		p := filepath.Join(dir, r)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s/kustomization.yaml lists %s: %v", dir, r, err)
		}
		if fi.IsDir() {
			files = append(files, kustomizeFiles(t, p)...)
		} else {
			files = append(files, p)
		}
	}
	return files
}

// TestSamplesAccepted applies every config/samples/synctask_*.yaml to a real
// API server, with strict field validation (a misspelt field fails), so
// the samples stay valid against the schema and the CEL rules. The Secret
// shown commented in the replica-set sample is applied too.
func TestSamplesAccepted(t *testing.T) {
	root := repoRoot(t)
	dir := filepath.Join(root, "config", "samples")
	files, err := filepath.Glob(filepath.Join(dir, "synctask_*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
	}
	for _, want := range []string{"synctask_replicaset.yaml", "synctask_sharded.yaml"} {
		if !slices.Contains(names, want) {
			t.Errorf("config/samples has no %s", want)
		}
	}
	if k := readKustomization(t, dir); !slices.Equal(k.Resources, names) {
		t.Errorf("config/samples/kustomization.yaml lists %v, want every sample %v", k.Resources, names)
	}

	env := testEnv(t)
	ns := env.Namespace(t)
	ctx := testContext(t, time.Minute)
	c := client.WithFieldValidation(env.Client, metav1.FieldValidationStrict)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			objs := readObjects(t, f)
			if len(objs) == 0 {
				t.Fatal("no objects")
			}
			for _, o := range objs {
				if o.GetAPIVersion() != syncv1alpha1.GroupVersion.String() || o.GetKind() != "SyncTask" {
					t.Errorf("%s %s: a sample holds SyncTasks only", o.GetAPIVersion(), o.GetKind())
					continue
				}
				o.SetNamespace(ns)
				if err := c.Create(ctx, o); err != nil {
					t.Fatalf("SyncTask %s rejected: %v", o.GetName(), err)
				}
				var st syncv1alpha1.SyncTask
				if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), &st); err != nil {
					t.Fatal(err)
				}
				if st.Spec.Source.CredentialsSecret == "" || st.Spec.Target.CredentialsSecret == "" {
					t.Errorf("SyncTask %s: the samples show credentialsSecret on both sides", st.Name)
				}
				if filepath.Base(f) == "synctask_sharded.yaml" && (st.Spec.Source.Kind != config.KindSharded || len(st.Spec.Source.Shards) == 0) {
					t.Errorf("SyncTask %s: the sharded sample has source.kind %q and %d shard overrides", st.Name, st.Spec.Source.Kind, len(st.Spec.Source.Shards))
				}
			}
		})
	}

	t.Run("commented Secret", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(dir, "synctask_replicaset.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		secret := commentedObject(string(b), "# apiVersion: v1")
		if secret == "" {
			t.Fatal("synctask_replicaset.yaml shows no Secret in comments")
		}
		objs := decodeObjects(t, "the commented Secret", []byte(secret))
		if len(objs) != 1 || objs[0].GetKind() != "Secret" {
			t.Fatalf("the commented Secret decodes to %v", objs)
		}
		objs[0].SetNamespace(ns)
		if err := c.Create(ctx, objs[0]); err != nil {
			t.Fatalf("the commented Secret is rejected: %v", err)
		}
		var s corev1.Secret
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(objs[0]), &s); err != nil {
			t.Fatal(err)
		}
		if len(s.Data["username"]) == 0 || len(s.Data["password"]) == 0 {
			t.Errorf("the commented Secret has keys %v, want username and password", slices.Sorted(maps.Keys(s.Data)))
		}
	})
}

// commentedObject returns the YAML commented out from the line start up to
// the next comment line that is empty, without the comment marks.
func commentedObject(text, start string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(text, "\n") {
		if !in && line != start {
			continue
		}
		in = true
		if strings.TrimSpace(line) == "#" || !strings.HasPrefix(line, "# ") {
			break
		}
		b.WriteString(strings.TrimPrefix(line, "# ") + "\n")
	}
	return b.String()
}

// warnings records the API server's warnings, among them Pod Security
// admission's on a workload whose pods would break the namespace's level.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeaderWithContext(_ context.Context, _ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// applyDefault creates every object of config/default on the control
// plane, with strict field validation, and fails on a warning (the
// namespace enforces the restricted Pod Security level, so a Deployment
// whose pods would be refused draws one). Objects that exist already (the
// CRD, or a second call) are left as they are.
func applyDefault(t *testing.T, env *envtestutil.Env) []*unstructured.Unstructured {
	t.Helper()
	root := repoRoot(t)
	var objs []*unstructured.Unstructured
	for _, f := range kustomizeFiles(t, filepath.Join(root, "config", "default")) {
		objs = append(objs, readObjects(t, f)...)
	}
	// The order kustomize and kubectl apply them in: what others refer to
	// first.
	order := []string{"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding", "Service", "Deployment"}
	rank := func(o *unstructured.Unstructured) int {
		if i := slices.Index(order, o.GetKind()); i >= 0 {
			return i
		}
		return len(order)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return rank(a) - rank(b) })
	w := &warnings{}
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	c = client.WithFieldValidation(c, metav1.FieldValidationStrict)
	ctx := testContext(t, time.Minute)
	for _, o := range objs {
		if err := c.Create(ctx, o.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s %s/%s rejected: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	if len(w.list) > 0 {
		t.Errorf("warnings applying config/default: %q", w.list)
	}
	return objs
}

func findObject(t *testing.T, objs []*unstructured.Unstructured, kind, name string, into any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("no %s %s", kind, name)
}

func portOf(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return int32(n)
}

// TestManifestsDeploy checks config/default: it applies to a real API
// server, the manager's pods meet the restricted Pod Security level with a
// read-only root filesystem, its arguments are the manager's flags, and
// the probes, metrics Service and ServiceMonitor point at the ports the
// manager listens on.
func TestManifestsDeploy(t *testing.T) {
	root := repoRoot(t)
	if k := readKustomization(t, filepath.Join(root, "config", "default")); k.Namespace != managerNamespace {
		t.Errorf("config/default deploys into %q, want %s", k.Namespace, managerNamespace)
	}
	objs := applyDefault(t, testEnv(t))
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" && ns != managerNamespace {
			t.Errorf("%s %s is in namespace %s, want %s", o.GetKind(), o.GetName(), ns, managerNamespace)
		}
	}

	var d appsv1.Deployment
	findObject(t, objs, "Deployment", "mongoferry-controller-manager", &d)
	pod := d.Spec.Template.Spec
	if pod.ServiceAccountName != managerServiceAccount {
		t.Errorf("serviceAccountName %q, want %s", pod.ServiceAccountName, managerServiceAccount)
	}
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
		psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v: want runAsNonRoot and the RuntimeDefault seccomp profile", psc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the manager only", len(pod.Containers))
	}
	ctr := pod.Containers[0]
	if sc := ctr.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container securityContext %+v: want no privilege escalation, a read-only root filesystem, all capabilities dropped", sc)
	}
	if len(ctr.VolumeMounts) > 0 || len(pod.Volumes) > 0 {
		t.Errorf("volumes %v: the manager writes nothing, so it needs none", pod.Volumes)
	}
	for _, e := range ctr.Env {
		if e.Name == "GOMEMLIMIT" {
			t.Error("the manager's container sets GOMEMLIMIT")
		}
	}
	if !slices.Equal(ctr.Command, []string{"/manager"}) {
		t.Errorf("command %q, want [/manager] (the image's entrypoint)", ctr.Command)
	}
	fs, o := managerFlags()
	if err := fs.Parse(ctr.Args); err != nil || fs.NArg() > 0 {
		t.Fatalf("args %q are not the manager's flags: %v %q", ctr.Args, err, fs.Args())
	}
	if !o.leaderElect {
		t.Error("the Deployment runs without --leader-elect")
	}
	ports := map[string]int32{}
	for _, p := range ctr.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["metrics"] != portOf(t, o.metricsAddr) || ports["health"] != portOf(t, o.probeAddr) {
		t.Errorf("container ports %v, want metrics on %s and health on %s", ports, o.metricsAddr, o.probeAddr)
	}
	for _, p := range []struct {
		probe *corev1.Probe
		path  string
	}{{ctr.LivenessProbe, "/healthz"}, {ctr.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "health" {
			t.Errorf("probe %+v, want GET %s on port health", p.probe, p.path)
		}
	}
	images := readKustomization(t, filepath.Join(root, "config", "manager")).Images
	if len(images) != 1 || images[0].Name != ctr.Image || images[0].NewName != WorkerImageRepository {
		t.Errorf("config/manager sets images %+v; want %s replaced by %s", images, ctr.Image, WorkerImageRepository)
	}

	var svc corev1.Service
	findObject(t, objs, "Service", "mongoferry-controller-manager-metrics", &svc)
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the metrics Service selects %v, not the manager's pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
		}
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v, want one named metrics to the container port metrics", svc.Spec.Ports)
	}

	monitors := readObjects(t, filepath.Join(root, "config", "prometheus", "monitor.yaml"))
	if len(monitors) != 1 || monitors[0].GetKind() != "ServiceMonitor" {
		t.Fatalf("config/prometheus/monitor.yaml holds %d objects, want one ServiceMonitor", len(monitors))
	}
	sel, _, _ := unstructured.NestedStringMap(monitors[0].Object, "spec", "selector", "matchLabels")
	for k, v := range sel {
		if svc.Labels[k] != v {
			t.Errorf("the ServiceMonitor selects %v, not the metrics Service %v", sel, svc.Labels)
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(monitors[0].Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints %v", endpoints)
	}
	ep, _ := endpoints[0].(map[string]any)
	if ep["port"] != "metrics" || ep["path"] != "/metrics" || ep["honorLabels"] != true {
		t.Errorf("ServiceMonitor endpoint %v: want port metrics, path /metrics, honorLabels (the SyncTask's namespace label)", ep)
	}
}

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestManagerMetricsEndpoint runs the static manager binary as the
// Deployment does (its args, leader election on, as the ServiceAccount of
// config/default with only the RBAC granted there, with no writable
// temporary directory or home) against a real API server, and checks the
// probes, the Lease, the SyncTask metrics on /metrics and a clean stop on
// SIGTERM that hands the Lease back.
func TestManagerMetricsEndpoint(t *testing.T) {
	bin := filepath.Join(staticBinaries(t), "manager")
	env := testEnv(t)
	objs := applyDefault(t, env)
	ctx := testContext(t, 3*time.Minute)

	// A kubeconfig acting as the manager's ServiceAccount.
	kc, err := clientcmd.Load(env.Environment.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = "system:serviceaccount:" + managerNamespace + ":" + managerServiceAccount
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}

	var d appsv1.Deployment
	findObject(t, objs, "Deployment", "mongoferry-controller-manager", &d)
	metricsAddr, probeAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	// The Deployment's args, then what differs outside a cluster (the last
	// of a repeated flag wins).
	args := append(slices.Clone(d.Spec.Template.Spec.Containers[0].Args),
		"--kubeconfig="+kubeconfig,
		"--leader-election-namespace="+managerNamespace,
		"--metrics-bind-address="+metricsAddr,
		"--health-probe-bind-address="+probeAddr,
		"--log-format=text",
	)
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"TMPDIR=/nonexistent/mongoferry-tmp", "HOME=/nonexistent/mongoferry-home"}
	cmd.Dir = t.TempDir()
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("manager output:\n%s", out.String())
		}
	}()

	// eventually polls check until it returns nil, the manager exits, or the
	// time is up.
	eventually := func(what string, timeout time.Duration, check func() error) {
		t.Helper()
		testutil.PollProcess(t, what, timeout, exited, func() { stopped = true }, check)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		eventually(path, time.Minute, func() error {
			code, body, err := httpGet("http://" + probeAddr + path)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("%d %s", code, body)
			}
			return err
		})
	}

	var lease coordinationv1.Lease
	eventually("Lease "+LeaderElectionID, time.Minute, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: managerNamespace, Name: LeaderElectionID}, &lease); err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			return errors.New("no holder")
		}
		return nil
	})

	ns := env.Namespace(t)
	st := &syncv1alpha1.SyncTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "smoke"},
		Spec: syncv1alpha1.SyncTaskSpec{
			Source: syncv1alpha1.Source{URI: "mongodb://src.example:27017/", CredentialsSecret: "src"},
			Target: syncv1alpha1.Target{URI: "mongodb://dst.example:27017/", CredentialsSecret: "dst"},
		},
	}
	if err := env.Client.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf(`mongoferry_synctask_info{mode="fullAndIncremental",namespace=%q,source_kind="auto",synctask="smoke"} 1`, ns),
		fmt.Sprintf(`mongoferry_synctask_lag_seconds{namespace=%q,synctask="smoke"}`, ns),
		`mongoferry_synctask_list_errors_total 0`,
		`leader_election_master_status{name="` + LeaderElectionID + `"} 1`,
	}
	eventually("SyncTask series on /metrics", time.Minute, func() error {
		code, body, err := httpGet("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("%d", code)
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				return fmt.Errorf("no %s in\n%s", w, grepLines(body, "mongoferry_", "leader_election"))
			}
		}
		return nil
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("manager exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not stop within 30 s of SIGTERM")
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(&lease), &lease); err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("the Lease is still held by %q after the manager stopped: it should hand it over", *h)
	}
	if s := out.String(); strings.Contains(s, "panic") || strings.Contains(s, "forbidden") {
		t.Errorf("manager output has a panic or an RBAC refusal:\n%s", s)
	}
}

func grepLines(text string, prefixes ...string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				b.WriteString(line + "\n")
				break
			}
		}
	}
	return b.String()
}
