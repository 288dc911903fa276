package podrunner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Container mode: with Options.Runtime RuntimePodman, each container of a
// pod runs as a real container of Options.Image under podman (with runc:
// crun refuses hybrid cgroup hierarchies), with what the pod spec says
// (see podmanArgs and docs/containers.md):
//   - command, args, workingDir and the resolved env;
//   - volumes bind-mounted at their mount paths, Secret, ConfigMap and
//     projected ones read-only, their files with the items' modes and, with
//     an fsGroup, in that group (as the kubelet's volume ownership does);
//   - the security context: runAsUser, runAsGroup, runAsNonRoot (checked
//     against the image's user as the kubelet does), fsGroup and
//     supplementalGroups, readOnlyRootFilesystem, capabilities,
//     allowPrivilegeEscalation, privileged and the seccomp profile;
//   - limits.memory as the container's cgroup memory limit (no swap),
//     limits.cpu as a CPU quota; an OOM kill is reported as OOMKilled;
//   - the grace period: podman stop -t, SIGTERM then SIGKILL.
//
// The network is the host's: each pod keeps its own 127.x.y.z address.
const (
	// RuntimePodman runs containers with podman.
	RuntimePodman = "podman"
	// RuntimeEnv and ImageEnv name the environment variables that
	// OptionsFromEnv reads: the runtime ("podman", or empty for local
	// processes) and the local image every container runs.
	RuntimeEnv = "MONGOFERRY_POD_RUNTIME"
	ImageEnv   = "MONGOFERRY_POD_IMAGE"
	// DefaultImage is what make image builds when IMG is not given.
	DefaultImage = "ghcr.io/mongoferry/mongoferry:dev"
	// runnerLabel marks the containers of one runner.
	runnerLabel = "io.mongoferry.podrunner"
)

// ContainerMode reports whether the environment asks for container mode
// (MONGOFERRY_POD_RUNTIME=podman).
func ContainerMode() bool { return os.Getenv(RuntimeEnv) == RuntimePodman }

// RequiredEnv names the variable that makes container mode mandatory:
// with MONGOFERRY_CONTAINERS=required (make test-containers, and so make
// test, set it) a test that needs containers fails instead of skipping.
const RequiredEnv = "MONGOFERRY_CONTAINERS"

// Required reports whether the environment makes container mode mandatory
// (MONGOFERRY_CONTAINERS=required).
func Required() bool { return os.Getenv(RequiredEnv) == "required" }

// RequireContainerMode is the first call of a test that runs containers:
// it returns the image under test (MONGOFERRY_POD_IMAGE) once podman has
// run a container of it (Preflight). Outside container mode it skips, or
// fails when container mode is required; it fails when podman cannot run
// a container, saying why.
func RequireContainerMode(t testing.TB) string {
	t.Helper()
	if !ContainerMode() {
		if Required() {
			t.Fatalf("%s=required, but %s=%q: the container tests need %s=%s (make test-containers sets both)",
				RequiredEnv, RuntimeEnv, os.Getenv(RuntimeEnv), RuntimeEnv, RuntimePodman)
		}
		t.Skipf("runs containers: needs %s=%s (make test-containers)", RuntimeEnv, RuntimePodman)
	}
	img := FromEnv(Options{}).Image
	if err := Preflight(img, ""); err != nil {
		t.Fatal(err)
	}
	return img
}

// preflights holds Preflight's result per image and OCI runtime.
var preflights struct {
	sync.Mutex
	done map[[2]string]error
}

// Preflight runs CheckPodman once per process for an image and OCI
// runtime ("" for runc) and returns its result every time: container
// mode's tests and runners fail at once, with the cause, rather than
// wait for pods that will never start.
func Preflight(image, ociRuntime string) error {
	if ociRuntime == "" {
		ociRuntime = defaultOCIRuntime()
	}
	preflights.Lock()
	defer preflights.Unlock()
	key := [2]string{image, ociRuntime}
	if err, ok := preflights.done[key]; ok {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := CheckPodman(ctx, image, ociRuntime)
	if preflights.done == nil {
		preflights.done = map[[2]string]error{}
	}
	preflights.done[key] = err
	return err
}

// CheckPodman runs one container of image with the OCI runtime
// ociRuntime (runc from the PATH or /usr/sbin/runc when empty), as
// container mode runs every container (explicit ulimits, no pull): its
// /ferry version. The error names what failed, podman's own words and
// what to do.
func CheckPodman(ctx context.Context, image, ociRuntime string) error {
	const install = "install podman and runc from Debian packages (make container-tools, as root)"
	if _, err := exec.LookPath("podman"); err != nil {
		return fmt.Errorf("podrunner: podman is not installed (%v): %s", err, install)
	}
	if ociRuntime == "" {
		ociRuntime = defaultOCIRuntime()
	}
	run := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "podman", append([]string{"--runtime", ociRuntime}, args...)...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil {
			msg := strings.TrimSpace(stderr.String())
			if msg == "" {
				msg = strings.TrimSpace(stdout.String())
			}
			if msg == "" {
				msg = "no output"
			}
			return "", fmt.Errorf("%w: %s", err, msg)
		}
		return stdout.String(), nil
	}
	if _, err := run("image", "inspect", "--format", "{{.Id}}", image); err != nil {
		return fmt.Errorf("podrunner: podman cannot find or read the image %s (podman image inspect: %v): build it with make image IMG=%s; if podman itself fails, %s", image, err, image, install)
	}
	args := append([]string{"run", "--rm", "--pull", "never", "--network", "none"}, ulimits()...)
	args = append(args, "--entrypoint", "/ferry", image, "version")
	out, err := run(args...)
	if err != nil {
		return fmt.Errorf("podrunner: podman cannot run a container of %s with the runtime %s (podman run ... /ferry version: %v): %s, on a machine where podman may create containers (root or user namespaces, cgroups); then `podman --runtime %s run --rm --entrypoint /ferry %s version` prints the version",
			image, ociRuntime, err, install, ociRuntime, image)
	}
	if strings.TrimSpace(out) == "" {
		return fmt.Errorf("podrunner: a container of %s ran /ferry version and printed nothing: rebuild the image (make image IMG=%s)", image, image)
	}
	return nil
}

// defaultOCIRuntime is runc from the PATH, or Debian's /usr/sbin/runc.
func defaultOCIRuntime() string {
	if p, err := exec.LookPath("runc"); err == nil {
		return p
	}
	return "/usr/sbin/runc"
}

// FromEnv sets opts.Runtime and opts.Image from MONGOFERRY_POD_RUNTIME and
// MONGOFERRY_POD_IMAGE (DefaultImage when unset), unless already set.
func FromEnv(opts Options) Options {
	if opts.Runtime == "" {
		opts.Runtime = os.Getenv(RuntimeEnv)
	}
	if opts.Runtime == RuntimePodman && opts.Image == "" {
		opts.Image = os.Getenv(ImageEnv)
		if opts.Image == "" {
			opts.Image = DefaultImage
		}
	}
	return opts
}

// checkContainerMode validates the options of container mode and fills in
// the OCI runtime and the runner's label.
func (r *Runner) checkContainerMode() error {
	switch r.opts.Runtime {
	case "":
		return nil
	case RuntimePodman:
	default:
		return fmt.Errorf("podrunner: runtime %q: want %q or empty (local processes)", r.opts.Runtime, RuntimePodman)
	}
	if r.opts.OCIRuntime == "" {
		r.opts.OCIRuntime = defaultOCIRuntime()
	}
	if r.opts.Image == "" {
		return errors.New("podrunner: container mode needs Options.Image (MONGOFERRY_POD_IMAGE)")
	}
	if err := Preflight(r.opts.Image, r.opts.OCIRuntime); err != nil {
		return err
	}
	out, err := r.podman(context.Background(), "image", "inspect", "--format", "{{.Config.User}}", r.opts.Image)
	if err != nil {
		return fmt.Errorf("podrunner: image %s: %w (build it with make image IMG=%s)", r.opts.Image, err, r.opts.Image)
	}
	r.imageUser = strings.TrimSpace(out)
	var b [6]byte
	_, _ = rand.Read(b[:])
	r.id = hex.EncodeToString(b[:])
	return nil
}

// podman runs a podman command and returns its standard output; the error
// carries its standard error.
func (r *Runner) podman(ctx context.Context, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "podman", append([]string{"--runtime", r.opts.OCIRuntime}, args...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %w: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func containerName(pod, container string, run int, uid types.UID) string {
	return fmt.Sprintf("podrunner-%s-%s-%d-%s", pod, container, run, string(uid)[:8])
}

// launchContainer creates the container (an error there, such as a
// runAsNonRoot violation or a missing image, means it did not start) and
// starts it attached, its output going to the log.
func (r *Runner) launchContainer(ctx context.Context, s launchSpec) (*launched, error) {
	args, env, err := r.podmanArgs(s)
	if err != nil {
		return nil, &startError{"CreateContainerConfigError", err}
	}
	if err := setVolumeOwnership(s); err != nil {
		return nil, &startError{"CreateContainerConfigError", err}
	}
	_, _ = r.podman(ctx, "rm", "--force", "--ignore", s.name)
	// podman create runs to its end even when the pod is deleted
	// meanwhile (the container is then stopped and removed as a running
	// one): killed half-way, it leaves the container's storage behind
	// where no podman ps lists it (podman ps --external: "Storage").
	create := exec.Command("podman", append([]string{"--runtime", r.opts.OCIRuntime, "create"}, args...)...) //nolint:gosec // G204: the runner's own arguments
	// Values pass through podman's environment (--env NAME), never its
	// command line, where any user of this machine could read them.
	create.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	create.Stderr = &stderr
	if err := create.Run(); err != nil {
		return nil, &startError{"CreateContainerError", fmt.Errorf("podman create: %w: %s", err, strings.TrimSpace(stderr.String()))}
	}
	cmd := exec.Command("podman", "--runtime", r.opts.OCIRuntime, "start", "--attach", s.name) //nolint:gosec // G204: the runner's own container name
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		_, _ = r.podman(context.Background(), "rm", "--force", s.name)
		return nil, &startError{"RunContainerError", err}
	}
	l := &launched{what: "container " + s.name, imageID: r.opts.Image, args: s.args, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(l.exited) }()
	l.stop = func(grace time.Duration) {
		secs := strconv.Itoa(int((grace + time.Second - 1) / time.Second))
		if _, err := r.podman(context.Background(), "stop", "--time", secs, s.name); err != nil {
			r.opts.Logf("podrunner: %v", err)
		}
		<-l.exited
	}
	l.result = func() (int, string) {
		defer func() { _, _ = r.podman(context.Background(), "rm", "--force", s.name) }()
		out, err := r.podman(context.Background(), "inspect", "--format", "{{.State.ExitCode}} {{.State.OOMKilled}} {{.State.Error}}", s.name)
		f := strings.SplitN(strings.TrimSpace(out), " ", 3)
		var n int
		var convErr error
		if len(f) >= 2 {
			n, convErr = strconv.Atoi(f[0])
		}
		switch {
		case err != nil || len(f) < 2 || convErr != nil:
			r.opts.Logf("podrunner: exit of %s unknown: %v", s.name, err)
			return max(cmd.ProcessState.ExitCode(), 1), ""
		case len(f) == 3 && f[2] != "", cmd.ProcessState.ExitCode() == 125 && n == 0:
			// The runtime could not start it (containerd's StartError);
			// podman start says so with its code 125 and no exit.
			return 128, "StartError"
		case f[1] == "true":
			return n, "OOMKilled"
		}
		return n, ""
	}
	return l, nil
}

// stopContainers removes whatever containers of this runner are left
// (a test that ended without stopping its pods).
func (r *Runner) stopContainers() {
	if r.opts.Runtime != RuntimePodman {
		return
	}
	out, err := r.podman(context.Background(), "ps", "--all", "--quiet", "--filter", "label="+runnerLabel+"="+r.id)
	if err != nil {
		r.opts.Logf("podrunner: %v", err)
		return
	}
	if ids := strings.Fields(out); len(ids) > 0 {
		_, _ = r.podman(context.Background(), append([]string{"rm", "--force", "--time", "0"}, ids...)...)
	}
}

// setVolumeOwnership gives the pod's fsGroup the volumes' files, as the
// kubelet does: group fsGroup, group read (and write for writable
// volumes), directories setgid. Without an fsGroup the files stay root's.
func setVolumeOwnership(s launchSpec) error {
	sc := s.pod.Spec.SecurityContext
	if sc == nil || sc.FSGroup == nil {
		return nil
	}
	gid := int(*sc.FSGroup)
	for _, m := range s.mounts {
		mask := fs.FileMode(0o660)
		if m.readOnly {
			mask = 0o440
		}
		err := filepath.WalkDir(m.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if err := os.Lchown(p, -1, gid); err != nil {
				return err
			}
			mode := info.Mode().Perm() | mask
			if d.IsDir() {
				return os.Chmod(p, mode|0o110|fs.ModeSetgid)
			}
			return os.Chmod(p, mode)
		})
		if err != nil {
			return fmt.Errorf("volume at %s: fsGroup %d: %w", m.path, gid, err)
		}
	}
	return nil
}
