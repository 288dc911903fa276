package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

// ControllerName names the controller (and the events' reporting
// controller, for managers that take it from here).
const ControllerName = "synctask"

// secretsIndex indexes SyncTasks by the Secrets they name (credentials and
// TLS).
const secretsIndex = "spec.secrets"

// blockedRetry is how often a task blocked on the user's objects is
// looked at again (a watch on Secrets usually wakes it sooner).
const blockedRetry = 30 * time.Second

// SyncTaskReconciler runs SyncTasks: for each, a Secret with the worker's
// task file, a worker StatefulSet, a headless Service and (when the
// prometheus-operator is installed) a PodMonitor, all owned by the task;
// then one status update from what the workers report.
//
// Each step (ensureX) is idempotent (server-side apply), and no step waits
// on MongoDB: the workers move the data, the controller reads their
// /status with a short timeout.
type SyncTaskReconciler struct {
	// Client reads and writes Kubernetes objects.
	Client client.Client
	// Scheme holds the Kubernetes and SyncTask types.
	Scheme *runtime.Scheme
	// Recorder emits events (events.k8s.io/v1, as controller-runtime's
	// manager.GetEventRecorder returns); nil drops them.
	Recorder events.EventRecorder
	// WorkerImage is the workers' image when a SyncTask names none.
	WorkerImage string
	// StatusClient reads the workers' /status; a client with a 2 s
	// timeout when nil. With WorkerTLS it must be one from
	// WorkerTLS.HTTPClient (the request names the pod, its context the
	// IP to dial).
	StatusClient *http.Client
	// ReadTopology says what a task's source is from its workers'
	// reports; ReportedTopology when nil.
	ReadTopology TopologyReader
	// ShardRefreshInterval is how often the workers of a task whose
	// source may be sharded discover its shards again (to scale for
	// added shards), passed to them as --discover-interval;
	// DefaultShardRefreshInterval when zero.
	ShardRefreshInterval time.Duration
	// NoPodMonitors stops the controller from making a PodMonitor per
	// task, for clusters where one PodMonitor scrapes every worker (the
	// Helm chart's). PodMonitors made before are left in place.
	NoPodMonitors bool
	// WorkerTLS, when set, makes the workers serve /metrics and /status
	// over HTTPS with certificates from its CA, /status to the manager's
	// client certificate only; nil: plain HTTP.
	WorkerTLS *WorkerTLS

	podMonitor crdPresence
	// tlsClient reads /status with WorkerTLS when StatusClient is nil.
	tlsClientOnce sync.Once
	tlsClient     *http.Client
}

// +kubebuilder:rbac:groups=sync.mongoferry.io,resources=synctasks,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=sync.mongoferry.io,resources=synctasks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=sync.mongoferry.io,resources=synctasks/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets;services,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=podmonitors,verbs=get;list;watch;create;update;patch

// Reconcile brings one SyncTask's workers in line with its spec and its
// status in line with its workers.
func (r *SyncTaskReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var task syncv1alpha1.SyncTask
	if err := r.Client.Get(ctx, req.NamespacedName, &task); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !task.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &task)
	}
	if err := r.ensureFinalizer(ctx, &task); err != nil {
		return ctrl.Result{}, err
	}
	orig := task.DeepCopy()

	o := observed{generation: task.Generation, mode: task.Spec.Mode, verifyMode: task.Spec.Verify.Mode,
		cutover: task.Spec.Cutover, suspended: task.Spec.Suspend, now: time.Now()}
	rnd, err := r.render(ctx, &task)
	if !errors.As(err, &o.blocked) && err != nil {
		return ctrl.Result{}, err
	}
	image := task.Spec.WorkerImage
	if image == "" {
		image = r.WorkerImage
	}
	if image == "" && o.blocked == nil {
		o.blocked = &blockedError{syncv1alpha1.ReasonInvalidSpec, "spec.workerImage: empty, and the manager has no default worker image: set spec.workerImage"}
	}

	completed := stopped(orig, &task, &o)
	// The workers first: their reports say what the source is.
	if o.workers, err = r.observeWorkers(ctx, &task); err != nil {
		return ctrl.Result{}, err
	}
	replicas := int32(1)
	if o.blocked == nil {
		// Which worker replays which shard (one worker for a replica set).
		o.topology = r.shardTopology(&task, o.workers)
		o.plan = planShards(&task, orig.Status.Shards, o.topology)
		nameWorkers(o.workers, o.plan)
		replicas = o.plan.replicas(orig.Status.Shards)
		o.shardNames = []string{WorkerName(task.Name) + "-0"}
		if o.plan.entries != nil {
			o.shardNames = o.plan.names()
		}
		r.shardEvents(&task, o.plan)
	}
	if task.Spec.Suspend || completed || o.failedStop {
		replicas = 0
	}
	if o.blocked == nil {
		if err := r.ensureWorkers(ctx, &task, orig, rnd, image, replicas, completed, o); err != nil {
			return ctrl.Result{}, err
		}
	}

	task.Status = settle(&orig.Status, computeStatus(&orig.Status, o), o.now)
	task.Status.VerifyRequest = r.requestVerification(ctx, &task, orig.Status.VerifyRequest, o.workers)
	if task.Status.ReverseTask, err = r.ensureReverse(ctx, &task); err != nil {
		return ctrl.Result{}, err
	}
	r.statusEvents(orig, &task)
	r.cutoverEvents(orig, &task)
	if !equality.Semantic.DeepEqual(orig.Status, task.Status) {
		if err := r.Client.Status().Patch(ctx, &task, client.MergeFrom(orig)); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	log.V(1).Info("reconciled", "phase", task.Status.Phase, "workers", len(o.workers), "replicas", replicas)

	switch {
	case o.blocked != nil:
		return ctrl.Result{RequeueAfter: blockedRetry}, nil
	case replicas > 0 || len(o.workers) > 0:
		return ctrl.Result{RequeueAfter: StatusPollInterval}, nil
	}
	return ctrl.Result{}, nil
}

// stopped decides whether the task's workers stay stopped. A completed
// task keeps no workers (they would copy-check-exit in a loop), nor does a
// failed one (it would fail again, and a failed verification would hash
// both databases again on every restart); a new generation of the spec, or
// a new value of the retry annotation on a failed task, starts them again.
// It returns whether the task completed, and sets o.failedStop when it
// failed, o.restart and o.retry when a failed task runs again.
func stopped(orig, task *syncv1alpha1.SyncTask, o *observed) (completed bool) {
	sameGen := orig.Status.ObservedGeneration == task.Generation
	completed = orig.Status.Phase == syncv1alpha1.PhaseCompleted && sameGen
	if orig.Status.Phase == syncv1alpha1.PhaseFailed {
		retry := task.Annotations[syncv1alpha1.RetryAnnotation]
		retrying := retry != "" && retry != orig.Status.LastRetry
		o.failedStop = sameGen && !retrying
		o.restart = !o.failedStop
		if retrying {
			o.retry = retry
		}
	}
	return completed
}

// ensureWorkers makes the workers' Secret, TLS, StatefulSet (replicas
// workers of image), Service and PodMonitor what the spec renders to.
func (r *SyncTaskReconciler) ensureWorkers(ctx context.Context, task, orig *syncv1alpha1.SyncTask, rnd *rendered, image string, replicas int32, completed bool, o observed) error {
	if err := r.ensureSecret(ctx, task, rnd, o.plan.shardMap(orig.Status.Shards)); err != nil {
		return err
	}
	if err := r.ensureWorkerTLS(ctx, task, rnd); err != nil {
		return err
	}
	before, err := r.ensureStatefulSet(ctx, task, rnd, image, replicas, r.workerShards(task, o.plan))
	if err != nil {
		return err
	}
	if err := r.ensureCopyWorkers(ctx, task, rnd, image, copyReplicas(task, orig.Status.Phase, replicas, o.topology)); err != nil {
		return err
	}
	r.workerEvents(task, before, rnd.hash, replicas, completed, o)
	if err := r.ensureService(ctx, task); err != nil {
		return err
	}
	return r.ensurePodMonitor(ctx, task)
}

// workerEvents tells what this reconcile did to the workers.
func (r *SyncTaskReconciler) workerEvents(task *syncv1alpha1.SyncTask, before workersBefore, hash string, replicas int32, completed bool, o observed) {
	name := WorkerName(task.Name)
	switch {
	case !before.exists:
		r.event(task, corev1.EventTypeNormal, "WorkersCreated", "Create", "created StatefulSet %s with %d worker(s)", name, replicas)
		return
	case before.hash != hash && (before.replicas > 0 || replicas > 0):
		r.event(task, corev1.EventTypeNormal, "WorkersRolled", "Update",
			"the task file or the credentials changed: rolling the workers of StatefulSet %s", name)
	}
	switch {
	case before.replicas > 0 && replicas == 0 && task.Spec.Suspend:
		r.event(task, corev1.EventTypeNormal, syncv1alpha1.ReasonSuspended, "Scale",
			"suspended: scaled StatefulSet %s to 0; the checkpoint is kept", name)
	case before.replicas > 0 && replicas == 0 && completed:
		r.event(task, corev1.EventTypeNormal, "WorkersStopped", "Scale", "the task completed: scaled StatefulSet %s to 0", name)
	case before.replicas > 0 && replicas == 0 && o.failedStop:
		r.event(task, corev1.EventTypeWarning, "WorkersStopped", "Scale",
			"the task failed: scaled StatefulSet %s to 0, and nothing more runs; fix the cause, then change the spec or set the annotation %s to a new value to run it again from its checkpoint",
			name, syncv1alpha1.RetryAnnotation)
	case before.replicas == 0 && replicas > 0 && o.retry != "":
		r.event(task, corev1.EventTypeNormal, "Retrying", "Scale",
			"%s=%s: scaled StatefulSet %s to %d; the workers continue from the checkpoint", syncv1alpha1.RetryAnnotation, o.retry, name, replicas)
	case before.replicas == 0 && replicas > 0:
		r.event(task, corev1.EventTypeNormal, "Resumed", "Scale",
			"resumed: scaled StatefulSet %s to %d; the workers continue from the checkpoint", name, replicas)
	}
}

// statusEvents tells phase changes and new problems.
func (r *SyncTaskReconciler) statusEvents(old, cur *syncv1alpha1.SyncTask) {
	if old.Status.Phase != cur.Status.Phase {
		from := old.Status.Phase
		if from == "" {
			from = "(none)"
		}
		r.event(cur, corev1.EventTypeNormal, "PhaseChanged", "Sync", "phase %s -> %s", from, cur.Status.Phase)
	}
	was := meta.FindStatusCondition(old.Status.Conditions, syncv1alpha1.ConditionDegraded)
	now := meta.FindStatusCondition(cur.Status.Conditions, syncv1alpha1.ConditionDegraded)
	if now != nil && now.Status == "True" && (was == nil || was.Status != "True" || was.Reason != now.Reason) {
		r.event(cur, corev1.EventTypeWarning, now.Reason, "Sync", "%s", now.Message)
	}
}

func (r *SyncTaskReconciler) event(task *syncv1alpha1.SyncTask, kind, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(task, nil, kind, reason, action, note, args...)
	}
}

// SetupWithManager registers the controller: it watches SyncTasks (spec
// and metadata changes, not its own status writes), the objects it owns,
// the worker pods, and the Secrets the tasks name (credentials and TLS).
func (r *SyncTaskReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &syncv1alpha1.SyncTask{}, secretsIndex,
		func(o client.Object) []string { return o.(*syncv1alpha1.SyncTask).Spec.SecretNames() })
	if err != nil {
		return fmt.Errorf("index SyncTasks by Secret: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&syncv1alpha1.SyncTask{}, builder.WithPredicates(specOrMetadataChanged())).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.Secret{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.tasksForSecret)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(taskForPod),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.GetLabels()[ManagedByLabel] == ManagedBy
			}))).
		// A reconcile may wait up to the status timeout on a worker that
		// does not answer: a few at once keep other tasks fresh.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named(ControllerName).
		Complete(r)
}

// CacheByObject narrows the manager's cache of Pods, StatefulSets and
// Services to the operator's own (by label), so that watching worker pods
// does not cache every pod of the cluster. Pass it as
// cache.Options.ByObject.
func CacheByObject() map[client.Object]cache.ByObject {
	sel := labels.SelectorFromSet(labels.Set{ManagedByLabel: ManagedBy})
	return map[client.Object]cache.ByObject{
		&corev1.Pod{}:         {Label: sel},
		&appsv1.StatefulSet{}: {Label: sel},
		&corev1.Service{}:     {Label: sel},
	}
}

// tasksForSecret maps a Secret to the SyncTasks that name it.
func (r *SyncTaskReconciler) tasksForSecret(ctx context.Context, o client.Object) []ctrl.Request {
	var tasks syncv1alpha1.SyncTaskList
	if err := r.Client.List(ctx, &tasks, client.InNamespace(o.GetNamespace()), client.MatchingFields{secretsIndex: o.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "list SyncTasks for Secret", "secret", o.GetName())
		return nil
	}
	reqs := make([]ctrl.Request, 0, len(tasks.Items))
	for _, t := range tasks.Items {
		reqs = append(reqs, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Name}})
	}
	return reqs
}

// taskForPod maps a worker pod to its SyncTask.
func taskForPod(_ context.Context, o client.Object) []ctrl.Request {
	name := o.GetLabels()[TaskLabel]
	if name == "" {
		return nil
	}
	return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: name}}}
}

// specOrMetadataChanged lets through SyncTask updates that change the spec
// (generation), finalizers, deletion, labels or annotations: not the
// controller's own status writes, which would otherwise wake it again.
func specOrMetadataChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		a, b := e.ObjectOld, e.ObjectNew
		return a.GetGeneration() != b.GetGeneration() ||
			!slices.Equal(a.GetFinalizers(), b.GetFinalizers()) ||
			a.GetDeletionTimestamp().IsZero() != b.GetDeletionTimestamp().IsZero() ||
			!equality.Semantic.DeepEqual(a.GetLabels(), b.GetLabels()) ||
			!equality.Semantic.DeepEqual(a.GetAnnotations(), b.GetAnnotations())
	}}
}
