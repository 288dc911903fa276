package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
)

// CheckpointFinalizer is on SyncTasks with deletePolicy Delete: it holds the
// deletion until the task's checkpoints are removed from the target.
const CheckpointFinalizer = "sync.mongoferry.io/checkpoint-cleanup"

// cleanupTimeout bounds the connection to the target and the deletes.
const cleanupTimeout = 20 * time.Second

// cleanupRetry is how long a failed cleanup waits before it tries again.
const cleanupRetry = 30 * time.Second

// ensureFinalizer adds the finalizer for deletePolicy Delete and removes it
// for Retain (no finalizer is needed to keep the checkpoints).
func (r *SyncTaskReconciler) ensureFinalizer(ctx context.Context, task *syncv1alpha1.SyncTask) error {
	want := task.Spec.DeletePolicy == syncv1alpha1.DeleteDelete
	if want == controllerutil.ContainsFinalizer(task, CheckpointFinalizer) {
		return nil
	}
	orig := task.DeepCopy()
	if want {
		controllerutil.AddFinalizer(task, CheckpointFinalizer)
	} else {
		controllerutil.RemoveFinalizer(task, CheckpointFinalizer)
	}
	return r.Client.Patch(ctx, task, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// finalize runs for a SyncTask being deleted: with deletePolicy Delete it
// stops the workers, waits until their pods are gone (a running worker
// would write its checkpoint again), removes the task's records from the
// target's checkpoint database and lets the deletion finish. When the
// target cannot be reached it retries; setting deletePolicy to Retain
// lets the deletion finish without the cleanup.
func (r *SyncTaskReconciler) finalize(ctx context.Context, task *syncv1alpha1.SyncTask) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(task, CheckpointFinalizer) {
		return ctrl.Result{}, nil
	}
	if task.Spec.DeletePolicy == syncv1alpha1.DeleteDelete {
		// The task's workers and its copy-only workers.
		for _, name := range []string{WorkerName(task.Name), CopyWorkerName(task.Name)} {
			var sts appsv1.StatefulSet
			err := r.Client.Get(ctx, types.NamespacedName{Namespace: task.Namespace, Name: name}, &sts)
			switch {
			case err == nil && (sts.Spec.Replicas == nil || *sts.Spec.Replicas != 0):
				patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))
				if err := r.Client.Patch(ctx, &sts, patch, FieldOwner); err != nil {
					return ctrl.Result{}, fmt.Errorf("stop the workers of %s: %w", name, err)
				}
			case err != nil && !apierrors.IsNotFound(err):
				return ctrl.Result{}, err
			}
		}
		for _, sel := range []map[string]string{selectorLabels(task), copySelectorLabels(task)} {
			var pods corev1.PodList
			if err := r.Client.List(ctx, &pods, client.InNamespace(task.Namespace), client.MatchingLabels(sel)); err != nil {
				return ctrl.Result{}, err
			}
			if len(pods.Items) > 0 {
				return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
			}
		}
		if err := r.dropCheckpoint(ctx, task); err != nil {
			r.event(task, corev1.EventTypeWarning, "CheckpointCleanupFailed", "Delete",
				"could not remove the checkpoints of task %s from the target, retrying in %s (set spec.deletePolicy to Retain to delete the SyncTask without removing them): %v",
				task.Name, cleanupRetry, err)
			return ctrl.Result{RequeueAfter: cleanupRetry}, nil
		}
		r.event(task, corev1.EventTypeNormal, "CheckpointDeleted", "Delete",
			"removed the checkpoints of task %s from the target's %s database", task.Name, task.Spec.Checkpoint.Database)
	}
	orig := task.DeepCopy()
	controllerutil.RemoveFinalizer(task, CheckpointFinalizer)
	if err := r.Client.Patch(ctx, task, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// dropCheckpoint connects to the target as the workers do (the endpoint of
// the rendered task), with the password and TLS PEM held in memory from the
// Secrets, and deletes the task's checkpoint records.
func (r *SyncTaskReconciler) dropCheckpoint(ctx context.Context, task *syncv1alpha1.SyncTask) error {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	db := task.Spec.Checkpoint.Database
	if db == "" {
		db = config.DefaultDatabase
	}
	var users syncv1alpha1.Usernames
	var password string
	if name := task.Spec.Target.CredentialsSecret; name != "" {
		var s corev1.Secret
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: task.Namespace, Name: name}, &s); err != nil {
			return fmt.Errorf("target.credentialsSecret %q: %w", name, err)
		}
		users.Target, password = string(s.Data[UsernameKey]), string(s.Data[PasswordKey])
	}
	opts := conn.Options{AppName: "mongoferry-operator", ConnectTimeout: 10 * time.Second, Password: password}
	for _, f := range task.Spec.TLSSecretFiles() {
		if f.Role != "target" {
			continue
		}
		pem, _, err := r.tlsSecretKey(ctx, task.Namespace, f)
		if err != nil {
			return err
		}
		switch f.Kind {
		case syncv1alpha1.TLSFileCA:
			opts.CAPEM = pem
		case syncv1alpha1.TLSFileCertificateKey:
			opts.CertificateKeyPEM = pem
		case syncv1alpha1.TLSFileCertificate:
			opts.CertificatePEM = pem
		case syncv1alpha1.TLSFilePrivateKey:
			opts.PrivateKeyPEM = pem
		}
	}
	ep := task.Spec.TaskSpec(users).Target
	// The password is in opts: the manager has no variable to read.
	ep.PasswordEnv = ""
	c, err := conn.Open(ctx, "target", ep, opts)
	if err != nil {
		return scrub(errors.New(specTerms(err.Error())), password)
	}
	defer func() { _ = c.Disconnect(context.WithoutCancel(ctx)) }()
	return scrub(checkpoint.NewStore(c, db, task.Name).Drop(ctx), password)
}

// scrub removes a password from an error's text, should any layer have
// echoed it.
func scrub(err error, password string) error {
	if err == nil || password == "" || !strings.Contains(err.Error(), password) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), password, "***"))
}
