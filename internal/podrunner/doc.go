// Package podrunner runs a namespace's pods as local processes (or, with
// podman, as containers of the image), for tests against an envtest
// control plane, which has an API server but no kubelet
// and no kube-controller-manager. It stands in for both, as far as a
// StatefulSet of single-process pods needs:
//
//   - the StatefulSet controller (statefulset.go): for each StatefulSet it
//     creates the pods <name>-<ordinal> from the template up to
//     spec.replicas, deletes those above it, replaces pods whose template
//     changed (all at once, not one at a time as the real controller
//     does), and writes the StatefulSet's status;
//   - the kubelet (runner.go, process.go): each pod's containers run as
//     local processes with the container's command and args (the command
//     mapped to a local binary by Options.Binaries) and its env, with
//     secretKeyRef, configMapKeyRef, fieldRef, envFrom and $(VAR) resolved
//     through the API server; each pod gets its own loopback address
//     (127.x.y.1, 127.x.y.2, ... in a random 127.x.y.0/24) as its pod IP, and because all pods
//     share this machine's network, every "0.0.0.0" in the args, and
//     every port alone (":8081", "--flag=:8081"), is given that address
//     (a real pod has a network namespace of its own);
//     crashed containers restart by the pod's restartPolicy with a short
//     back-off (counted in restartCount, the exit kept in lastState, the
//     log tail as termination message); an HTTP readiness probe sets the
//     Ready condition (liveness probes, init containers and resource
//     limits are ignored); a deleted pod's processes get SIGTERM, then
//     SIGKILL after the grace period, and the pod is then removed;
//   - the kubelet's log endpoint (kubelet.go): the Node NodeName names a
//     TLS server in this process that serves each container's log file,
//     so the API server's pods/log (kubectl logs, client-go's GetLogs)
//     answers, followed or not, as in a cluster;
//   - volumes (volumes.go): the Secret, ConfigMap, projected and emptyDir
//     volumes a container mounts are written under the pod's directory
//     with their items' paths and modes, and because all pods share this
//     machine's filesystem, every mount path in the env and args is
//     replaced by that directory (a real pod has a mount namespace of its
//     own); other kinds of volume are left out.
//
// In container mode (Options.Runtime "podman", or MONGOFERRY_POD_RUNTIME=podman
// through FromEnv; container.go, container_args.go) each container runs
// instead as a real container of one local image (make image) under podman
// and runc, with the pod spec's security context, volumes at their mount
// paths, memory limit and grace period, on the host's network with the
// pod's own address; docs/containers.md lists what it honours.
//
// Start runs a Runner for one test and stops every process on t.Cleanup.
package podrunner
