package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
)

// TLSMountPath is where the workers find the TLS Secrets' keys:
// <role>/ca.pem, <role>/client.pem, <role>/client.crt and <role>/client.key
// (role source or target).
const TLSMountPath = syncv1alpha1.TLSMountPath

// tlsVolume is the name of the projected volume that holds them.
const tlsVolume = "tls"

// tlsFileMode lets the worker's group read the files and nobody else:
// Secret volumes belong to root, and the pod's fsGroup (the worker's
// group) gives the worker its read.
const tlsFileMode = int32(0o440)

// tlsFile is one TLS Secret key mounted into the workers.
type tlsFile struct {
	secret, key string
	// path is relative to TLSMountPath.
	path string
}

// renderTLS checks that each TLS Secret key of the task exists, records
// the files to mount (where the task file from SyncTaskSpec.TaskSpec names
// them), and returns the Secrets' identities and versions for the hash that rolls the
// workers when a Secret changes.
func (r *SyncTaskReconciler) renderTLS(ctx context.Context, task *syncv1alpha1.SyncTask, out *rendered) ([][]byte, error) {
	var fields [][]byte
	for _, f := range task.Spec.TLSSecretFiles() {
		_, s, err := r.tlsSecretKey(ctx, task.Namespace, f)
		if err != nil {
			return nil, err
		}
		out.tlsFiles = append(out.tlsFiles, tlsFile{secret: f.Ref.Name, key: f.Ref.Key, path: f.Path})
		fields = append(fields, []byte(f.Field), []byte(f.Ref.Name), []byte(f.Ref.Key), []byte(s.UID), []byte(s.ResourceVersion))
	}
	return fields, nil
}

// tlsSecretKey reads one TLS Secret key: a missing Secret or key blocks the
// task with a message naming the field.
func (r *SyncTaskReconciler) tlsSecretKey(ctx context.Context, namespace string, f syncv1alpha1.TLSSecretFile) ([]byte, *corev1.Secret, error) {
	var s corev1.Secret
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: f.Ref.Name}, &s)
	pair := f.Kind == syncv1alpha1.TLSFileCertificate || f.Kind == syncv1alpha1.TLSFilePrivateKey
	switch {
	case apierrors.IsNotFound(err) && pair:
		return nil, nil, &blockedError{syncv1alpha1.ReasonSecretNotFound, fmt.Sprintf("%s: Secret %q not found in namespace %s: create it as a kubernetes.io/tls Secret with the client certificate under %s and its key under %s (a cert-manager Certificate with this secretName writes one)",
			f.Field, f.Ref.Name, namespace, syncv1alpha1.TLSCertificateKey, syncv1alpha1.TLSPrivateKeyKey)}
	case apierrors.IsNotFound(err):
		return nil, nil, &blockedError{syncv1alpha1.ReasonSecretNotFound, fmt.Sprintf("%s: Secret %q not found in namespace %s: create it with the PEM under key %s", f.Field, f.Ref.Name, namespace, f.Ref.Key)}
	case err != nil:
		return nil, nil, fmt.Errorf("read %s %q: %w", f.Field, f.Ref.Name, err)
	}
	pem, ok := s.Data[f.Ref.Key]
	switch {
	case (!ok || len(pem) == 0) && pair:
		return nil, nil, &blockedError{syncv1alpha1.ReasonSecretInvalid, fmt.Sprintf("%s: Secret %q has no key %s: it must hold the client certificate under %s and its key under %s, as a kubernetes.io/tls Secret does; for a Secret with both PEMs under one key, use certificateKeySecret instead",
			f.Field, f.Ref.Name, f.Ref.Key, syncv1alpha1.TLSCertificateKey, syncv1alpha1.TLSPrivateKeyKey)}
	case !ok || len(pem) == 0:
		return nil, nil, &blockedError{syncv1alpha1.ReasonSecretInvalid, fmt.Sprintf("%s: Secret %q has no key %s: add the PEM under it, or name the key that holds it", f.Field, f.Ref.Name, f.Ref.Key)}
	}
	return pem, &s, nil
}

// applyTLSFiles mounts the TLS Secrets' keys into the worker pod, read-only
// and readable by the worker's group only.
func applyTLSFiles(files []tlsFile, pod *corev1ac.PodSpecApplyConfiguration, container *corev1ac.ContainerApplyConfiguration, security *corev1ac.PodSecurityContextApplyConfiguration) {
	if len(files) == 0 {
		return
	}
	projected := corev1ac.ProjectedVolumeSource()
	for _, f := range files {
		projected.WithSources(corev1ac.VolumeProjection().WithSecret(corev1ac.SecretProjection().WithName(f.secret).
			WithItems(corev1ac.KeyToPath().WithKey(f.key).WithPath(f.path).WithMode(tlsFileMode))))
	}
	pod.WithVolumes(corev1ac.Volume().WithName(tlsVolume).WithProjected(projected))
	container.WithVolumeMounts(corev1ac.VolumeMount().WithName(tlsVolume).WithMountPath(TLSMountPath).WithReadOnly(true))
	security.WithFSGroup(workerUID)
}
