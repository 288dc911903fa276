package kubectlplugin

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// TestNoCluster: with no kubeconfig (and no --server, outside a pod) a
// command says no cluster is configured and names KUBECONFIG and
// --kubeconfig, instead of client-go's "localhost:8080 ... connection
// refused"; its usage reads "kubectl mongoferry", as the user types it.
func TestNoCluster(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KUBECONFIG", filepath.Join(dir, "none"))
	t.Setenv("HOME", dir)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	var out bytes.Buffer
	cmd := NewCommand(Options{Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}})
	cmd.SetArgs([]string{"status", "orders"})
	err := cmd.Execute()
	if !errors.Is(err, ErrNoCluster) || !strings.Contains(err.Error(), "KUBECONFIG") || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Errorf("status without a kubeconfig: %v", err)
	}
	if strings.Contains(out.String()+err.Error(), "localhost:8080") {
		t.Errorf("output:\n%s%v", out.String(), err)
	}

	out.Reset()
	cmd = NewCommand(Options{Streams: genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out}})
	cmd.SetArgs([]string{"cutover", "--help"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "kubectl mongoferry cutover TASK") || strings.Contains(out.String(), "kubectl-mongoferry") {
		t.Errorf("usage:\n%s", out.String())
	}
}
