package controller

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// Copy-only workers (spec.fullSync.workers above 1): a StatefulSet
// <name>-copy of workers-1 pods running `ferry run --copy-only` beside
// the task's worker while the task copies. They claim and copy ranges of
// the plan the task's worker saves on the target, through leases there
// (docs/architecture.md, "The full copy"); once the task has left its
// full copy the controller scales them to zero. Their pods carry their
// own app.kubernetes.io/name, so that they are not taken for the task's
// workers (observeWorkers, the Service) and hold no shard.

// appNameCopyWorker is the app.kubernetes.io/name of copy-only workers.
const appNameCopyWorker = "mongoferry-copy-worker"

// CopyWorkerName is the name of a task's copy-only worker StatefulSet.
func CopyWorkerName(task string) string { return task + "-copy" }

// copySelectorLabels select a task's copy-only worker pods.
func copySelectorLabels(task *syncv1alpha1.SyncTask) map[string]string {
	return map[string]string{appNameLabel: appNameCopyWorker, TaskLabel: task.Name}
}

// copyReplicas is how many copy-only workers the task runs now: workers-1
// while it copies (its status Pending or FullSync) and its workers run,
// once the source is known to be copied by one process (not sharded and
// replayed shard by shard); none otherwise.
func copyReplicas(task *syncv1alpha1.SyncTask, phase syncv1alpha1.Phase, workers int32, d discovery) int32 {
	w := task.Spec.FullSync.Workers
	switch {
	case w <= 1, workers == 0, task.Spec.Mode == config.ModeIncremental, !d.known, d.sharded:
		return 0
	case phase == "", phase == syncv1alpha1.PhasePending, phase == syncv1alpha1.PhaseFullSync:
		return int32(w - 1)
	}
	return 0
}

// ensureCopyWorkers applies the copy-only worker StatefulSet with
// replicas pods; it creates none for a task that never had any.
func (r *SyncTaskReconciler) ensureCopyWorkers(ctx context.Context, task *syncv1alpha1.SyncTask, rnd *rendered, image string, replicas int32) error {
	name := CopyWorkerName(task.Name)
	var cur appsv1.StatefulSet
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: task.Namespace, Name: name}, &cur)
	before, exists := int32(0), err == nil
	switch {
	case apierrors.IsNotFound(err) && replicas == 0:
		return nil
	case exists && cur.Spec.Replicas != nil:
		before = *cur.Spec.Replicas
	case err != nil && !apierrors.IsNotFound(err):
		return err
	}
	if err := r.Client.Apply(ctx, copyWorkerSet(task, rnd, image, replicas), FieldOwner, client.ForceOwnership); err != nil {
		return fmt.Errorf("apply StatefulSet %s: %w", name, err)
	}
	switch {
	case !exists:
		r.event(task, corev1.EventTypeNormal, "CopyWorkersCreated", "Create",
			"created StatefulSet %s with %d copy-only worker(s) sharing the full copy (fullSync.workers %d)", name, replicas, task.Spec.FullSync.Workers)
	case before > 0 && replicas == 0:
		r.event(task, corev1.EventTypeNormal, "CopyWorkersStopped", "Scale",
			"scaled StatefulSet %s to 0: the task is not copying (phase %s)", name, task.Status.Phase)
	case before != replicas:
		r.event(task, corev1.EventTypeNormal, "CopyWorkersScaled", "Scale",
			"scaled StatefulSet %s from %d to %d copy-only worker(s)", name, before, replicas)
	}
	return nil
}

// copyWorkerSet is the desired copy-only worker StatefulSet: the task's
// worker pod with `ferry run --copy-only`, no shard and no discovery.
func copyWorkerSet(task *syncv1alpha1.SyncTask, rnd *rendered, image string, replicas int32) *appsv1ac.StatefulSetApplyConfiguration {
	name := WorkerName(task.Name)
	env := []*corev1ac.EnvVarApplyConfiguration{
		secretEnv(TaskEnv, name, TaskKey),
		corev1ac.EnvVar().WithName(PodNameEnv).WithValueFrom(
			corev1ac.EnvVarSource().WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("metadata.name"))),
	}
	if s := task.Spec.Source.CredentialsSecret; s != "" {
		env = append(env, secretEnv(SourcePasswordEnv, s, PasswordKey))
	}
	if s := task.Spec.Target.CredentialsSecret; s != "" {
		env = append(env, secretEnv(TargetPasswordEnv, s, PasswordKey))
	}
	args := []string{"run", "--task-env", TaskEnv, workerapi.FlagCopyOnly,
		"--listen", "0.0.0.0:" + strconv.Itoa(int(metricsPort(task))), "--progress", "log", "--log-format", "json"}
	return workerSet(task, rnd, image, workerSetParts{
		name: CopyWorkerName(task.Name), selector: copySelectorLabels(task), replicas: replicas,
		args: args, env: env,
		annotations: map[string]string{
			ConfigHashAnnotation:                      rnd.hash,
			"kubectl.kubernetes.io/default-container": WorkerContainer,
		},
	})
}
