package explain

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestExplainTask checks that `ferry explain task` prints each field with
// its type, default, limits and meaning, and that naming a field prints
// its whole description.
func TestExplainTask(t *testing.T) {
	var out bytes.Buffer
	cmd := NewCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"task"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(?m)^fullSync\.workers\s+integer\s+1\s+1 to 64\s+Workers is how many processes copy`,
		`(?m)^threads\.readers\s+integer\s+4\s+1 to 256\s+Readers is the number of parallel source readers\.$`,
		`(?m)^cache\.maxBytes\s+size\s+256MiB\s+`,
		`(?m)^source\.uri\s+string\s+\(required\)\s+`,
		`(?m)^namespaces\.rename\[\]\.to\s+string\s+\(required\)`,
		`(?m)^mode\s+enum\s+fullAndIncremental\s+one of full, incremental, fullAndIncremental\s+`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("output does not match %s:\n%s", want, out.String())
		}
	}

	out.Reset()
	cmd = NewCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"task", "fullSync.workers"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "fullSync.workers (integer; default 1; 1 to 64)\n    Workers is") || !strings.Contains(got, "shardedCopy") {
		t.Errorf("ferry explain task fullSync.workers:\n%s", got)
	}

	cmd = NewCommand()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"task", "fullSync.wrokers"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "fullSync.wrokers") {
		t.Errorf("an unknown field: %v, want an error naming it", err)
	}
}
