package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// TLSMountPath is where the workers find the TLS Secrets' keys:
// <role>/ca.pem and <role>/client.pem (role source or target).
const TLSMountPath = "/etc/mongoferry/tls"

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

// renderTLS replaces each endpoint's tls.caSecret and
// tls.certificateKeySecret with the file the workers read it from
// (tls.caFile, tls.certificateKeyFile under TLSMountPath), records the
// files to mount, keeps the source's PEM for the manager's own
// connection, and returns the Secrets' identities and versions for the
// hash that rolls the workers when a Secret changes.
func (r *SyncTaskReconciler) renderTLS(ctx context.Context, namespace string, spec *config.Spec, out *rendered) ([][]byte, error) {
	var fields [][]byte
	for _, ep := range []struct {
		role     string
		endpoint *config.Endpoint
	}{{"source", &spec.Source}, {"target", &spec.Target}} {
		t := ep.endpoint.TLS
		if t == nil {
			continue
		}
		for _, f := range []struct {
			ref   **config.SecretKeyRef
			field string
			file  string
			path  *string
			pem   *[]byte
		}{
			{&t.CASecret, "caSecret", "ca.pem", &t.CAFile, &out.sourceSecrets.CAPEM},
			{&t.CertificateKeySecret, "certificateKeySecret", "client.pem", &t.CertificateKeyFile, &out.sourceSecrets.CertificateKeyPEM},
		} {
			ref := *f.ref
			if ref == nil {
				continue
			}
			name := fmt.Sprintf("%s.tls.%s", ep.role, f.field)
			var s corev1.Secret
			err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, &s)
			switch {
			case apierrors.IsNotFound(err):
				return nil, &blockedError{ReasonSecretNotFound, fmt.Sprintf("%s: Secret %q not found in namespace %s: create it with the PEM under key %s", name, ref.Name, namespace, ref.Key)}
			case err != nil:
				return nil, fmt.Errorf("read %s %q: %w", name, ref.Name, err)
			}
			pem, ok := s.Data[ref.Key]
			if !ok || len(pem) == 0 {
				return nil, &blockedError{ReasonSecretInvalid, fmt.Sprintf("%s: Secret %q has no key %s: add the PEM under it, or name the key that holds it", name, ref.Name, ref.Key)}
			}
			rel := ep.role + "/" + f.file
			*f.path = TLSMountPath + "/" + rel
			*f.ref = nil
			if ep.role == "source" {
				*f.pem = pem
			}
			out.tlsFiles = append(out.tlsFiles, tlsFile{secret: ref.Name, key: ref.Key, path: rel})
			fields = append(fields, []byte(name), []byte(ref.Name), []byte(ref.Key), []byte(s.UID), []byte(s.ResourceVersion))
		}
	}
	return fields, nil
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
