package podrunner

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// How a container is run.
const (
	// probeInterval is how often readiness probes run (faster than a
	// kubelet's default 10 s, so that tests do not wait on it).
	probeInterval = 500 * time.Millisecond
	// stableRun is how long a container must run for its restart back-off
	// to start again from one second.
	stableRun = 10 * time.Second
	// The kubelet's termination message from logs: the last 80 lines, at
	// most 2048 bytes.
	terminationLines = 80
	terminationBytes = 2048
)

// podProc is a running pod: one containerProc per container.
type podProc struct {
	runner  *Runner
	name    string
	uid     types.UID
	ip      netip.Addr
	grace   time.Duration
	created time.Time

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu           sync.Mutex
	containers   []*containerProc
	stopping     bool
	graceNow     time.Duration
	readyChanged time.Time
	wasReady     bool
}

// containerProc is one container's processes over its restarts.
type containerProc struct {
	name, image, binary string
	state               corev1.ContainerState
	last                *corev1.ContainerStateTerminated
	restarts            int32
	runs                int
	ready               bool
	done                bool
}

func (p *podProc) terminating() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopping
}

// start runs the pod's containers and their readiness probes.
func (p *podProc) start(_ context.Context, pod *corev1.Pod) {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	pod = pod.DeepCopy()
	p.mu.Lock()
	for _, c := range pod.Spec.Containers {
		p.containers = append(p.containers, &containerProc{name: c.Name, image: c.Image,
			state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}})
	}
	p.mu.Unlock()
	for i := range pod.Spec.Containers {
		p.wg.Go(func() { p.supervise(ctx, pod, i) })
		p.wg.Go(func() { p.probe(ctx, &pod.Spec.Containers[i], p.containers[i]) })
	}
}

// terminate stops every container: SIGTERM, then SIGKILL after grace.
func (p *podProc) terminate(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	p.graceNow = grace
	p.mu.Unlock()
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
}

// supervise runs one container until the pod stops, restarting it by the
// pod's restartPolicy.
func (p *podProc) supervise(ctx context.Context, pod *corev1.Pod, i int) {
	c := &pod.Spec.Containers[i]
	cp := p.containers[i]
	backoff := time.Second
	for ctx.Err() == nil {
		started := time.Now()
		exit, err := p.runOnce(ctx, pod, c, cp)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// Not started (a missing Secret, no binary): try again, as the
			// kubelet does, without counting a restart.
			p.setState(cp, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonOf(err), Message: err.Error()}})
			if !sleep(ctx, time.Second) {
				return
			}
			continue
		}
		restart := pod.Spec.RestartPolicy != corev1.RestartPolicyNever &&
			(pod.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || exit.ExitCode != 0)
		p.runner.opts.Logf("podrunner: pod %s container %s exited with code %d (restart: %v)", p.name, c.Name, exit.ExitCode, restart)
		if !restart {
			p.mu.Lock()
			cp.done = true
			p.mu.Unlock()
			return
		}
		if time.Since(started) > stableRun {
			backoff = time.Second
		}
		p.mu.Lock()
		cp.last = exit
		cp.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", backoff, c.Name, p.name)}}
		p.mu.Unlock()
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(2*backoff, p.runner.opts.MaxBackoff)
		p.mu.Lock()
		cp.restarts++
		p.mu.Unlock()
	}
}

type startError struct {
	reason string
	err    error
}

func (e *startError) Error() string { return e.err.Error() }

func reasonOf(err error) string {
	var se *startError
	if errors.As(err, &se) {
		return se.reason
	}
	return "RunContainerError"
}

// runOnce starts the container's process and waits for it to exit or for
// the pod to stop. An error means it did not start.
func (p *podProc) runOnce(ctx context.Context, pod *corev1.Pod, c *corev1.Container, cp *containerProc) (*corev1.ContainerStateTerminated, error) {
	r := p.runner
	env, vars, err := r.resolveEnv(ctx, pod, c, p.ip.String())
	if err != nil {
		return nil, &startError{"CreateContainerConfigError", err}
	}
	var args []string
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		// All pods share this machine's network: a wildcard listen
		// address (0.0.0.0, or a port alone: ":8081", "--x=:8081")
		// becomes the pod's own.
		a = strings.ReplaceAll(expand(a, vars), "0.0.0.0", p.ip.String())
		args = append(args, portOnly.ReplaceAllString(a, "${1}"+p.ip.String()+":${2}"))
	}
	dir := filepath.Join(r.opts.LogDir, "pods", p.name+"-"+string(p.uid)[:8])
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, err
	}
	mounts, err := r.mountVolumes(ctx, pod, c, dir)
	if err != nil {
		return nil, &startError{"CreateContainerConfigError", err}
	}
	p.mu.Lock()
	run := cp.runs
	p.mu.Unlock()
	if run == 0 {
		r.keepLogsOfEarlierPod(p.name, c.Name, p.uid)
	}
	logf, err := os.Create(filepath.Join(r.opts.LogDir, fmt.Sprintf("%s_%s_%d.log", p.name, c.Name, run)))
	if err != nil {
		return nil, err
	}
	defer func() { _ = logf.Close() }()
	tail := &tailBuffer{max: 4 * terminationBytes}
	spec := launchSpec{pod: pod, c: c, args: args, env: env, dir: dir, mounts: mounts,
		out: io.MultiWriter(logf, tail), name: containerName(p.name, c.Name, run, p.uid)}
	var l *launched
	if r.opts.Runtime == RuntimePodman {
		l, err = r.launchContainer(ctx, spec)
	} else {
		l, err = r.launchProcess(spec)
	}
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	cp.runs++
	cp.binary = l.imageID
	p.mu.Unlock()
	startedAt := metav1.NewTime(time.Now().Truncate(time.Second))
	p.setState(cp, corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}})
	r.opts.Logf("podrunner: pod %s container %s started (%s): %s", p.name, c.Name, l.what, strings.Join(l.args, " "))

	select {
	case <-l.exited:
	case <-ctx.Done():
		p.mu.Lock()
		grace := p.graceNow
		p.mu.Unlock()
		asked := time.Now()
		l.stop(grace)
		code, reason := l.result()
		r.opts.Logf("podrunner: pod %s container %s stopped with exit code %d%s %.1fs after SIGTERM (grace period %s)",
			p.name, c.Name, code, parenthesised(reason), time.Since(asked).Seconds(), grace)
		return p.terminated(cp, c, run, startedAt, tail, code, reason), nil
	}
	code, reason := l.result()
	return p.terminated(cp, c, run, startedAt, tail, code, reason), nil
}

// terminated records a container run's exit as the kubelet reports it.
func (p *podProc) terminated(cp *containerProc, c *corev1.Container, run int, startedAt metav1.Time, tail *tailBuffer, code int, reason string) *corev1.ContainerStateTerminated {
	exit := &corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: "Completed",
		StartedAt: startedAt, FinishedAt: metav1.NewTime(time.Now().Truncate(time.Second)),
		ContainerID: containerID(p.name, c.Name, run)}
	if code != 0 {
		exit.Reason = "Error"
		if reason != "" {
			exit.Reason = reason
		}
		if c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
			exit.Message = tail.last(terminationLines, terminationBytes)
		}
	}
	p.setState(cp, corev1.ContainerState{Terminated: exit})
	return exit
}

func containerID(pod, container string, run int) string {
	return fmt.Sprintf("podrunner://%s/%s/%d", pod, container, run)
}

func (p *podProc) setState(cp *containerProc, s corev1.ContainerState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cp.state = s
	if s.Running == nil {
		cp.ready = false
	}
}

// probe runs a container's HTTP or TCP readiness probe while it runs; a
// container without one is ready while it runs (exec probes count as
// passing).
func (p *podProc) probe(ctx context.Context, c *corev1.Container, cp *containerProc) {
	hc := &http.Client{Timeout: time.Second}
	for sleep(ctx, probeInterval) {
		p.mu.Lock()
		running := cp.state.Running != nil
		p.mu.Unlock()
		ok := running
		if running && c.ReadinessProbe != nil {
			ok = p.probeOnce(ctx, hc, c, c.ReadinessProbe)
		}
		p.mu.Lock()
		cp.ready = ok && cp.state.Running != nil
		p.mu.Unlock()
	}
}

func (p *podProc) probeOnce(ctx context.Context, hc *http.Client, c *corev1.Container, pr *corev1.Probe) bool {
	port := func(ps string, pi int32) string {
		if ps == "" {
			return strconv.Itoa(int(pi))
		}
		for _, cp := range c.Ports {
			if cp.Name == ps {
				return strconv.Itoa(int(cp.ContainerPort))
			}
		}
		return ps
	}
	switch {
	case pr.HTTPGet != nil:
		h := pr.HTTPGet
		host := h.Host
		if host == "" {
			host = p.ip.String()
		}
		scheme := "http://"
		if h.Scheme == corev1.URISchemeHTTPS {
			// As the kubelet: TLS without verifying the certificate.
			scheme, hc = "https://", insecureProbeClient
		}
		url := scheme + net.JoinHostPort(host, port(h.Port.StrVal, h.Port.IntVal)) + h.Path
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case pr.TCPSocket != nil:
		d := net.Dialer{Timeout: time.Second}
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(p.ip.String(), port(pr.TCPSocket.Port.StrVal, pr.TCPSocket.Port.IntVal)))
		if err != nil {
			return false
		}
		_ = conn.Close()
		return true
	}
	return true
}

// insecureProbeClient runs HTTPS probes.
var insecureProbeClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // G402: the kubelet's HTTPS probes do not verify either
}}

// status is the pod status the kubelet would report.
func (p *podProc) status(pod *corev1.Pod) corev1.PodStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	created := metav1.NewTime(p.created.Truncate(time.Second))
	st := corev1.PodStatus{
		PodIP: p.ip.String(), PodIPs: []corev1.PodIP{{IP: p.ip.String()}},
		HostIP: "127.0.0.1", HostIPs: []corev1.HostIP{{IP: "127.0.0.1"}},
		StartTime: &created, QOSClass: pod.Status.QOSClass,
	}
	allReady, anyStarted, allDone, anyFailed := true, false, true, false
	for _, cp := range p.containers {
		started := cp.state.Running != nil
		cs := corev1.ContainerStatus{Name: cp.name, Image: cp.image, ImageID: "podrunner://" + cp.binary,
			Ready: cp.ready, Started: &started, RestartCount: cp.restarts, State: cp.state}
		if cp.runs > 0 {
			cs.ContainerID = containerID(p.name, cp.name, cp.runs-1)
		}
		if cp.last != nil {
			cs.LastTerminationState = corev1.ContainerState{Terminated: cp.last}
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
		allReady = allReady && cp.ready
		anyStarted = anyStarted || cp.runs > 0
		allDone = allDone && cp.done
		anyFailed = anyFailed || (cp.done && cp.state.Terminated != nil && cp.state.Terminated.ExitCode != 0)
	}
	switch {
	case len(p.containers) > 0 && allDone && anyFailed:
		st.Phase = corev1.PodFailed
	case len(p.containers) > 0 && allDone:
		st.Phase = corev1.PodSucceeded
	case anyStarted:
		st.Phase = corev1.PodRunning
	default:
		st.Phase = corev1.PodPending
	}
	if allReady != p.wasReady || p.readyChanged.IsZero() {
		p.wasReady, p.readyChanged = allReady, time.Now().Truncate(time.Second)
	}
	st.Conditions = []corev1.PodCondition{
		condition(corev1.PodScheduled, true, p.created.Truncate(time.Second)),
		condition(corev1.PodInitialized, true, p.created.Truncate(time.Second)),
		condition(corev1.ContainersReady, allReady, p.readyChanged),
		condition(corev1.PodReady, allReady, p.readyChanged),
	}
	return st
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// tailBuffer keeps the last bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > b.max {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-b.max:]...)
	}
	return len(p), nil
}

// last returns at most the last lines lines and bytes bytes.
func (b *tailBuffer) last(lines, bytes int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := strings.TrimRight(string(b.buf), "\n")
	if ls := strings.Split(s, "\n"); len(ls) > lines {
		s = strings.Join(ls[len(ls)-lines:], "\n")
	}
	if len(s) > bytes {
		s = s[len(s)-bytes:]
	}
	return s
}

// launchSpec is what runOnce hands a launcher: the container, its command
// line (command and args, expanded, wildcard addresses replaced) and
// environment, the pod's directory and volumes, where its output goes and
// a name unique to this run.
type launchSpec struct {
	pod    *corev1.Pod
	c      *corev1.Container
	args   []string
	env    []string
	dir    string
	mounts []mount
	out    io.Writer
	name   string
}

// launched is a started container. exited closes when it ends; stop ends
// it as a kubelet does (SIGTERM, SIGKILL after grace) and waits; result
// then gives its exit code and a reason other than Error ("OOMKilled"),
// or "".
type launched struct {
	// what names the process or container in the runner's log; imageID
	// is the status' imageID (after "podrunner://").
	what, imageID string
	args          []string
	exited        chan struct{}
	stop          func(grace time.Duration)
	result        func() (code int, reason string)
}

// launchProcess starts a container as a local process: its command mapped
// by Options.Binaries, mount paths replaced by the directories the volumes
// were written to, HOME and TMPDIR in the pod's directory.
func (r *Runner) launchProcess(s launchSpec) (*launched, error) {
	c := s.c
	if len(c.Command) == 0 {
		return nil, &startError{"RunContainerError", errors.New("the container has no command: the runner cannot use an image's entrypoint")}
	}
	bin := r.opts.Binaries[c.Command[0]]
	if bin == "" {
		bin = r.opts.Binaries[filepath.Base(c.Command[0])]
	}
	if bin == "" {
		return nil, &startError{"RunContainerError", fmt.Errorf("no local binary for command %q: add it to podrunner.Options.Binaries", c.Command[0])}
	}
	env := append([]string{"PATH=" + os.Getenv("PATH")}, s.env...)
	for i := range env {
		env[i] = remap(env[i], s.mounts)
	}
	args := make([]string, 0, len(s.args)-1)
	for _, a := range s.args[1:] {
		args = append(args, remap(a, s.mounts))
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(env, "HOME="+s.dir, "TMPDIR="+filepath.Join(s.dir, "tmp"))
	cmd.Dir = s.dir
	cmd.Stdout = s.out
	cmd.Stderr = s.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, &startError{"RunContainerError", err}
	}
	l := &launched{what: fmt.Sprintf("pid %d", cmd.Process.Pid), imageID: bin, args: append([]string{filepath.Base(bin)}, args...), exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(l.exited) }()
	l.stop = func(grace time.Duration) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-l.exited:
		case <-time.After(grace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-l.exited
		}
	}
	l.result = func() (int, string) {
		code := cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return code, ""
	}
	return l, nil
}

func parenthesised(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

// keepLogsOfEarlierPod renames the log files of an earlier pod of the same
// name (a StatefulSet's replaced pod) to <pod>_<container>_<n>.before-<uid>.log,
// so that the new pod's runs do not overwrite them: LogFiles still lists
// them, pods/log serves the new pod's.
func (r *Runner) keepLogsOfEarlierPod(pod, container string, uid types.UID) {
	prefix := pod + "_" + container + "_"
	files, _ := filepath.Glob(filepath.Join(r.opts.LogDir, prefix+"*.log"))
	for _, f := range files {
		n := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), prefix), ".log")
		if _, err := strconv.Atoi(n); err == nil {
			_ = os.Rename(f, strings.TrimSuffix(f, ".log")+".before-"+string(uid)[:8]+".log")
		}
	}
}

// portOnly matches an argument, or a flag's value, that is a port alone.
var portOnly = regexp.MustCompile(`^(|.*=):(\d+)$`)
