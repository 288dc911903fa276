package dashboard

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/mongoferry/mongoferry/internal/envtestutil"
)

// TestCommittedDashboard: the chart ships the dashboard this package
// builds (make manifests writes it).
func TestCommittedDashboard(t *testing.T) {
	root, err := envtestutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "charts", "mongoferry", "dashboards", "mongoferry-synctask.json")
	committed, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	built, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, built) {
		t.Errorf("%s is not what internal/dashboard builds: run make manifests", p)
	}
}
