package controller

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/workerapi"
)

// The worker's task file and credentials.
const (
	// TaskKey is the key of the rendered task file in the worker Secret.
	TaskKey = "task.yaml"
	// TaskEnv is the worker's environment variable holding the task file
	// (`ferry run --task-env`).
	TaskEnv = workerapi.EnvTask
	// SourcePasswordEnv and TargetPasswordEnv hold the passwords, from the
	// user's Secrets; the task file names them in passwordEnv.
	SourcePasswordEnv = workerapi.EnvSourcePassword
	// TargetPasswordEnv is the target's password variable.
	TargetPasswordEnv = workerapi.EnvTargetPassword
	// UsernameKey and PasswordKey are the keys of a credentials Secret.
	UsernameKey = "username"
	// PasswordKey is the password's key in a credentials Secret.
	PasswordKey = "password"
	// ConfigHashAnnotation on the worker pod template changes whenever the
	// task file or a credentials Secret changes, which rolls the workers.
	ConfigHashAnnotation = "sync.mongoferry.io/config-hash"
)

// MaxTaskNameLength is the longest SyncTask name the controller can run:
// the StatefulSet <name>-worker puts its name and a 10-character revision
// into a 63-character label on every pod.
const MaxTaskNameLength = 45

// blockedError is a problem with the user's objects that stops the
// controller from starting workers: it becomes the Ready and Degraded
// conditions and a Warning event, and clears when the user fixes it.
type blockedError struct {
	reason  string
	message string
}

func (e *blockedError) Error() string { return e.message }

// rendered is a worker task file and the hash of everything a worker reads
// at start: the task file and the credentials.
type rendered struct {
	task []byte
	// hash is a SHA-256 of the task file and of the identity and
	// resourceVersion of each credentials Secret: any write to such a
	// Secret (a rotated password, but also a new label) rolls the
	// workers. It is made from the Secrets' versions rather than their
	// data so that the pod template, which more people can read than
	// Secrets, carries nothing derived from a password (a hash of a weak
	// password can be brute-forced offline).
	hash string
	// secrets maps role ("source", "target") to the credentials Secret.
	secrets map[string]string
	// tlsFiles are the TLS Secret keys mounted into the workers.
	tlsFiles []tlsFile
	// volumes are spec.workerTemplate.volumes, decoded.
	volumes []corev1.Volume
	// workerTLS: the workers serve HTTPS with the task's worker TLS
	// Secret (ensureWorkerTLS).
	workerTLS bool
}

// render builds the worker's task file: the SyncTask's spec as the CLI's
// task (SyncTaskSpec.TaskSpec) with the task's name and defaults filled
// in, given the usernames of the credentials Secrets. The passwords never
// enter the file: passwordEnv names the variables the StatefulSet fills
// from the Secrets.
func (r *SyncTaskReconciler) render(ctx context.Context, task *syncv1alpha1.SyncTask) (*rendered, error) {
	out := &rendered{secrets: map[string]string{}}
	users, secretFields, err := r.readCredentials(ctx, task, out)
	if err != nil {
		return nil, err
	}
	tlsFields, err := r.renderTLS(ctx, task, out)
	if err != nil {
		return nil, err
	}
	secretFields = append(secretFields, tlsFields...)
	if len(task.Name) > MaxTaskNameLength {
		return nil, &blockedError{syncv1alpha1.ReasonInvalidSpec, fmt.Sprintf(
			"metadata.name: %q is %d characters: the workers' StatefulSet %s-worker and its pods need a name of at most %d characters; recreate the task under a shorter name",
			task.Name, len(task.Name), task.Name, MaxTaskNameLength)}
	}
	vols, err := workerVolumes(task.Spec.WorkerTemplate)
	if err != nil {
		return nil, &blockedError{syncv1alpha1.ReasonInvalidSpec, err.Error()}
	}
	out.volumes = vols
	t := config.Task{Name: task.Name, Spec: task.Spec.TaskSpec(users)}
	t.SetDefaults()
	if err := validateTask(&t); err != nil {
		return nil, err
	}
	data, err := yaml.Marshal(&t)
	if err != nil {
		return nil, fmt.Errorf("render task file: %w", err)
	}
	out.task = data
	out.hash = configHash(append([][]byte{data}, secretFields...))
	return out, nil
}

// configHash hashes the rendered task and what identifies the Secrets it
// reads. Fields are length-prefixed, so that moving bytes from one to the
// next changes the hash.
func configHash(fields [][]byte) string {
	h := sha256.New()
	for _, b := range fields {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// readCredentials reads the source's and target's credentialsSecret, when
// set: it records each in out.secrets and returns the usernames and what
// identifies each Secret's version, for the configuration hash. A missing
// Secret or key blocks the task with the fix named.
func (r *SyncTaskReconciler) readCredentials(ctx context.Context, task *syncv1alpha1.SyncTask, out *rendered) (syncv1alpha1.Usernames, [][]byte, error) {
	var secretFields [][]byte
	var users syncv1alpha1.Usernames
	for _, ec := range []struct {
		role, secret string
		user         *string
	}{
		{"source", task.Spec.Source.CredentialsSecret, &users.Source},
		{"target", task.Spec.Target.CredentialsSecret, &users.Target},
	} {
		name := ec.secret
		if name == "" {
			continue
		}
		var s corev1.Secret
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: task.Namespace, Name: name}, &s)
		switch {
		case apierrors.IsNotFound(err):
			return users, nil, &blockedError{syncv1alpha1.ReasonSecretNotFound, fmt.Sprintf(
				"%s.credentialsSecret: Secret %q not found in namespace %s: create it with keys %s and %s",
				ec.role, name, task.Namespace, UsernameKey, PasswordKey)}
		case err != nil:
			return users, nil, fmt.Errorf("read %s.credentialsSecret %q: %w", ec.role, name, err)
		}
		user, okUser := s.Data[UsernameKey]
		_, okPass := s.Data[PasswordKey]
		if !okUser || len(user) == 0 || !okPass {
			return users, nil, &blockedError{syncv1alpha1.ReasonSecretInvalid, fmt.Sprintf(
				"%s.credentialsSecret: Secret %q must have the keys %s and %s (%s is empty or missing)",
				ec.role, name, UsernameKey, PasswordKey, missingKey(okUser && len(user) > 0, okPass))}
		}
		*ec.user = string(user)
		out.secrets[ec.role] = name
		secretFields = append(secretFields, []byte(ec.role), []byte(name), []byte(s.UID), []byte(s.ResourceVersion))
	}
	return users, secretFields, nil
}

// validateTask checks the task the spec renders to; what fails blocks the
// task, each field named as the SyncTask spells it.
func validateTask(t *config.Task) error {
	err := t.Validate()
	if err == nil {
		return nil
	}
	var v config.ValidationError
	if !errors.As(err, &v) {
		return &blockedError{syncv1alpha1.ReasonInvalidSpec, err.Error()}
	}
	msgs := make([]string, len(v))
	for i, fe := range v {
		msgs[i] = "spec." + fe.Error()
		if fe.Field == "name" {
			msgs[i] = "metadata." + fe.Error()
		}
	}
	return &blockedError{syncv1alpha1.ReasonInvalidSpec, strings.Join(msgs, "; ")}
}

func missingKey(userOK, passOK bool) string {
	if !userOK {
		return UsernameKey
	}
	if !passOK {
		return PasswordKey
	}
	return ""
}
