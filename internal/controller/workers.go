package controller

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// Labels on everything the controller creates.
const (
	// TaskLabel names the SyncTask a worker object belongs to.
	TaskLabel = syncv1alpha1.TaskLabel
	// ManagedByLabel is app.kubernetes.io/managed-by.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// ManagedBy is the value of ManagedByLabel.
	ManagedBy        = "mongoferry-operator"
	appNameLabel     = "app.kubernetes.io/name"
	appNameWorker    = "mongoferry-worker"
	appInstanceLabel = "app.kubernetes.io/instance"
)

// Worker container settings.
const (
	// WorkerContainer is the name of the worker container.
	WorkerContainer = "worker"
	// WorkerCommand is the ferry binary in the MongoFerry image (see the
	// Dockerfile).
	WorkerCommand = "/ferry"
	// MetricsPortName names the port serving /metrics, /status and
	// /healthz.
	MetricsPortName = "metrics"
	// DefaultMetricsPort is used when spec.metricsPort is unset (the CRD
	// defaults it too).
	DefaultMetricsPort = 9090
	// workerUID is the user the workers run as (distroless "nonroot").
	workerUID = 65532
)

// FieldOwner is the field manager of the controller's server-side applies.
const FieldOwner = client.FieldOwner("mongoferry-operator")

// WorkerName is the name of a task's worker Secret, StatefulSet and
// Service.
func WorkerName(task string) string { return task + "-worker" }

// selectorLabels select a task's worker pods.
func selectorLabels(task *syncv1alpha1.SyncTask) map[string]string {
	return map[string]string{appNameLabel: appNameWorker, TaskLabel: task.Name}
}

// workerLabels are on every object made for a task.
func workerLabels(task *syncv1alpha1.SyncTask) map[string]string {
	l := selectorLabels(task)
	l[appInstanceLabel] = task.Name
	l[ManagedByLabel] = ManagedBy
	return l
}

func ownerRef(task *syncv1alpha1.SyncTask) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(syncv1alpha1.GroupVersion.String()).WithKind("SyncTask").
		WithName(task.Name).WithUID(task.UID).
		WithController(true).WithBlockOwnerDeletion(true)
}

func metricsPort(task *syncv1alpha1.SyncTask) int32 {
	if task.Spec.MetricsPort != 0 {
		return task.Spec.MetricsPort
	}
	return DefaultMetricsPort
}

// ensureSecret applies the worker Secret: the rendered task file and, for
// workers running one shard each, the shard mapping. It holds no password.
func (r *SyncTaskReconciler) ensureSecret(ctx context.Context, task *syncv1alpha1.SyncTask, rnd *rendered, shardMap []byte) error {
	data := map[string][]byte{TaskKey: rnd.task}
	if m := shardMap; m != nil {
		data[ShardMapKey] = m
	}
	s := corev1ac.Secret(WorkerName(task.Name), task.Namespace).
		WithLabels(workerLabels(task)).
		WithOwnerReferences(ownerRef(task)).
		WithType(corev1.SecretTypeOpaque).
		WithData(data)
	if err := r.Client.Apply(ctx, s, FieldOwner, client.ForceOwnership); err != nil {
		return fmt.Errorf("apply Secret %s: %w", WorkerName(task.Name), err)
	}
	return nil
}

// workersBefore is the StatefulSet as it was before this reconcile.
type workersBefore struct {
	exists   bool
	replicas int32
	hash     string
}

// ensureStatefulSet applies the worker StatefulSet and returns what it was
// before, from which the caller tells created, rolled, suspended and
// resumed apart.
func (r *SyncTaskReconciler) ensureStatefulSet(ctx context.Context, task *syncv1alpha1.SyncTask, rnd *rendered, image string, replicas int32, shards workerShards) (workersBefore, error) {
	var before workersBefore
	var cur appsv1.StatefulSet
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: task.Namespace, Name: WorkerName(task.Name)}, &cur)
	switch {
	case err == nil:
		before = workersBefore{exists: true, replicas: 1, hash: cur.Spec.Template.Annotations[ConfigHashAnnotation]}
		if cur.Spec.Replicas != nil {
			before.replicas = *cur.Spec.Replicas
		}
	case !apierrors.IsNotFound(err):
		return before, err
	}
	if err := r.Client.Apply(ctx, workerStatefulSet(task, rnd, image, replicas, shards), FieldOwner, client.ForceOwnership); err != nil {
		return before, fmt.Errorf("apply StatefulSet %s: %w", WorkerName(task.Name), err)
	}
	return before, nil
}

// workerShards says how a task's workers learn the source's shards.
type workerShards struct {
	// mapped: each worker runs the shard the mapping gives its ordinal.
	mapped bool
	// discover is how often the workers discover the source (0: they do
	// not, the task runs one worker whatever the source); without a
	// mapping they also wait for one on a sharded source.
	discover time.Duration
}

// workerShards is how the task's workers learn their shard under plan.
func (r *SyncTaskReconciler) workerShards(task *syncv1alpha1.SyncTask, plan shardPlan) workerShards {
	if !readsShards(task) {
		return workerShards{}
	}
	return workerShards{mapped: plan.entries != nil, discover: r.refreshInterval()}
}

// workerStatefulSet is the desired worker StatefulSet.
//
// Each worker runs `ferry run` on the rendered task file. When the source
// may be sharded, the workers discover it and report it in /status; with
// shards.mapped, each runs one shard's subtask: the one the shard mapping
// (the worker Secret's shards key, in MONGOFERRY_SHARD_MAP) gives its
// pod's ordinal (from its name, in MONGOFERRY_POD_NAME); without, the one
// worker waits for a mapping if the source turns out sharded. See
// shards.go.
func workerStatefulSet(task *syncv1alpha1.SyncTask, rnd *rendered, image string, replicas int32, shards workerShards) *appsv1ac.StatefulSetApplyConfiguration {
	name := WorkerName(task.Name)
	port := metricsPort(task)
	env := []*corev1ac.EnvVarApplyConfiguration{
		secretEnv(TaskEnv, name, TaskKey),
	}
	if s := task.Spec.Source.CredentialsSecret; s != "" {
		env = append(env, secretEnv(SourcePasswordEnv, s, PasswordKey))
	}
	if s := task.Spec.Target.CredentialsSecret; s != "" {
		env = append(env, secretEnv(TargetPasswordEnv, s, PasswordKey))
	}
	annotations := map[string]string{
		ConfigHashAnnotation:                      rnd.hash,
		"kubectl.kubernetes.io/default-container": WorkerContainer,
	}
	// JSON logs, one object per line, as log collectors read them; the
	// controller reads a failed worker's last record (exitText).
	args := []string{"run", "--task-env", TaskEnv, "--listen", "0.0.0.0:" + strconv.Itoa(int(port)), "--progress", "log", "--log-format", "json"}
	if shards.discover > 0 {
		args = append(args, workerapi.FlagDiscoverInterval, shards.discover.String())
		if !shards.mapped {
			args = append(args, workerapi.FlagAwaitShardMap)
		}
	}
	if shards.mapped {
		env = append(env,
			corev1ac.EnvVar().WithName(PodNameEnv).WithValueFrom(
				corev1ac.EnvVarSource().WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("metadata.name"))),
			secretEnv(ShardMapEnv, name, ShardMapKey))
		annotations[ShardedAnnotation] = "true"
	}
	return workerSet(task, rnd, image, workerSetParts{
		name: name, selector: selectorLabels(task), replicas: replicas,
		args: args, env: env, annotations: annotations,
	})
}

// workerSetParts are what the task's worker StatefulSet and its copy-only
// workers' (copyworkers.go) differ in.
type workerSetParts struct {
	name        string
	selector    map[string]string
	replicas    int32
	args        []string
	env         []*corev1ac.EnvVarApplyConfiguration
	annotations map[string]string
}

// workerSet is a StatefulSet of ferry workers: the container, its
// restricted security context, TLS files and spec.workerTemplate.
func workerSet(task *syncv1alpha1.SyncTask, rnd *rendered, image string, p workerSetParts) *appsv1ac.StatefulSetApplyConfiguration {
	name, replicas, annotations := p.name, p.replicas, p.annotations
	labels := workerLabels(task)
	for k, v := range p.selector {
		labels[k] = v
	}
	container := workerContainer(task, image, p.args, p.env, metricsPort(task), rnd.workerTLS)
	security := corev1ac.PodSecurityContext().
		WithRunAsNonRoot(true).
		WithRunAsUser(workerUID).
		WithRunAsGroup(workerUID).
		WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))
	pod := corev1ac.PodSpec().
		// Workers never call the Kubernetes API.
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithTerminationGracePeriodSeconds(30).
		WithSecurityContext(security)
	applyTLSFiles(rnd.tlsFiles, pod, container, security)
	if rnd.workerTLS {
		applyWorkerTLS(task, pod, container, security)
	}
	podLabels, annotations := applyWorkerTemplate(task.Spec.WorkerTemplate, rnd.volumes, labels, annotations, pod, container)
	pod.WithContainers(container)
	return appsv1ac.StatefulSet(name, task.Namespace).
		WithLabels(labels).
		WithOwnerReferences(ownerRef(task)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(replicas).
			WithServiceName(name).
			// Shards start and stop together; ordinals do not wait on
			// each other.
			WithPodManagementPolicy(appsv1.ParallelPodManagement).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(p.selector)).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(podLabels).
				WithAnnotations(annotations).
				WithSpec(pod)))
}

// workerContainer is the worker's container: ferry run with args, its
// env (passwords only ever come from env, never from args), the metrics
// port and probes, the termination message and the restricted security
// context, and the spec's resources.
func workerContainer(task *syncv1alpha1.SyncTask, image string, args []string, env []*corev1ac.EnvVarApplyConfiguration, port int32, workerTLS bool) *corev1ac.ContainerApplyConfiguration {
	probe := func() *corev1ac.ProbeApplyConfiguration { return workerProbe(workerTLS) }
	container := corev1ac.Container().
		WithName(WorkerContainer).
		WithImage(image).
		// Passwords only ever come from env, never from args.
		WithCommand(WorkerCommand).
		WithArgs(args...).
		WithEnv(env...).
		WithPorts(corev1ac.ContainerPort().WithName(MetricsPortName).WithContainerPort(port).WithProtocol(corev1.ProtocolTCP)).
		WithReadinessProbe(probe().WithPeriodSeconds(10)).
		WithLivenessProbe(probe().WithInitialDelaySeconds(10).WithPeriodSeconds(20).WithFailureThreshold(3)).
		// The last log lines become the termination message, which the
		// controller copies into the Degraded condition.
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError).
		// ferry writes nothing to disk: a read-only root filesystem, and
		// volumes only for TLS Secrets and what spec.workerTemplate adds.
		WithSecurityContext(corev1ac.SecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(workerUID).
			WithAllowPrivilegeEscalation(false).
			WithReadOnlyRootFilesystem(true).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault)))
	if res := task.Spec.Resources; res != nil {
		rr := corev1ac.ResourceRequirements()
		if len(res.Limits) > 0 {
			rr.WithLimits(res.Limits)
		}
		if len(res.Requests) > 0 {
			rr.WithRequests(res.Requests)
		}
		container.WithResources(rr)
	}
	return container
}

func secretEnv(name, secret, key string) *corev1ac.EnvVarApplyConfiguration {
	return corev1ac.EnvVar().WithName(name).WithValueFrom(corev1ac.EnvVarSource().
		WithSecretKeyRef(corev1ac.SecretKeySelector().WithName(secret).WithKey(key)))
}

// ensureService applies the headless Service that names the workers and
// their metrics port.
func (r *SyncTaskReconciler) ensureService(ctx context.Context, task *syncv1alpha1.SyncTask) error {
	s := corev1ac.Service(WorkerName(task.Name), task.Namespace).
		WithLabels(workerLabels(task)).
		WithOwnerReferences(ownerRef(task)).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithSelector(selectorLabels(task)).
			// Scrape workers that are still connecting, too.
			WithPublishNotReadyAddresses(true).
			WithPorts(corev1ac.ServicePort().WithName(MetricsPortName).
				WithPort(metricsPort(task)).WithTargetPort(intstr.FromString(MetricsPortName)).
				WithProtocol(corev1.ProtocolTCP)))
	if err := r.Client.Apply(ctx, s, FieldOwner, client.ForceOwnership); err != nil {
		return fmt.Errorf("apply Service %s: %w", WorkerName(task.Name), err)
	}
	return nil
}

// PodMonitorGVK is the prometheus-operator's PodMonitor.
var PodMonitorGVK = schema.GroupVersionKind{Group: "monitoring.coreos.com", Version: "v1", Kind: "PodMonitor"}

// podMonitorRecheck is how long the controller believes a missing
// PodMonitor CRD stays missing before it asks the API server again.
const podMonitorRecheck = 5 * time.Minute

// crdPresence remembers whether an optional CRD is installed.
type crdPresence struct {
	mu        sync.Mutex
	missing   bool
	checkedAt time.Time
}

// podMonitorInstalled asks the RESTMapper (a discovery call when the
// group is unknown to it), remembering a negative answer for a while so
// that clusters without prometheus-operator do not pay a discovery
// request per reconcile.
func (r *SyncTaskReconciler) podMonitorInstalled() (bool, error) {
	r.podMonitor.mu.Lock()
	defer r.podMonitor.mu.Unlock()
	if r.podMonitor.missing && time.Since(r.podMonitor.checkedAt) < podMonitorRecheck {
		return false, nil
	}
	_, err := r.Client.RESTMapper().RESTMapping(PodMonitorGVK.GroupKind(), PodMonitorGVK.Version)
	switch {
	case meta.IsNoMatchError(err):
		r.podMonitor.missing, r.podMonitor.checkedAt = true, time.Now()
		return false, nil
	case err != nil:
		return false, err
	}
	r.podMonitor.missing = false
	return true, nil
}

// ensurePodMonitor applies a PodMonitor scraping the workers when the
// prometheus-operator CRDs are installed and NoPodMonitors is false;
// otherwise it does nothing.
func (r *SyncTaskReconciler) ensurePodMonitor(ctx context.Context, task *syncv1alpha1.SyncTask) error {
	if r.NoPodMonitors {
		return nil
	}
	ok, err := r.podMonitorInstalled()
	if err != nil || !ok {
		return err
	}
	endpoint := map[string]any{"port": MetricsPortName, "path": "/metrics"}
	if r.WorkerTLS != nil {
		podMonitorTLS(task, endpoint)
	}
	labels := map[string]any{}
	for k, v := range workerLabels(task) {
		labels[k] = v
	}
	match := map[string]any{}
	for k, v := range selectorLabels(task) {
		match[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": PodMonitorGVK.GroupVersion().String(),
		"kind":       PodMonitorGVK.Kind,
		"metadata": map[string]any{
			"name":      WorkerName(task.Name),
			"namespace": task.Namespace,
			"labels":    labels,
			"ownerReferences": []any{map[string]any{
				"apiVersion": syncv1alpha1.GroupVersion.String(), "kind": "SyncTask",
				"name": task.Name, "uid": string(task.UID),
				"controller": true, "blockOwnerDeletion": true,
			}},
		},
		"spec": map[string]any{
			"selector":            map[string]any{"matchLabels": match},
			"podMetricsEndpoints": []any{endpoint},
		},
	}}
	if err := r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), FieldOwner, client.ForceOwnership); err != nil {
		return fmt.Errorf("apply PodMonitor %s: %w", WorkerName(task.Name), err)
	}
	return nil
}
