package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/podrunner"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestContainerManager runs the manager as a container of the image, with
// the pod spec of the chart's Deployment rendered with the default values
// (security context, args, probes, resources, grace period), and lets it
// run a SyncTask whose worker runs as a container too: the target ends
// equal to the source. The pod runner has no Deployment controller and no
// service account tokens, so the pod is created from the Deployment's
// template with one change: a kubeconfig for the test's API server
// (KUBECONFIG) and the namespace file, mounted from a Secret in place of
// the token volume. The manager
// logs one JSON object per line, serves /metrics on the port the chart's
// Service names, and exits within its grace period on SIGTERM.
func TestContainerManager(t *testing.T) {
	requireContainerMode(t)
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	dep := chartDeployment(t, ns)

	kubeconfig := kubeconfigFor(t, env)
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "manager-kubeconfig"},
		Data: map[string][]byte{"config": kubeconfig, "namespace": []byte(ns)}}); err != nil {
		t.Fatal(err)
	}
	spec := dep.Spec.Template.Spec.DeepCopy()
	spec.ServiceAccountName, spec.AutomountServiceAccountToken = "", new(bool)
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: "manager-kubeconfig", DefaultMode: new(int32(0o444))}}})
	c := &spec.Containers[0]
	// The kubeconfig, and the namespace file of the token volume (where
	// the manager finds its own namespace, for the leader election Lease),
	// readable by the manager's user as the token volume's files are: the
	// chart's security context is left as it is (no fsGroup).
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "serviceaccount", VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: "manager-kubeconfig", Items: []corev1.KeyToPath{{Key: "namespace", Path: "namespace"}}, DefaultMode: new(int32(0o444))}}})
	c.VolumeMounts = append(c.VolumeMounts,
		corev1.VolumeMount{Name: "kubeconfig", MountPath: "/var/run/kubeconfig", ReadOnly: true},
		corev1.VolumeMount{Name: "serviceaccount", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
	c.Env = append(c.Env, corev1.EnvVar{Name: "KUBECONFIG", Value: "/var/run/kubeconfig/config"})
	lines := &runnerLines{t: t}
	runner := podrunner.Start(t, podrunner.FromEnv(podrunner.Options{Client: env.Client, Namespace: ns, Logf: lines.logf}))
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: dep.Name + "-0", Labels: dep.Spec.Template.Labels}, Spec: *spec}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the manager pod Ready (/readyz)", 2*time.Minute, func() bool {
		var p corev1.Pod
		return env.Client.Get(ctx, client.ObjectKeyFromObject(pod), &p) == nil && podReady(&p)
	})
	ip := runner.PodIP(pod.Name)
	metricsPort := ""
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			metricsPort = fmt.Sprint(p.ContainerPort)
		}
	}
	resp, err := http.Get("http://" + net.JoinHostPort(ip, metricsPort) + "/metrics")
	if err != nil {
		t.Fatalf("/metrics of the manager container: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if !bytes.Contains(b, []byte("controller_runtime_")) {
		t.Errorf("/metrics of the manager container on port %s: %s, no controller_runtime_ series", metricsPort, resp.Status)
	}

	// A SyncTask the containerised manager runs with a containerised worker.
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	docs := make([]any, 0, 200)
	for i := range 200 {
		docs = append(docs, bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: strings.Repeat("x", 100)}})
	}
	insertDocs(t, sc, "shop", "items", docs)
	task := &syncv1alpha1.SyncTask{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "items"}, Spec: syncv1alpha1.SyncTaskSpec{
		Mode: config.ModeFull, Source: syncv1alpha1.Source{URI: src.URI}, Target: syncv1alpha1.Target{URI: dst.URI}}}
	if err := env.Client.Create(ctx, task); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SyncTask Completed", 5*time.Minute, func() bool {
		var st syncv1alpha1.SyncTask
		return env.Client.Get(ctx, client.ObjectKeyFromObject(task), &st) == nil && st.Status.Phase == syncv1alpha1.PhaseCompleted
	})
	assertSameDocs(t, sc, "shop.items", dc, "shop.items")

	if err := env.Client.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`pod ` + pod.Name + ` container manager stopped with exit code (\d+)(?: \((\w+)\))? ([0-9.]+)s after SIGTERM \(grace period (\S+)\)`)
	waitFor(t, "the manager container stopped", time.Minute, func() bool { return len(lines.matching(re)) > 0 })
	m := lines.matching(re)[0]
	t.Logf("SIGTERM: the manager exited with code %s after %ss (grace period %s)", m[1], m[3], m[4])
	if m[1] != "0" {
		t.Errorf("the manager exited with code %s on SIGTERM, want 0", m[1])
	}
	var logFile string
	for _, f := range runner.LogFiles() {
		if strings.HasPrefix(filepath.Base(f), pod.Name+"_") {
			logFile = f
		}
	}
	if oneRecordPerLine(t, logFile) == "" {
		t.Errorf("%s: the manager logged nothing", logFile)
	}
}

// chartDeployment renders the chart with its default values (helm
// template) and returns the manager's Deployment.
func chartDeployment(t *testing.T, ns string) *appsv1.Deployment {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	helm := filepath.Join(root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("bin/helm: %v (make helm)", err)
	}
	out, err := exec.Command(helm, "template", "mongoferry", filepath.Join(root, "charts", "mongoferry"), "--namespace", ns).Output()
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	for _, doc := range strings.Split(string(out), "\n---") {
		var meta metav1.TypeMeta
		if yaml.Unmarshal([]byte(doc), &meta) != nil || meta.Kind != "Deployment" {
			continue
		}
		var dep appsv1.Deployment
		if err := yaml.Unmarshal([]byte(doc), &dep); err != nil {
			t.Fatal(err)
		}
		return &dep
	}
	t.Fatal("helm template rendered no Deployment")
	return nil
}

// kubeconfigFor writes a kubeconfig for the test's API server.
func kubeconfigFor(t *testing.T, env *envtestutil.Env) []byte {
	t.Helper()
	cfg := env.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
