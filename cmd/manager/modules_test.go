package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// moduleVersions lists the module path and version of every package
// go list -deps args names, run in dir (with -test for the test module).
func moduleVersions(t *testing.T, dir string, args ...string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %v in %s: %v", args, dir, err)
	}
	versions := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if path, version, ok := strings.Cut(line, " "); ok && path != "github.com/mongoferry/mongoferry" {
			versions[path] = version
		}
	}
	return versions
}

// TestTestModuleSameVersions fails when the test/ module (its own go.mod,
// docs/development.md "Two modules") builds a module the binaries link at
// another version than the root module does: the suites would then test
// the product against dependencies it does not ship.
func TestTestModuleSameVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("lists both modules' dependencies with go list; not in the unit tier")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the modules' dependencies")
	}
	product := moduleVersions(t, ".", binaries...)
	suites := moduleVersions(t, "../../test", "-test", "./...")
	shared := 0
	for path, v := range product {
		tv, ok := suites[path]
		if !ok {
			continue
		}
		shared++
		if tv != v {
			t.Errorf("the binaries link %s %s, the test/ module builds it at %s: align the versions (go get %s@%s in test/, then go mod tidy)", path, v, tv, path, v)
		}
	}
	if shared < 10 {
		t.Fatalf("the binaries and the test/ module share %d modules: is the list complete?", shared)
	}
}
