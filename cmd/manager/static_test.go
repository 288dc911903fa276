package main

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestStaticBuild builds both binaries of the image as the Dockerfile does
// and checks that they run on distroless/static: no dynamic loader
// (PT_INTERP), no shared libraries, and the version and default worker
// image stamped by -ldflags -X (a wrong package path there is silently
// ignored by the linker).
func TestStaticBuild(t *testing.T) {
	dir := staticBinaries(t)
	for _, name := range []string{"manager", "ferry"} {
		t.Run(name, func(t *testing.T) {
			f, err := elf.Open(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = f.Close() }()
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("%s has a PT_INTERP program header: it is dynamically linked and will not start on distroless/static", name)
				}
			}
			if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
				t.Errorf("%s needs shared libraries %v (%v)", name, libs, err)
			}
			if f.Section(".symtab") != nil {
				t.Errorf("%s has a symbol table: -ldflags -s was not applied", name)
			}
		})
	}

	out, err := exec.Command(filepath.Join(dir, "ferry"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ferry "+testVersion+" ") {
		t.Errorf("ferry version: %q, %v; want the stamped version %s", out, err, testVersion)
	}
	// -help prints the flags with their defaults and exits 0 (flag.ExitOnError).
	out, _ = exec.Command(filepath.Join(dir, "manager"), "-help").CombinedOutput()
	if !strings.Contains(string(out), `(default "`+testImage+`")`) {
		t.Errorf("manager -help does not show the stamped worker image %s as the default of --worker-image:\n%s", testImage, out)
	}
}

// TestStaticDockerfile checks that the Dockerfile builds the way
// TestStaticBuild does, on the Go version of go.mod, into a non-root
// distroless image, and that .dockerignore lets in every directory the
// binaries are built from.
func TestStaticDockerfile(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := string(b)
	for _, want := range []string{
		"CGO_ENABLED=0",
		"go build -trimpath",
		`-ldflags "-s -w ` + versionLDFlag + `${VERSION} ` + imageLDFlag + `${IMAGE}"`,
		`-ldflags "-s -w ` + versionLDFlag + `${VERSION}"`,
		"-o /out/manager ./cmd/manager",
		"-o /out/ferry ./cmd/ferry",
		"--mount=type=cache,target=/go/pkg/mod",
		"go mod download",
		"FROM gcr.io/distroless/static:nonroot",
		"COPY --from=builder /out/manager /out/ferry /",
		"USER 65532:65532",
		`ENTRYPOINT ["/manager"]`,
	} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if strings.Contains(dockerfile, "GOMEMLIMIT") {
		t.Error("Dockerfile sets GOMEMLIMIT: ferry sets its own memory limit from cache.maxBytes")
	}

	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	if goVersion == nil || !strings.Contains(dockerfile, "ARG GO_VERSION="+string(goVersion[1])+"\n") {
		t.Errorf("Dockerfile's GO_VERSION is not go.mod's go version %s", goVersion)
	}

	// .dockerignore ignores everything, then lets in what it names.
	ignore, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(ignore)))
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "!") {
			allowed[strings.TrimSuffix(strings.TrimPrefix(line, "!"), "/")] = true
		}
	}
	list := exec.Command("go", "list", "-deps", "-f", "{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}", "./cmd/manager", "./cmd/ferry")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		if top := strings.Split(filepath.ToSlash(rel), "/")[0]; !allowed[top] {
			t.Errorf(".dockerignore keeps %s out of the build context, and %s is built from it", top, rel)
		}
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		if !allowed[f] {
			t.Errorf(".dockerignore keeps %s out of the build context", f)
		}
	}
}
