package containers

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mongoferry/mongoferry/internal/podrunner"
)

// image returns the image under test once podman has run a container of
// it; it skips outside container mode, and fails when container mode is
// required (make test-containers) or podman cannot run a container.
func image(t *testing.T) string {
	t.Helper()
	return podrunner.RequireContainerMode(t)
}

// stage is what the Dockerfile's final stage sets.
type stage struct {
	from, user, workdir string
	entrypoint          []string
	labels              map[string]string
	// files are the paths the COPY instructions put in the image.
	files []string
}

// finalStage parses the Dockerfile's last stage (continuation lines
// joined): FROM, LABEL, USER, WORKDIR, ENTRYPOINT (exec form) and COPY.
func finalStage(t *testing.T, dockerfile string) stage {
	t.Helper()
	joined := strings.ReplaceAll(dockerfile, "\\\n", " ")
	var s stage
	for _, line := range strings.Split(joined, "\n") {
		line = strings.TrimSpace(line)
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			s = stage{from: rest, labels: map[string]string{}}
		case "LABEL":
			for _, kv := range splitQuoted(rest) {
				k, v, _ := strings.Cut(kv, "=")
				s.labels[k] = strings.Trim(v, `"`)
			}
		case "USER":
			s.user = rest
		case "WORKDIR":
			s.workdir = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &s.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: not the exec form: %v", rest, err)
			}
		case "COPY":
			f := strings.Fields(rest)
			f = slices.DeleteFunc(f, func(a string) bool { return strings.HasPrefix(a, "--") })
			dest := f[len(f)-1]
			for _, src := range f[:len(f)-1] {
				s.files = append(s.files, path.Join(dest, path.Base(src)))
			}
		}
	}
	return s
}

// splitQuoted splits on spaces outside double quotes.
func splitQuoted(s string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	for _, r := range s {
		switch {
		case r == '"':
			quoted = !quoted
			cur.WriteRune(r)
		case r == ' ' && !quoted:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

type imageConfig struct {
	User       string
	Env        []string
	Entrypoint []string
	WorkingDir string
	Labels     map[string]string
}

func inspect(t *testing.T, img string) imageConfig {
	t.Helper()
	out, err := exec.Command("podman", "image", "inspect", "--format", "{{json .Config}}", img).Output()
	if err != nil {
		t.Fatal(err)
	}
	var c imageConfig
	if err := json.Unmarshal(out, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// entry is a file of the image's filesystem.
type entry struct {
	mode     fs.FileMode
	uid, gid int
	body     []byte // regular files under 1 MiB
}

// files exports the image's filesystem (podman create, podman export).
func files(t *testing.T, img string) map[string]entry {
	t.Helper()
	id, err := exec.Command("podman", "create", img).Output()
	if err != nil {
		t.Fatal(err)
	}
	cid := strings.TrimSpace(string(id))
	defer func() { _ = exec.Command("podman", "rm", "--force", cid).Run() }()
	cmd := exec.Command("podman", "export", cid)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := map[string]entry{}
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		e := entry{mode: h.FileInfo().Mode(), uid: h.Uid, gid: h.Gid}
		if h.Typeflag == tar.TypeReg && h.Size < 1<<20 {
			e.body, _ = io.ReadAll(tr)
		}
		m[path.Clean("/"+h.Name)] = e
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	return m
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestImageLayout compares the image make image built with the
// Dockerfile users build with a registry: the final stage's user,
// entrypoint, working directory, labels and files, on a base with what
// distroless/static:nonroot gives a static binary.
func TestImageLayout(t *testing.T) {
	img := image(t)
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	want := finalStage(t, string(b))
	if want.from != "gcr.io/distroless/static:nonroot" {
		t.Fatalf("the Dockerfile's final stage is FROM %s: make image stands in for distroless/static:nonroot only (hack/build-image.sh)", want.from)
	}
	got := inspect(t, img)
	if got.User != want.user {
		t.Errorf("user %q, the Dockerfile's %q", got.User, want.user)
	}
	if !slices.Equal(got.Entrypoint, want.entrypoint) {
		t.Errorf("entrypoint %q, the Dockerfile's %q", got.Entrypoint, want.entrypoint)
	}
	if got.WorkingDir != want.workdir {
		t.Errorf("working directory %q, the Dockerfile's %q", got.WorkingDir, want.workdir)
	}
	for k, v := range want.labels {
		if got.Labels[k] != v {
			t.Errorf("label %s = %q, the Dockerfile's %q", k, got.Labels[k], v)
		}
	}
	if len(want.labels) == 0 {
		t.Error("no LABEL parsed from the Dockerfile's final stage")
	}
	// distroless/static's environment.
	for _, kv := range []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"} {
		if !slices.Contains(got.Env, kv) {
			t.Errorf("env %q lacks %s (distroless/static sets it)", got.Env, kv)
		}
	}

	fsys := files(t, img)
	t.Logf("the image holds %d files and directories", len(fsys))
	for _, f := range want.files {
		e, ok := fsys[f]
		switch {
		case !ok:
			t.Errorf("%s (the Dockerfile copies it) is not in the image", f)
		case !e.mode.IsRegular() || e.mode.Perm()&0o005 != 0o005:
			// Owned by root: the user 65532 runs it as "other".
			t.Errorf("%s: mode %s, want a regular file others can read and run", f, e.mode)
		}
	}
	// What distroless/static:nonroot gives (and a static binary needs).
	base := []struct {
		path     string
		mode     fs.FileMode
		uid      int
		contains string
	}{
		{"/etc/passwd", 0o644, 0, "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		{"/etc/group", 0o644, 0, "nonroot:x:65532:\n"},
		{"/etc/nsswitch.conf", 0o644, 0, "hosts: files dns"},
		{"/etc/ssl/certs/ca-certificates.crt", 0o644, 0, "-----BEGIN CERTIFICATE-----"},
		{"/usr/share/zoneinfo/UTC", 0o644, 0, "TZif"},
		{"/usr/share/zoneinfo/Europe/Berlin", 0o644, 0, "TZif"},
		{"/tmp", fs.ModeDir | fs.ModeSticky | 0o777, 0, ""},
		{"/home/nonroot", fs.ModeDir | 0o700, 65532, ""},
	}
	for _, w := range base {
		e, ok := fsys[w.path]
		if !ok {
			t.Errorf("%s is missing (distroless/static:nonroot has it)", w.path)
			continue
		}
		if e.mode != w.mode || e.uid != w.uid {
			t.Errorf("%s: mode %s uid %d, want %s uid %d", w.path, e.mode, e.uid, w.mode, w.uid)
		}
		if w.contains != "" && !bytes.Contains(e.body, []byte(w.contains)) {
			t.Errorf("%s does not contain %q", w.path, w.contains)
		}
	}
	// Nothing beyond the base and the binaries: no shell, no package
	// manager, nothing a user of distroless would not find.
	extra := slices.Sorted(maps.Keys(fsys))
	extra = slices.DeleteFunc(extra, func(p string) bool {
		for _, pre := range []string{"/etc", "/usr/share/zoneinfo", "/tmp", "/home", "/root", "/var", "/usr", "/proc", "/sys", "/dev", "/run"} {
			if p == pre || strings.HasPrefix(p, pre+"/") {
				return true
			}
		}
		return p == "/" || slices.Contains(want.files, p)
	})
	if len(extra) > 0 {
		t.Errorf("files beyond distroless's and the Dockerfile's: %q", extra)
	}
	for _, sh := range []string{"/bin/sh", "/bin/bash", "/usr/bin/apt"} {
		if _, ok := fsys[sh]; ok {
			t.Errorf("%s is in the image: distroless/static has no shell or package manager", sh)
		}
	}
}
