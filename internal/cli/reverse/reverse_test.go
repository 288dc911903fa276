package reverse

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReverseToStdoutRedacts: the reverse task printed for review (no -o)
// never shows a password from the forward task's URIs; written to a file
// with -o it keeps them, so that the file runs.
func TestReverseToStdoutRedacts(t *testing.T) {
	const secret = "s3cretPassw0rd"
	dir := t.TempDir()
	task := filepath.Join(dir, "task.yaml")
	if err := os.WriteFile(task, []byte("name: orders\nmode: fullAndIncremental\n"+
		"source: {uri: \"mongodb://ferry:"+secret+"@10.0.0.1:27017/\"}\n"+
		"target: {uri: \"mongodb://admin:"+secret+"@10.0.0.2:27017/\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string) {
		t.Helper()
		cmd := NewCommand()
		var out, errOut bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		cmd.SetArgs(append([]string{"-f", task, "--from", "1764045600,3"}, args...))
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String()
	}
	out, errOut := run()
	if strings.Contains(out+errOut, secret) {
		t.Errorf("the password reached the output:\n%s%s", out, errOut)
	}
	for _, want := range []string{"uri: mongodb://***@10.0.0.1:27017/", "uri: mongodb://***@10.0.0.2:27017/", "name: orders-reverse"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	file := filepath.Join(dir, "reverse.yaml")
	if _, errOut := run("-o", file); strings.Contains(errOut, secret) {
		t.Errorf("the password reached stderr: %s", errOut)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "ferry:"+secret+"@10.0.0.1") {
		t.Errorf("the file written with -o lost the credentials it needs to run:\n%s", b)
	}
}
