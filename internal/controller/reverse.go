package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// Reverse sync: once a task's cut-over is complete and spec.reverse asks
// for it, the controller creates one SyncTask replaying the new
// deployment's changes back onto the old one (reverseSpec), records its
// name in status.reverseTask and tells it in an event. Nothing else ties
// the two: the reverse task is a SyncTask like any other.

// ensureReverse creates task's reverse SyncTask when its cut-over is
// complete and spec.reverse.enabled, and returns the name to record in
// status.reverseTask ("" while there is none). It never creates a second
// one: once recorded, the name stays.
func (r *SyncTaskReconciler) ensureReverse(ctx context.Context, task *syncv1alpha1.SyncTask) (string, error) {
	if task.Status.ReverseTask != "" {
		return task.Status.ReverseTask, nil
	}
	if task.Spec.Reverse == nil || !task.Spec.Reverse.Enabled ||
		!meta.IsStatusConditionTrue(task.Status.Conditions, syncv1alpha1.ConditionCutoverComplete) {
		return "", nil
	}
	name := task.ReverseTaskName()
	rev, err := reverseTask(task, name)
	if err != nil {
		r.event(task, corev1.EventTypeWarning, "ReverseNotCreated", "Reverse", "the reverse SyncTask %s was not created: %v", name, err)
		return "", nil
	}
	err = r.Client.Create(ctx, rev)
	switch {
	case apierrors.IsAlreadyExists(err):
		var have syncv1alpha1.SyncTask
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: task.Namespace, Name: name}, &have); err != nil {
			return "", err
		}
		if have.Labels[syncv1alpha1.ReverseOfLabel] != task.Name {
			r.event(task, corev1.EventTypeWarning, "ReverseNotCreated", "Reverse",
				"a SyncTask named %s exists and is not the reverse of this task: name the reverse task with spec.reverse.taskName", name)
			return "", nil
		}
	case err != nil:
		return "", fmt.Errorf("create the reverse SyncTask %s: %w", name, err)
	default:
		r.event(task, corev1.EventTypeNormal, "ReverseTaskCreated", "Reverse",
			"created SyncTask %s: it replays %s back to %s from the target's position at cut-over (%s)",
			name, config.Redact(task.Spec.Target.URI), config.Redact(task.Spec.Source.URI), rev.Spec.Incremental.StartAt)
	}
	return name, nil
}

// reverseTask is the reverse SyncTask of a task whose cut-over completed:
// mode incremental from its target to its source, each side with the
// other's credentials and TLS Secrets, starting at the target position
// recorded at cut-over, with a checkpoint database of its own, renames
// inverted and the forward checkpoint database left out
// (config.ReverseNamespaces). The worker settings are kept.
func reverseTask(task *syncv1alpha1.SyncTask, name string) (*syncv1alpha1.SyncTask, error) {
	var pos string
	if task.Status.Cutover != nil {
		pos = strings.Trim(task.Status.Cutover.TargetPosition, "() ")
	}
	if pos == "" {
		return nil, fmt.Errorf("status.cutover.targetPosition is empty: the workers did not report where the target stood at cut-over")
	}
	ts, err := config.ParseStartAt(pos)
	if err != nil {
		return nil, fmt.Errorf("status.cutover.targetPosition: %w", err)
	}
	fwd := &task.Spec
	ns, err := config.ReverseNamespaces(fwd.Namespaces, fwd.Checkpoint.Database)
	if err != nil {
		return nil, err
	}
	spec := *fwd.DeepCopy()
	spec.Mode = config.ModeIncremental
	spec.Source = syncv1alpha1.Source{URI: fwd.Target.URI, CredentialsSecret: fwd.Target.CredentialsSecret,
		AuthSource: fwd.Target.AuthSource, AuthMechanism: fwd.Target.AuthMechanism, TLS: fwd.Target.TLS.DeepCopy()}
	spec.Target = syncv1alpha1.Target{URI: fwd.Source.URI, CredentialsSecret: fwd.Source.CredentialsSecret,
		AuthSource: fwd.Source.AuthSource, AuthMechanism: fwd.Source.AuthMechanism, TLS: fwd.Source.TLS.DeepCopy()}
	spec.Namespaces = ns
	spec.Incremental.StartAt = config.FormatPosition(ts)
	spec.FullSync.DropTarget = false
	spec.Checkpoint.Database = config.ReverseCheckpointDatabase(fwd.Checkpoint.Database)
	spec.Cutover = config.Cutover{}
	spec.Reverse = nil
	spec.Suspend = false
	return &syncv1alpha1.SyncTask{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: task.Namespace,
			Labels: map[string]string{syncv1alpha1.ReverseOfLabel: task.Name}},
		Spec: spec,
	}, nil
}
