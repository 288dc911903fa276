// Package envtestutil starts a real Kubernetes control plane (kube-apiserver
// and etcd, through controller-runtime's envtest) for tests, with the
// MongoFerry CRDs installed.
//
// Parts: AssetsDir finds the control plane binaries (built by
// `make envtest-assets` into bin/k8s, or named by KUBEBUILDER_ASSETS); Start
// runs a control plane for one test and stops it on t.Cleanup; New does the
// same for callers that manage the lifetime themselves (TestMain);
// KubeletServingCertificate (kubelet.go) is the certificate a kubelet
// stand-in serves pods/log with, which every control plane started here
// trusts.
package envtestutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/reporoot"
	"github.com/mongoferry/mongoferry/internal/testutil"
)

// Binaries are the files AssetsDir expects in the assets directory.
var Binaries = []string{"kube-apiserver", "etcd"}

// startTimeout bounds the start of etcd and of kube-apiserver. envtest's
// default (20 s) is short for two cores busy compiling other test packages;
// KUBEBUILDER_CONTROLPLANE_START_TIMEOUT still overrides it.
const startTimeout = 90 * time.Second

// Options configures a control plane.
type Options struct {
	// CRDDirs are more directories of CRD manifests to install, after the
	// repository's config/crd/bases.
	CRDDirs []string
	// AttachOutput copies the control plane's output to this process's
	// stdout and stderr (also KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT=true).
	AttachOutput bool
}

// Env is a running control plane.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a controller-runtime client with the core and MongoFerry
	// types in its scheme.
	Client client.Client
	// Scheme holds the core Kubernetes types and the MongoFerry API.
	Scheme *runtime.Scheme
	// Environment is the underlying envtest environment.
	Environment *envtest.Environment
}

// RepoRoot returns the repository's root, the directory of the root
// module's go.mod, found by walking up from the working directory (a test
// runs in its package's directory) past the nested test/ module's
// (internal/reporoot).
func RepoRoot() (string, error) {
	root, err := reporoot.Find()
	if errors.Is(err, reporoot.ErrNotFound) {
		return "", errors.New("envtestutil: go.mod not found above the working directory: run the tests inside the repository")
	}
	return root, err
}

// AssetsDir returns the directory holding kube-apiserver and etcd:
// KUBEBUILDER_ASSETS when set, otherwise bin/k8s in the repository. The
// error says how to build them when they are missing.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	how := "set KUBEBUILDER_ASSETS to a directory that holds them"
	if dir == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, "bin", "k8s")
		how = "run `make envtest-assets` in the repository to build them (or set KUBEBUILDER_ASSETS)"
	}
	var missing []string
	for _, b := range Binaries {
		if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("envtest control plane not found: %v missing in %s: %s", missing, dir, how)
	}
	return dir, nil
}

// NewScheme returns a scheme with the core Kubernetes types and the
// MongoFerry API.
func NewScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := syncv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// New starts a control plane with the repository's CRDs installed; the
// caller must call Stop.
func New(opts ...Options) (*Env, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	te := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        append([]string{filepath.Join(root, "config", "crd", "bases")}, o.CRDDirs...),
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		AttachControlPlaneOutput: o.AttachOutput,
	}
	caFile, err := kubeletCAFile()
	if err != nil {
		return nil, err
	}
	te.ControlPlane.GetAPIServer().Configure().Set("kubelet-certificate-authority", caFile)
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		te.ControlPlaneStartTimeout = startTimeout
	}
	// envtest prefers KUBEBUILDER_ASSETS over BinaryAssetsDirectory; both
	// name the same directory here.
	cfg, err := te.Start()
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("start envtest control plane from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("envtest client: %w", err)
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, Environment: te}, nil
}

// Start starts a control plane for a test and stops it when the test ends.
func Start(t testing.TB, opts ...Options) *Env {
	t.Helper()
	testutil.SkipInShort(t, "the envtest control plane")
	env, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop envtest control plane: %v", err)
		}
	})
	return env
}

// RunTests is a TestMain body for a package whose tests share one control
// plane (starting kube-apiserver takes seconds; each test works in its own
// namespace): it starts the control plane, hands it to use, runs the tests,
// stops it and returns the exit code for os.Exit.
//
// Under -short (the unit tier) it starts nothing and runs no test of the
// package: they all share the control plane.
func RunTests(m *testing.M, use func(*Env), opts ...Options) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipped by -short (the unit tier): every test of this package needs the envtest control plane; make test-integration and make test run them")
		return 0
	}
	env, err := New(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	use(env)
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop envtest control plane:", err)
	}
	return code
}

// WriteKubeconfig writes a kubeconfig file that reaches the API server as
// Config does, for commands run as a user runs them (kubectl plugins).
func (e *Env) WriteKubeconfig(path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: e.Config.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: e.Config.CertData, ClientKeyData: e.Config.KeyData, Token: e.Config.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.Environment.Stop() }

// Namespace creates a namespace with a fresh name for a test and returns
// the name. Namespaces are not deleted: there is no namespace controller in
// envtest, and the whole control plane goes away with the test.
func (e *Env) Namespace(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "test-" + hex.EncodeToString(b)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.Client.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}
