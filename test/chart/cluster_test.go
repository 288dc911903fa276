package chart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/test/internal/gobuild"
)

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
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

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.list
	w.list = nil
	return l
}

// The namespaces the values files and the README name; the release's
// enforces the restricted Pod Security level and warns about it.
var testNamespaces = map[string]map[string]string{
	releaseNamespace: {"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"},
	"shop":           nil,
	"billing":        nil,
	"monitoring":     nil,
}

// createNamespaces creates testNamespaces once per control plane.
var nsOnce sync.Once

func createNamespaces(t *testing.T, env *envtestutil.Env) {
	t.Helper()
	var err error
	nsOnce.Do(func() {
		ctx := testContext(t, 30*time.Second)
		for name, labels := range testNamespaces {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
			if e := env.Client.Create(ctx, ns); e != nil && !apierrors.IsAlreadyExists(e) {
				err = e
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// warningClient is a client of the control plane whose API server warnings
// land in w.
func warningClient(t *testing.T, env *envtestutil.Env, w *warnings) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.WarningHandlerWithContext = w
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// applyObjects server-side applies objects, as `helm install` would create
// them (Helm creates objects with a plain create; a server-side apply is as
// strict: an unknown field fails it), in the order Helm installs kinds.
func applyObjects(ctx context.Context, c client.Client, objs []*unstructured.Unstructured, dryRun bool) error {
	order := []string{"CustomResourceDefinition", "ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment"}
	rank := func(o *unstructured.Unstructured) int {
		if i := slices.Index(order, o.GetKind()); i >= 0 {
			return i
		}
		return len(order)
	}
	sorted := slices.Clone(objs)
	slices.SortStableFunc(sorted, func(a, b *unstructured.Unstructured) int { return rank(a) - rank(b) })
	for _, o := range sorted {
		opts := []client.ApplyOption{client.FieldOwner("helm"), client.ForceOwnership}
		if dryRun {
			opts = append(opts, client.DryRunAll)
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), opts...); err != nil {
			return fmt.Errorf("%s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

// TestServerSideDryRun applies every object the chart renders, with each
// values file under ci/ and with the README's helm commands, to a real API
// server in server-side dry-run mode, with the MongoFerry CRDs and the
// prometheus-operator's ServiceMonitor, PodMonitor and PrometheusRule CRDs
// installed: the schemas of the API server and of the CRDs check every
// field, and the release namespace's restricted Pod Security level checks
// the manager's pods.
func TestServerSideDryRun(t *testing.T) {
	env := testEnv(t)
	createNamespaces(t, env)
	w := &warnings{}
	c := warningClient(t, env, w)

	type rendering struct {
		name string
		args []string
	}
	var cases []rendering
	for _, f := range ciValues(t) {
		cases = append(cases, rendering{"ci/" + filepath.Base(f), []string{"--values", f}})
	}
	for _, cmd := range readmeHelmCommands(t) {
		cases = append(cases, rendering{"README: " + strings.Join(cmd.line, " "), cmd.templateArgs})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := renderMonitoring(t, tc.args...)
			if err := applyObjects(testContext(t, time.Minute), c, objs, true); err != nil {
				t.Fatal(err)
			}
			if ws := w.take(); len(ws) > 0 {
				t.Errorf("API server warnings: %q", ws)
			}
			if k := kinds(objs); !slices.Contains(k, "Deployment") {
				t.Errorf("kinds %v", k)
			}
		})
	}

	// The Pod Security check works: a manager allowed to escalate
	// privileges draws a warning.
	t.Run("privilege escalation is refused", func(t *testing.T) {
		objs := render(t, "--set", "securityContext.allowPrivilegeEscalation=true")
		if err := applyObjects(testContext(t, time.Minute), c, objs, true); err != nil {
			t.Fatal(err)
		}
		ws := w.take()
		if !slices.ContainsFunc(ws, func(s string) bool { return strings.Contains(s, "allowPrivilegeEscalation") }) {
			t.Errorf("no Pod Security warning for allowPrivilegeEscalation=true: %q", ws)
		}
	})
}

// TestManagerWithChartRBAC installs the chart limited to two namespaces
// (ci/namespaced-values.yaml) on a real API server and runs the manager as
// the chart's ServiceAccount with the Deployment's arguments: it runs a
// SyncTask in a watched namespace, without any RBAC refusal, leaves one in
// another namespace alone, exports the task on /metrics, and makes no
// PodMonitor per task (the chart's PodMonitor scrapes the workers).
func TestManagerWithChartRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the manager: skipped with -short")
	}
	env := testEnv(t)
	createNamespaces(t, env)
	ctx := testContext(t, 4*time.Minute)
	objs := renderMonitoring(t, "--values", filepath.Join(chartDir(t), "ci", "namespaced-values.yaml"))
	if err := applyObjects(ctx, env.Client, objs, false); err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	convert(t, findOne(t, objs, "Deployment", releaseName), &d)

	bin := filepath.Join(t.TempDir(), "manager")
	if err := gobuild.Command("./cmd/manager", bin); err != nil {
		t.Fatal(err)
	}

	// A kubeconfig acting as the chart's ServiceAccount.
	kc, err := clientcmd.Load(env.Environment.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	sa := "system:serviceaccount:" + releaseNamespace + ":" + d.Spec.Template.Spec.ServiceAccountName
	for _, ai := range kc.AuthInfos {
		ai.Impersonate = sa
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNamespace, "system:authenticated"}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	metricsAddr, probeAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	// The Deployment's arguments, then what differs outside a cluster (the
	// last of a repeated flag wins).
	args := append(slices.Clone(d.Spec.Template.Spec.Containers[0].Args),
		"--kubeconfig="+kubeconfig,
		"--leader-election-namespace="+releaseNamespace,
		"--metrics-bind-address="+metricsAddr,
		"--health-probe-bind-address="+probeAddr,
		"--log-format=text",
	)
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"HOME=" + t.TempDir()}
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
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		if t.Failed() {
			t.Logf("manager output:\n%s", out.String())
		}
	}()
	eventually := func(what string, check func() error) {
		t.Helper()
		testutil.PollProcess(t, what, 90*time.Second, exited, func() { stopped = true }, check)
	}

	// A task in a watched namespace and one outside.
	const outside = "unwatched"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: outside}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, ns := range []string{"shop", outside} {
		for _, s := range []string{"src-creds", "dst-creds"} {
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s},
				StringData: map[string]string{"username": "ferry", "password": "Pa55-" + s}}
			if err := env.Client.Create(ctx, secret); err != nil {
				t.Fatal(err)
			}
		}
		task := &syncv1alpha1.SyncTask{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "orders"},
			Spec: syncv1alpha1.SyncTaskSpec{
				Source: syncv1alpha1.Source{URI: "mongodb://src.example:27017/?replicaSet=rs0", CredentialsSecret: "src-creds"},
				Target: syncv1alpha1.Target{URI: "mongodb://dst.example:27017/", CredentialsSecret: "dst-creds"},
			},
		}
		if err := env.Client.Create(ctx, task); err != nil {
			t.Fatal(err)
		}
	}

	eventually("StatefulSet shop/orders-worker", func() error {
		return env.Client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-worker"}, &appsv1.StatefulSet{})
	})
	eventually("status of shop/orders", func() error {
		var st syncv1alpha1.SyncTask
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders"}, &st); err != nil {
			return err
		}
		if st.Status.Phase == "" {
			return errors.New("no phase yet")
		}
		return nil
	})
	eventually("shop/orders on /metrics", func() error {
		body, err := httpGet("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		if want := `mongoferry_synctask_info{mode="fullAndIncremental",namespace="shop",source_kind="auto",synctask="orders"} 1`; !strings.Contains(body, want) {
			return fmt.Errorf("no %s", want)
		}
		if strings.Contains(body, `namespace="`+outside+`"`) {
			return fmt.Errorf("series of namespace %s, which is not watched", outside)
		}
		return nil
	})

	// The unwatched namespace's task has been left alone, and the watched
	// one has no PodMonitor of its own.
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: outside, Name: "orders-worker"}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Errorf("StatefulSet %s/orders-worker: %v, want none (namespace not watched)", outside, err)
	}
	var other syncv1alpha1.SyncTask
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: outside, Name: "orders"}, &other); err != nil || other.Status.Phase != "" {
		t.Errorf("SyncTask %s/orders: phase %q, %v; want no status", outside, other.Status.Phase, err)
	}
	pm := &unstructured.Unstructured{}
	pm.SetGroupVersionKind(schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PodMonitor"})
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "shop", Name: "orders-worker"}, pm); !apierrors.IsNotFound(err) {
		t.Errorf("PodMonitor shop/orders-worker: %v; want none with the chart's PodMonitor", err)
	}

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
	if s := out.String(); regexp.MustCompile(`(?i)forbidden|panic`).MatchString(s) {
		t.Errorf("manager output has an RBAC refusal or a panic:\n%s", s)
	}
}

func httpGet(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

// helmCommand is one helm install or upgrade command of the README's Helm
// section.
type helmCommand struct {
	line []string
	// templateArgs are the arguments of helm template that render what
	// the command installs (after the release name and chart).
	templateArgs []string
}

// readmeHelmCommands reads the helm install and helm upgrade commands of
// the README's "Helm install" section (continuation lines joined), checks
// that they install ./charts/mongoferry into mongoferry-system as
// "mongoferry", and turns their flags into helm template arguments.
func readmeHelmCommands(t *testing.T) []helmCommand {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## Helm install\n")
	if start < 0 {
		t.Fatal(`README.md has no "## Helm install" section`)
	}
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	section = strings.ReplaceAll(section, "\\\n", " ")
	var cmds []helmCommand
	for _, line := range strings.Split(section, "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "helm" || (f[1] != "install" && f[1] != "upgrade") {
			continue
		}
		cmd := helmCommand{line: f}
		var pos []string
		for i := 2; i < len(f); i++ {
			a := f[i]
			switch {
			case a == "--create-namespace" || a == "--reuse-values" || a == "--wait" || a == "--atomic" || a == "--install":
			case a == "-n" || a == "--namespace":
				i++
				if i >= len(f) || f[i] != releaseNamespace {
					t.Errorf("README: %s: namespace %v, the tests render %s", line, f[i:], releaseNamespace)
				}
			case a == "--set" || a == "-f" || a == "--values" || a == "--version":
				if i+1 >= len(f) {
					t.Fatalf("README: %s: %s without a value", line, a)
				}
				v := strings.Trim(f[i+1], "'")
				if a == "-f" || a == "--values" {
					v = filepath.Join(repoRoot(t), v)
				}
				if a != "--version" {
					cmd.templateArgs = append(cmd.templateArgs, a, v)
				}
				i++
			case strings.HasPrefix(a, "-"):
				t.Errorf("README: %s: flag %s not understood by this test", line, a)
			default:
				pos = append(pos, a)
			}
		}
		if len(pos) != 2 || pos[0] != releaseName || pos[1] != "./charts/mongoferry" {
			t.Errorf("README: %s: want release %s from ./charts/mongoferry, got %v", line, releaseName, pos)
		}
		cmds = append(cmds, cmd)
	}
	var verbs []string
	for _, c := range cmds {
		verbs = append(verbs, c.line[1])
	}
	if !slices.Contains(verbs, "install") || !slices.Contains(verbs, "upgrade") {
		t.Errorf("README's Helm section has the helm commands %v, want install and upgrade", verbs)
	}
	if !strings.Contains(section, "helm uninstall "+releaseName) {
		t.Error("README's Helm section does not show helm uninstall")
	}
	return cmds
}
