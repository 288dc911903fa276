package main

import (
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// binaries are the commands users run, relative to this directory.
var binaries = []string{".", "../ferry", "../kubectl-mongoferry"}

// harness says why package p must not be linked into a binary users run,
// or "" when it may be: the test harness (testing, the test-bed packages
// of this module) and the test-only dependencies (toxiproxy, the
// Prometheus server). The Prometheus client library is the product's.
// internal/wiresim is product: `ferry bench replay --wire` serves through
// it.
func harness(p string) string {
	const self = "github.com/mongoferry/mongoferry/internal/"
	switch {
	case p == "testing":
		return "the testing package"
	case strings.HasPrefix(p, "github.com/Shopify/toxiproxy"):
		return "toxiproxy, a test-only dependency (test/chaos)"
	case p == "github.com/prometheus/prometheus" || strings.HasPrefix(p, "github.com/prometheus/prometheus/"):
		return "the Prometheus server, a test-only dependency (test/chart)"
	}
	for _, h := range []string{"testserver", "testutil", "envtestutil", "podrunner"} {
		if p == self+h || strings.HasPrefix(p, self+h+"/") {
			return "a test-harness package"
		}
	}
	return ""
}

// TestBinariesLinkNoHarness fails when the manager, ferry or
// kubectl-mongoferry links the test harness or a test-only dependency
// (see harness), naming the packages that import it.
func TestBinariesLinkNoHarness(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the binaries' dependencies")
	}
	args := append([]string{"list", "-deps", "-json=ImportPath,Imports"}, binaries...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	importers := map[string][]string{}
	seen := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		seen[p.ImportPath] = true
		for _, i := range p.Imports {
			importers[i] = append(importers[i], p.ImportPath)
		}
	}
	if !seen["github.com/mongoferry/mongoferry/internal/cli/demo"] {
		t.Fatalf("the dependencies listed lack internal/cli/demo: %d packages, is the list complete?", len(seen))
	}
	for _, p := range slices.Sorted(maps.Keys(seen)) {
		if why := harness(p); why != "" {
			by := importers[p]
			slices.Sort(by)
			t.Errorf("a binary links %s, %s, imported by %v: move what the binary needs into a product package", p, why, by)
		}
	}
}
