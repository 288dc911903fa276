package podrunner

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
)

// ulimits are the open-file and process limits of the containers: runc
// needs them given here (podman's default of 1048576 open files fails),
// and a container cannot raise them above the hard limits runc itself
// runs under: open files as this process's hard limit (as a container
// under containerd gets the daemon's), processes 32768 (65536 fails on
// this machine).
func ulimits() []string {
	nofile := uint64(1024)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil {
		nofile = min(rl.Max, 1<<20)
	}
	return []string{"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile, nofile), "--ulimit", "nproc=32768:32768"}
}

// podmanArgs is the podman create command line of one container run, and
// the NAME=VALUE environment that carries its env values (passed as --env
// NAME).
func (r *Runner) podmanArgs(s launchSpec) (args, env []string, err error) {
	pod, c := s.pod, s.c
	args = []string{
		"--name", s.name, "--label", runnerLabel + "=" + r.id,
		"--pull", "never", "--network", "host", "--hostname", pod.Name,
	}
	args = append(args, ulimits()...)
	for _, kv := range s.env {
		k, _, _ := strings.Cut(kv, "=")
		args = append(args, "--env", k)
		env = append(env, kv)
	}
	sec, err := r.securityArgs(pod, c)
	if err != nil {
		return nil, nil, err
	}
	args = append(args, sec...)
	res, err := resourceArgs(c)
	if err != nil {
		return nil, nil, err
	}
	args = append(args, res...)
	for _, m := range s.mounts {
		opt := "rw"
		if m.readOnly {
			opt = "ro"
		}
		args = append(args, "--volume", m.dir+":"+m.path+":"+opt)
	}
	if c.WorkingDir != "" {
		args = append(args, "--workdir", c.WorkingDir)
	}
	cmdArgs := s.args
	if len(c.Command) > 0 {
		args = append(args, "--entrypoint", s.args[0])
		cmdArgs = s.args[1:]
	}
	args = append(args, r.opts.Image)
	return append(args, cmdArgs...), env, nil
}

// securityArgs maps the pod's and the container's security contexts (the
// container's fields win) to podman's flags, and refuses what the kubelet
// refuses: runAsNonRoot with user 0, or with an image user it cannot tell
// is not root.
func (r *Runner) securityArgs(pod *corev1.Pod, c *corev1.Container) ([]string, error) {
	psc := pod.Spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	csc := c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	uid, gid, nonRoot := first(csc.RunAsUser, psc.RunAsUser), first(csc.RunAsGroup, psc.RunAsGroup), first(csc.RunAsNonRoot, psc.RunAsNonRoot)
	var args []string
	imageUID, imageGID, _ := strings.Cut(r.imageUser, ":")
	user := imageUID
	if uid != nil {
		user = strconv.FormatInt(*uid, 10)
	}
	if nonRoot != nil && *nonRoot {
		n, err := strconv.ParseInt(user, 10, 64)
		switch {
		case uid == nil && err != nil:
			return nil, fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root", r.imageUser)
		case n == 0:
			return nil, fmt.Errorf("container's runAsUser breaks non-root policy (pod: %q, container: %s)", pod.Name, c.Name)
		}
	}
	switch {
	case gid != nil:
		args = append(args, "--user", fmt.Sprintf("%s:%d", orDefault(user, "0"), *gid))
	case uid != nil:
		// The kubelet's runAsUser without runAsGroup keeps the image's
		// group only when the image names the same user; 0 otherwise.
		group := "0"
		if user == imageUID && imageGID != "" {
			group = imageGID
		}
		args = append(args, "--user", user+":"+group)
	}
	if psc.FSGroup != nil {
		args = append(args, "--group-add", strconv.FormatInt(*psc.FSGroup, 10))
	}
	for _, g := range psc.SupplementalGroups {
		args = append(args, "--group-add", strconv.FormatInt(g, 10))
	}
	if csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem {
		// No tmpfs on /tmp and /run either, as in a pod.
		args = append(args, "--read-only", "--read-only-tmpfs=false")
	}
	if csc.Privileged != nil && *csc.Privileged {
		args = append(args, "--privileged")
	}
	if caps := csc.Capabilities; caps != nil {
		for _, d := range caps.Drop {
			args = append(args, "--cap-drop", string(d))
		}
		for _, a := range caps.Add {
			args = append(args, "--cap-add", string(a))
		}
	}
	if csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	seccomp := csc.SeccompProfile
	if seccomp == nil {
		seccomp = psc.SeccompProfile
	}
	switch {
	case seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeRuntimeDefault:
		// podman's default profile.
	case seccomp != nil && seccomp.Type == corev1.SeccompProfileTypeLocalhost:
		return nil, fmt.Errorf("seccompProfile Localhost is not supported by the pod runner")
	default:
		// A kubelet without SeccompDefault runs containers unconfined.
		args = append(args, "--security-opt", "seccomp=unconfined")
	}
	return args, nil
}

// resourceArgs maps the container's limits: memory to the cgroup's memory
// limit without swap, cpu to a CPU quota. Requests are not enforced.
func resourceArgs(c *corev1.Container) ([]string, error) {
	var args []string
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		b := strconv.FormatInt(q.Value(), 10)
		args = append(args, "--memory", b, "--memory-swap", b)
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		args = append(args, "--cpus", strconv.FormatFloat(float64(q.MilliValue())/1000, 'f', 3, 64))
	}
	return args, nil
}

func first[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
