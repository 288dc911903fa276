package podrunner

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NodeName is the node name the runner puts on the pods it creates; it
// runs pods bound to it and pods bound to no node.
const NodeName = "podrunner"

// Options configures a Runner.
type Options struct {
	// Client reaches the API server. It should read directly from the
	// server (not a cache), as envtestutil.Env.Client does.
	Client client.Client
	// Namespace is where the runner plays StatefulSet controller and
	// kubelet.
	Namespace string
	// Binaries maps a container command, or its base name ("ferry"), to a
	// local executable. A container whose command is not in the map does
	// not start (RunContainerError).
	Binaries map[string]string
	// FirstIP is the first pod address; 127.x.y.1 with random x (10-249)
	// and y when unset. Each pod gets the next one.
	FirstIP netip.Addr
	// LogDir receives one file per container run (<pod>_<container>_<n>.log);
	// a new temporary directory when empty.
	LogDir string
	// Logf reports pod starts, exits and deletions; silent when nil.
	Logf func(format string, args ...any)
	// Interval is the time between two passes over the namespace; 200ms
	// when zero.
	Interval time.Duration
	// MaxGracePeriod caps the time between SIGTERM and SIGKILL of a
	// deleted pod; 10s when zero.
	MaxGracePeriod time.Duration
	// Runtime is how containers run: "" as local processes (Binaries),
	// RuntimePodman as containers of Image (container.go). FromEnv sets it
	// from MONGOFERRY_POD_RUNTIME.
	Runtime string
	// Image is the local image every container runs in container mode,
	// whatever image the pod names (MONGOFERRY_POD_IMAGE).
	Image string
	// OCIRuntime is podman's --runtime in container mode; runc from the
	// PATH or /usr/sbin/runc when empty.
	OCIRuntime string
	// MaxBackoff caps the delay before a crashed container restarts (1s,
	// doubling); 5s when zero.
	MaxBackoff time.Duration
}

// Runner runs a namespace's StatefulSets and pods.
type Runner struct {
	opts   Options
	c      client.Client
	cancel context.CancelFunc
	done   chan struct{}

	// id labels this runner's containers; imageUser is Image's user
	// (container mode).
	id, imageUser string

	mu     sync.Mutex
	pods   map[types.UID]*podProc
	nextIP netip.Addr
}

// Start starts a Runner for a test and stops it (and every process it
// started) when the test ends. When the test has failed, the tail of every
// container log is written to the test log.
func Start(t testing.TB, opts Options) *Runner {
	t.Helper()
	if opts.LogDir == "" {
		opts.LogDir = t.TempDir()
	}
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.Run()
	t.Cleanup(func() {
		r.Stop()
		if t.Failed() {
			r.dumpLogs(t)
		}
	})
	return r
}

// New returns a Runner; Run starts it.
func New(opts Options) (*Runner, error) {
	if opts.Client == nil || opts.Namespace == "" {
		return nil, errors.New("podrunner: Client and Namespace are required")
	}
	if !opts.FirstIP.IsValid() {
		// A random /24 of the loopback range, so that runners of test
		// processes running side by side do not hand out the same
		// addresses (and ports).
		opts.FirstIP = netip.AddrFrom4([4]byte{127, byte(10 + rand.IntN(240)), byte(rand.IntN(256)), 1})
	}
	if !opts.FirstIP.Is4() || !opts.FirstIP.IsLoopback() {
		return nil, fmt.Errorf("podrunner: FirstIP %s is not an IPv4 loopback address", opts.FirstIP)
	}
	if opts.LogDir == "" {
		dir, err := os.MkdirTemp("", "podrunner-")
		if err != nil {
			return nil, err
		}
		opts.LogDir = dir
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Interval == 0 {
		opts.Interval = 200 * time.Millisecond
	}
	if opts.MaxGracePeriod == 0 {
		opts.MaxGracePeriod = 10 * time.Second
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 5 * time.Second
	}
	r := &Runner{opts: opts, c: opts.Client, pods: map[types.UID]*podProc{}, nextIP: opts.FirstIP}
	if err := r.checkContainerMode(); err != nil {
		return nil, err
	}
	return r, nil
}

// Run starts the runner's loop in the background.
func (r *Runner) Run() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	if err := r.registerLogs(ctx); err != nil {
		r.opts.Logf("podrunner: pods/log will not answer: %v", err)
	}
	go func() {
		defer close(r.done)
		t := time.NewTicker(r.opts.Interval)
		defer t.Stop()
		for {
			r.pass(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the loop and stops every process (SIGTERM, then SIGKILL after
// two seconds); pods are left as they are in the API server.
func (r *Runner) Stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.unregisterLogs()
	r.mu.Lock()
	procs := make([]*podProc, 0, len(r.pods))
	for _, p := range r.pods {
		procs = append(procs, p)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() { p.terminate(2 * time.Second) })
	}
	wg.Wait()
	r.stopContainers()
}

// PodIP returns the address given to a running pod, or "".
func (r *Runner) PodIP(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pods {
		if p.name == name {
			return p.ip.String()
		}
	}
	return ""
}

// LogFiles returns the container log files written so far, oldest first.
func (r *Runner) LogFiles() []string {
	files, _ := filepath.Glob(filepath.Join(r.opts.LogDir, "*.log"))
	sort.Slice(files, func(i, j int) bool {
		a, _ := os.Stat(files[i])
		b, _ := os.Stat(files[j])
		return a != nil && b != nil && a.ModTime().Before(b.ModTime())
	})
	return files
}

func (r *Runner) dumpLogs(t testing.TB) {
	for _, f := range r.LogFiles() {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(b) > 8<<10 {
			b = append([]byte("...\n"), b[len(b)-8<<10:]...)
		}
		t.Logf("podrunner: %s:\n%s", filepath.Base(f), b)
	}
}

// pass is one round: StatefulSets to pods, pods to processes, processes
// to pod status.
func (r *Runner) pass(ctx context.Context) {
	if err := r.syncStatefulSets(ctx); err != nil && ctx.Err() == nil {
		r.opts.Logf("podrunner: StatefulSets: %v", err)
	}
	if err := r.syncPods(ctx); err != nil && ctx.Err() == nil {
		r.opts.Logf("podrunner: pods: %v", err)
	}
}

// syncPods starts processes for new pods, stops those of deleted pods and
// writes every pod's status.
func (r *Runner) syncPods(ctx context.Context) error {
	var pods corev1.PodList
	if err := r.c.List(ctx, &pods, client.InNamespace(r.opts.Namespace)); err != nil {
		return err
	}
	present := map[types.UID]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName != "" && pod.Spec.NodeName != NodeName {
			continue
		}
		present[pod.UID] = true
		r.mu.Lock()
		p := r.pods[pod.UID]
		if p == nil && pod.DeletionTimestamp == nil {
			p = r.newPod(pod)
			r.pods[pod.UID] = p
			r.mu.Unlock()
			r.opts.Logf("podrunner: starting pod %s on %s", pod.Name, p.ip)
			p.start(ctx, pod)
		} else {
			r.mu.Unlock()
		}
		if pod.DeletionTimestamp != nil {
			r.deletePod(ctx, pod, p)
			continue
		}
		if err := r.writePodStatus(ctx, pod, p); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			r.opts.Logf("podrunner: status of pod %s: %v", pod.Name, err)
		}
	}
	// Pods removed without a graceful deletion (force-deleted).
	r.mu.Lock()
	var gone []*podProc
	for uid, p := range r.pods {
		if !present[uid] {
			gone = append(gone, p)
			delete(r.pods, uid)
		}
	}
	r.mu.Unlock()
	for _, p := range gone {
		r.opts.Logf("podrunner: pod %s is gone: stopping it", p.name)
		go p.terminate(p.grace)
	}
	return nil
}

func (r *Runner) newPod(pod *corev1.Pod) *podProc {
	ip := r.nextIP
	r.nextIP = r.nextIP.Next()
	grace := r.opts.MaxGracePeriod
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil && time.Duration(*g)*time.Second < grace {
		grace = time.Duration(*g) * time.Second
	}
	return &podProc{runner: r, name: pod.Name, uid: pod.UID, ip: ip, grace: grace, created: time.Now()}
}

// deletePod stops a pod being deleted and then removes it for good, as a
// kubelet confirms a graceful deletion.
func (r *Runner) deletePod(ctx context.Context, pod *corev1.Pod, p *podProc) {
	if p != nil && !p.terminating() {
		r.opts.Logf("podrunner: pod %s deleted: stopping it", pod.Name)
		go func() {
			p.terminate(p.grace)
			r.mu.Lock()
			delete(r.pods, pod.UID)
			r.mu.Unlock()
			r.forceDelete(ctx, pod)
		}()
		return
	}
	if p == nil {
		r.forceDelete(ctx, pod)
	}
}

func (r *Runner) forceDelete(ctx context.Context, pod *corev1.Pod) {
	uid := pod.UID
	err := r.c.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &uid})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil {
		r.opts.Logf("podrunner: remove pod %s: %v", pod.Name, err)
	}
}

// writePodStatus writes what the pod's processes are doing, when it
// changed.
func (r *Runner) writePodStatus(ctx context.Context, pod *corev1.Pod, p *podProc) error {
	want := p.status(pod)
	if equality.Semantic.DeepEqual(pod.Status, want) {
		return nil
	}
	base := pod.DeepCopy()
	pod.Status = want
	return r.c.Status().Patch(ctx, pod, client.MergeFrom(base))
}

// resolveEnv builds a container's environment the way the kubelet does:
// envFrom first, then env in order, each value with $(VAR) references to
// earlier variables expanded.
func (r *Runner) resolveEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, ip string) ([]string, map[string]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	for _, ef := range c.EnvFrom {
		data, err := r.envFromData(ctx, pod.Namespace, ef)
		if err != nil {
			return nil, nil, err
		}
		for k, v := range data {
			set(ef.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		v, ok, err := r.valueFrom(ctx, pod, e.ValueFrom, ip)
		if err != nil {
			return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, v)
		}
	}
	env := []string{"HOSTNAME=" + pod.Name}
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, vars, nil
}

func (r *Runner) envFromData(ctx context.Context, ns string, ef corev1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case ef.SecretRef != nil:
		var s corev1.Secret
		err := r.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: ef.SecretRef.Name}, &s)
		if err != nil {
			if apierrors.IsNotFound(err) && ef.SecretRef.Optional != nil && *ef.SecretRef.Optional {
				return out, nil
			}
			return nil, fmt.Errorf("secret %q: %w", ef.SecretRef.Name, err)
		}
		for k, v := range s.Data {
			out[k] = string(v)
		}
	case ef.ConfigMapRef != nil:
		var cm corev1.ConfigMap
		err := r.c.Get(ctx, types.NamespacedName{Namespace: ns, Name: ef.ConfigMapRef.Name}, &cm)
		if err != nil {
			if apierrors.IsNotFound(err) && ef.ConfigMapRef.Optional != nil && *ef.ConfigMapRef.Optional {
				return out, nil
			}
			return nil, fmt.Errorf("configmap %q: %w", ef.ConfigMapRef.Name, err)
		}
		for k, v := range cm.Data {
			out[k] = v
		}
	}
	return out, nil
}

// valueFrom resolves an env var source; ok is false for a missing
// optional reference.
func (r *Runner) valueFrom(ctx context.Context, pod *corev1.Pod, src *corev1.EnvVarSource, ip string) (string, bool, error) {
	switch {
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		var s corev1.Secret
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, &s); err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("secret %q: %w", ref.Name, err)
		}
		v, ok := s.Data[ref.Key]
		if !ok && !optional {
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), ok, nil
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		var cm corev1.ConfigMap
		if err := r.c.Get(ctx, types.NamespacedName{Namespace: pod.Namespace, Name: ref.Name}, &cm); err != nil {
			if apierrors.IsNotFound(err) && optional {
				return "", false, nil
			}
			return "", false, fmt.Errorf("configmap %q: %w", ref.Name, err)
		}
		v, ok := cm.Data[ref.Key]
		if !ok && !optional {
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return v, ok, nil
	case src.FieldRef != nil:
		v, err := fieldValue(pod, src.FieldRef.FieldPath, ip)
		return v, err == nil, err
	}
	return "", false, errors.New("unsupported valueFrom (only secretKeyRef, configMapKeyRef and fieldRef)")
}

// fieldValue resolves a downward API field path.
func fieldValue(pod *corev1.Pod, path, ip string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return ip, nil
	case "status.hostIP", "status.hostIPs":
		return "127.0.0.1", nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations} {
		if rest, ok := strings.CutPrefix(path, prefix+"['"); ok {
			if key, ok := strings.CutSuffix(rest, "']"); ok {
				return m[key], nil
			}
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// expand replaces $(VAR) with earlier variables' values; $$ escapes a $,
// unknown references stay as they are (the kubelet's rules).
func expand(s string, vars map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := vars[name]; ok {
					b.WriteString(v)
					i += 2 + end
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func condition(t corev1.PodConditionType, ok bool, since time.Time) corev1.PodCondition {
	s := corev1.ConditionFalse
	if ok {
		s = corev1.ConditionTrue
	}
	return corev1.PodCondition{Type: t, Status: s, LastTransitionTime: metav1.NewTime(since)}
}
