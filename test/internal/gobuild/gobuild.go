// Package gobuild builds the repository's commands for the tests that
// start them as separate processes (the end-to-end suites, the chaos suite,
// the chart's cluster test).
//
// A test binary built with -race builds them with -race too, so that
// make test-race checks the processes a test starts and not only the test
// itself. Command also sets GORACE=halt_on_error=1 in the test's
// environment, which the processes it starts inherit (the test binary
// read its own GORACE when it started, so a race in the test itself
// fails that test and the others go on): a command that finds a race
// stops at once with status 66, and the test sees a failed run, also
// where it would have killed the process later.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/mongoferry/mongoferry/internal/reporoot"
)

// Race reports whether the commands Command builds have the race
// detector on (the test binary has it). Their memory is then several
// times larger and their CPU slower: a test of a bound on either checks
// the engine's own accounting instead.
const Race = raceEnabled

// Command builds the main package pkg (such as "./cmd/ferry", relative to
// the repository's root) into out, with -race when the calling test binary
// has the race detector on.
func Command(pkg, out string) error {
	args := []string{"build"}
	if raceEnabled {
		args = append(args, "-race")
		if err := os.Setenv("GORACE", "halt_on_error=1"); err != nil {
			return err
		}
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
