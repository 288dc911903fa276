package podrunner

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestContainerSecurityArgs checks how container mode maps a pod's
// security context to podman's flags, and that it refuses what the
// kubelet refuses.
func TestContainerSecurityArgs(t *testing.T) {
	worker := func() (*corev1.Pod, *corev1.Container) {
		pod := &corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65532)), RunAsGroup: ptr(int64(65532)), FSGroup: ptr(int64(65532)),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}}}
		pod.Name = "w-0"
		c := &corev1.Container{Name: "worker", SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(65532)), AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem: ptr(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}}
		return pod, c
	}
	for _, tc := range []struct {
		name      string
		imageUser string
		edit      func(*corev1.Pod, *corev1.Container)
		want      string
		wantErr   string
	}{{
		name: "the worker's security context", imageUser: "65532:65532",
		want: "--user 65532:65532 --group-add 65532 --read-only --read-only-tmpfs=false --cap-drop ALL --security-opt no-new-privileges",
	}, {
		name: "runAsUser 0 with runAsNonRoot", imageUser: "65532:65532",
		edit:    func(_ *corev1.Pod, c *corev1.Container) { c.SecurityContext.RunAsUser = ptr(int64(0)) },
		wantErr: "breaks non-root policy",
	}, {
		name: "no runAsUser and a named image user", imageUser: "nonroot",
		edit: func(p *corev1.Pod, c *corev1.Container) {
			c.SecurityContext.RunAsUser, p.Spec.SecurityContext.RunAsUser, p.Spec.SecurityContext.RunAsGroup = nil, nil, nil
		},
		wantErr: "non-numeric user",
	}, {
		name: "no seccomp profile runs unconfined", imageUser: "65532:65532",
		edit: func(p *corev1.Pod, c *corev1.Container) {
			p.Spec.SecurityContext = nil
			c.SecurityContext = nil
		},
		want: "--security-opt seccomp=unconfined",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			pod, c := worker()
			if tc.edit != nil {
				tc.edit(pod, c)
			}
			r := &Runner{imageUser: tc.imageUser}
			args, err := r.securityArgs(pod, c)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one that says %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(args, " "); got != tc.want {
				t.Errorf("flags\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestContainerResourceArgs: limits.memory is the cgroup limit with no
// swap above it, limits.cpu a quota; requests are not enforced.
func TestContainerResourceArgs(t *testing.T) {
	c := &corev1.Container{Resources: corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("192Mi"), corev1.ResourceCPU: resource.MustParse("500m")},
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
	}}
	args, err := resourceArgs(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(args, " "), "--memory 201326592 --memory-swap 201326592 --cpus 0.500"; got != want {
		t.Errorf("flags %q, want %q", got, want)
	}
}

// TestWildcardListenAddress: pods share the host's network, so a listen
// address on every interface becomes the pod's own.
func TestWildcardListenAddress(t *testing.T) {
	for in, want := range map[string]string{
		":8081":                                "127.1.2.3:8081",
		"--health-probe-bind-address=:8081":    "--health-probe-bind-address=127.1.2.3:8081",
		"--listen":                             "--listen",
		"127.0.0.1:9090":                       "127.0.0.1:9090",
		"--metrics-bind-address=localhost:80":  "--metrics-bind-address=localhost:80",
		"mongodb://h:27017/?directConnection=": "mongodb://h:27017/?directConnection=",
	} {
		if got := portOnly.ReplaceAllString(in, "${1}127.1.2.3:${2}"); got != want {
			t.Errorf("%q became %q, want %q", in, got, want)
		}
	}
}
