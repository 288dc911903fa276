// Package reporoot finds the repository's root directory from inside it:
// the directory of the root module's go.mod, the nested modules (test/ and
// the wrapper modules under hack/tools/) passed over. The demo looks for
// bin/ferretdb there, and the tests for bin/, config/ and testdata.
package reporoot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Module is the root module's path. A go.mod that declares a path under it
// (github.com/mongoferry/mongoferry/test) is a nested module, not the root.
const Module = "github.com/mongoferry/mongoferry"

// ErrNotFound means no directory above the start holds a go.mod other than
// a nested module's: the command ran outside the repository.
var ErrNotFound = errors.New("no go.mod of the repository's root module above the working directory")

// Find returns the root from the working directory (a test runs in its
// package's directory).
func Find() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("reporoot: %w", err)
	}
	return From(dir)
}

// From returns the nearest directory at or above dir whose go.mod is not a
// nested module's, or ErrNotFound.
func From(dir string) (string, error) {
	for {
		gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		switch {
		case err == nil && !nested(gomod):
			return dir, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("reporoot: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNotFound
		}
		dir = parent
	}
}

var moduleLine = regexp.MustCompile(`(?m)^module\s+"?([^\s"]+)`)

// nested reports whether gomod declares a module under Module.
func nested(gomod []byte) bool {
	m := moduleLine.FindSubmatch(gomod)
	return m != nil && strings.HasPrefix(string(m[1]), Module+"/")
}
