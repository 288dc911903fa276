package main

import (
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// driverPrefix is the MongoDB Go driver's module path.
const driverPrefix = "go.mongodb.org/mongo-driver"

// clientPackage is the driver's client: what connects to a deployment.
const clientPackage = driverPrefix + "/v2/mongo"

// cleanupPaths are the packages of this module through which the manager
// may reach the driver's client: the checkpoint cleanup at a task's
// deletion (internal/controller/cleanup.go), which connects to the target and
// drops the task's checkpoint records. Everything else that talks to
// MongoDB (shard discovery included) runs in the workers.
var cleanupPaths = []string{
	"github.com/mongoferry/mongoferry/cmd/manager",
	"github.com/mongoferry/mongoferry/internal/controller",
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint",
	"github.com/mongoferry/mongoferry/pkg/engine/conn",
}

// parsePaths may reach other driver packages without the client:
// pkg/config validates source.uri and target.uri with the driver's own
// connection-string parser (x/mongo/driver/connstring), so that the
// manager refuses exactly the URIs the workers would, and compiles
// namespaces.filters' queries (docfilter, on the driver's bson packages,
// ordering values with bsonorder) so that it refuses the filters the
// workers would; none of them opens a connection.
var parsePaths = []string{
	"github.com/mongoferry/mongoferry/api/v1alpha1",
	"github.com/mongoferry/mongoferry/pkg/config",
	"github.com/mongoferry/mongoferry/pkg/engine/docfilter",
	"github.com/mongoferry/mongoferry/pkg/engine/bsonorder",
}

// TestDriverOnlyForCleanup fails when the manager's dependencies reach
// the MongoDB driver other than through the checkpoint cleanup: a package
// of this module outside cleanupPaths that links the driver's client, one
// outside both lists that links any driver package, or a file of the
// controllers other than cleanup.go that imports a package linking the
// client.
func TestDriverOnlyForCleanup(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the manager's dependencies")
	}
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Standard", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Standard   bool
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if !p.Standard {
			imports[p.ImportPath] = p.Imports
		}
	}
	// reach says whether package p is, or imports, a package for which
	// target is true.
	reach := func(target func(string) bool) func(string) bool {
		memo := map[string]bool{}
		var f func(string) bool
		f = func(p string) bool {
			if v, ok := memo[p]; ok {
				return v
			}
			memo[p] = target(p)
			for _, i := range imports[p] {
				if f(i) {
					memo[p] = true
					break
				}
			}
			return memo[p]
		}
		return f
	}
	reachesDriver := reach(func(p string) bool { return strings.HasPrefix(p, driverPrefix) })
	reachesClient := reach(func(p string) bool { return p == clientPackage })
	const self = "github.com/mongoferry/mongoferry/"
	for p := range imports {
		switch {
		case !strings.HasPrefix(p, self) || slices.Contains(cleanupPaths, p):
		case reachesClient(p):
			t.Errorf("the manager reaches the MongoDB driver's client through %s: only the checkpoint cleanup may (%v); discovery and other reads of MongoDB belong to the workers", p, cleanupPaths)
		case reachesDriver(p) && !slices.Contains(parsePaths, p):
			t.Errorf("the manager reaches the MongoDB driver through %s (allowed: the cleanup, %v, and URI and filter parsing, %v)", p, cleanupPaths, parsePaths)
		}
	}
	if !reachesClient("github.com/mongoferry/mongoferry/cmd/manager") {
		t.Logf("the manager links no MongoDB client at all: cleanupPaths can go")
	}

	// Within the controllers, only cleanup.go may import what links the
	// driver.
	files, err := filepath.Glob(filepath.Join("..", "..", "internal", "controller", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("controllers sources: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || filepath.Base(f) == "cleanup.go" {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, is := range af.Imports {
			path, _ := strconv.Unquote(is.Path.Value)
			if reachesClient(path) {
				t.Errorf("%s imports %s, which links the MongoDB driver's client: only cleanup.go may", filepath.Base(f), path)
			}
		}
	}
}
