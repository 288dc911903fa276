// Package gobuild builds the repository's commands for the tests that
// start them as separate processes (the end-to-end suites, the chaos suite,
// the chart's cluster test).
//
// A test binary built with -race builds them with -race too, so that
// make test-race checks the processes a test starts and not only the test
// itself. Such a binary exits with status 66 when it finds a race (at once
// under GORACE=halt_on_error=1, which make test-race sets), which the test
// sees as a failed run.
package gobuild

import (
	"fmt"
	"os/exec"

	"github.com/mongoferry/mongoferry/internal/reporoot"
)

// Command builds the main package pkg (such as "./cmd/ferry", relative to
// the repository's root) into out, with -race when the calling test binary
// has the race detector on.
func Command(pkg, out string) error {
	args := []string{"build"}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "-o", out, pkg)
	root, err := reporoot.Find()
	if err != nil {
		return err
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, b)
	}
	return nil
}
