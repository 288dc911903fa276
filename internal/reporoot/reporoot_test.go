package reporoot

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// writeFiles writes each file (path relative to dir: content) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFrom(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		start string // relative to the temporary directory
		want  string // relative to it; "" for ErrNotFound
	}{
		{
			name:  "package directory of the root module",
			files: map[string]string{"go.mod": "module " + Module + "\n", "pkg/engine/x.go": ""},
			start: "pkg/engine",
			want:  ".",
		},
		{
			name: "package of the nested test module",
			files: map[string]string{
				"go.mod":          "module " + Module + "\n",
				"test/go.mod":     "module " + Module + "/test\n\nreplace " + Module + " => ../\n",
				"test/e2e/x.go":   "",
				"hack/tools/x.go": "",
			},
			start: "test/e2e",
			want:  ".",
		},
		{
			name: "wrapper module under hack/tools",
			files: map[string]string{
				"go.mod":                       "module " + Module + "\n",
				"hack/tools/prometheus/go.mod": "// Wrapper.\nmodule " + Module + "/hack/tools/prometheus\n",
			},
			start: "hack/tools/prometheus",
			want:  ".",
		},
		{
			name:  "another module is a root",
			files: map[string]string{"go.mod": "module example.com/x\n", "api/v1/x.go": ""},
			start: "api/v1",
			want:  ".",
		},
		{
			name:  "a nested module without its root",
			files: map[string]string{"test/go.mod": "module " + Module + "/test\n", "test/e2e/x.go": ""},
			start: "test/e2e",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tc.files)
			got, err := From(filepath.Join(dir, tc.start))
			if tc.want == "" {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("From = %q, %v; want ErrNotFound", got, err)
				}
				return
			}
			if want := filepath.Join(dir, tc.want); err != nil || got != want {
				t.Fatalf("From = %q, %v; want %q", got, err, want)
			}
		})
	}
}

// TestFindThisRepository finds the directory of the root module's go.mod
// from this package's directory.
func TestFindThisRepository(t *testing.T) {
	root, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if m := moduleLine.FindSubmatch(gomod); m == nil || string(m[1]) != Module {
		t.Fatalf("%s/go.mod declares %q, want %s", root, m, Module)
	}
}
