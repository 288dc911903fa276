package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/checkpoint"
)

// TestOperatorTLSCertManagerSecret runs a SyncTask whose client certificate
// comes from a Secret shaped as cert-manager writes one for a Certificate
// (type kubernetes.io/tls; tls.crt, tls.key and the issuer's ca.crt), used
// as it is: tls.certificateSecret names it and tls.caSecret names its
// ca.crt. Both FerretDB servers listen with TLS only and require a client
// certificate signed by the CA (made here with crypto/x509; no cert-manager
// runs, the test writes the Secret it would). The task waits, blocked,
// until the Secret exists; then the worker copies and replays over TLS with
// the two mounted files and the target's documents equal the source's. A
// renewal (cert-manager rewrites tls.crt and tls.key in place) rolls the
// worker, which goes on replaying with the new certificate. Deleting the
// task removes its checkpoints: the manager's own connection presents the
// same pair.
func TestOperatorTLSCertManagerSecret(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const name, secretName = "certmanager", "ferry-client-tls"
	ca, files := testserver.MustCA(t, "mongoferry private CA")
	// The server certificates name 127.0.0.1: both servers listen there.
	server := &testserver.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey, CAFile: files.CA, Client: files.ClientConfig}
	src, dst := testserver.Start(t, testserver.Options{TLS: server}), testserver.Start(t, testserver.Options{TLS: server})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	docs := make([]any, 500)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "sku", Value: fmt.Sprintf("sku-%04d", i)}, {Key: "qty", Value: int32(i % 7)}}
	}
	insertDocs(t, sc, "shop", "orders", docs)

	tlsSpec := func() *syncv1alpha1.TLS {
		return &syncv1alpha1.TLS{Enabled: true, CASecret: &syncv1alpha1.SecretKeyRef{Name: secretName, Key: "ca.crt"}, CertificateSecret: secretName}
	}
	get := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, FirstIP: "127.0.19.1",
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode:         config.ModeFullAndIncremental,
			Source:       syncv1alpha1.Source{URI: src.URI, TLS: tlsSpec()},
			Target:       syncv1alpha1.Target{URI: dst.URI, TLS: tlsSpec()},
			DeletePolicy: syncv1alpha1.DeleteDelete,
			// One writer, as in TestOperatorTLSSecrets: FerretDB v1.24
			// stalls on concurrent updates to one database.
			Threads: config.Threads{Writers: 1},
		},
	}).get
	waitFor(t, "Ready False, SecretNotFound naming the Secret", time.Minute, func() bool {
		c := meta.FindStatusCondition(get().Status.Conditions, syncv1alpha1.ConditionReady)
		return c != nil && c.Reason == syncv1alpha1.ReasonSecretNotFound && strings.Contains(c.Message, `Secret "`+secretName+`" not found`)
	})
	issue := func() map[string][]byte {
		t.Helper()
		cert, key, err := ca.Issue("ferry-worker", true)
		if err != nil {
			t.Fatal(err)
		}
		return map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key, "ca.crt": ca.PEM}
	}
	first := issue()
	if err := env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName,
		Annotations: map[string]string{"cert-manager.io/certificate-name": "ferry-client", "cert-manager.io/issuer-name": "mongo-ca"}},
		Type: corev1.SecretTypeTLS, Data: first}); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "phase Streaming", 4*time.Minute, func() bool { return get().Status.Phase == syncv1alpha1.PhaseStreaming })
	waitCaughtUp(t, env.Client, sc, ns, name)
	verifySame(t, sc, dc)

	// What the worker was given: the two files, never PEM.
	var ws corev1.Secret
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: controller.WorkerName(name)}, &ws); err != nil {
		t.Fatal(err)
	}
	taskFile := string(ws.Data[controller.TaskKey])
	for _, role := range []string{"source", "target"} {
		for _, want := range []string{"caFile: " + controller.TLSMountPath + "/" + role + "/ca.pem",
			"certificateFile: " + controller.TLSMountPath + "/" + role + "/client.crt", "privateKeyFile: " + controller.TLSMountPath + "/" + role + "/client.key"} {
			if !strings.Contains(taskFile, want) {
				t.Errorf("the worker's task file lacks %q:\n%s", want, taskFile)
			}
		}
	}
	if strings.Contains(taskFile, "BEGIN") {
		t.Errorf("the worker's task file holds PEM:\n%s", taskFile)
	}

	// A renewal: a new certificate and key under the same keys.
	old := workerPods(t, env.Client, ns, name)[0]
	renewed := issue()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var s corev1.Secret
		if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: secretName}, &s); err != nil {
			return err
		}
		s.Data = renewed
		return env.Client.Update(ctx, &s)
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "WorkersRolled and a new ready worker pod", 2*time.Minute, func() bool {
		pods := workerPods(t, env.Client, ns, name)
		return len(pods) == 1 && pods[0].UID != old.UID && podReady(&pods[0]) && hasReason(taskEvents(t, env.Client, ns, name), "WorkersRolled")
	})
	more := make([]any, 100)
	for i := range more {
		more[i] = bson.D{{Key: "_id", Value: int32(1000 + i)}, {Key: "sku", Value: fmt.Sprintf("sku-%04d", 1000+i)}, {Key: "qty", Value: int32(1)}}
	}
	insertDocs(t, sc, "shop", "orders", more)
	if _, err := sc.Database("shop").Collection("orders").DeleteMany(ctx, bson.D{{Key: "qty", Value: int32(5)}}); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, env.Client, sc, ns, name)
	verifySame(t, sc, dc)

	// No PEM in the task's status or events.
	if st := fmt.Sprintf("%+v", get().Status); strings.Contains(st, "BEGIN") {
		t.Errorf("the status holds PEM: %s", st)
	}
	for _, e := range taskEvents(t, env.Client, ns, name) {
		if strings.Contains(e.Note, "BEGIN") {
			t.Errorf("an event holds PEM: %s", e.Note)
		}
	}

	// Deleting the task removes its checkpoints from the target, which
	// the manager reaches with the Secret's pair.
	deleteRemovesCheckpoints(t, env, dc, get())
}

// deleteRemovesCheckpoints deletes a SyncTask with deletePolicy Delete and
// checks that the manager removed its checkpoint record from the target
// (dc) without a CheckpointCleanupFailed event.
func deleteRemovesCheckpoints(t *testing.T, env *envtestutil.Env, dc *mongo.Client, task *syncv1alpha1.SyncTask) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Delete(ctx, task); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the SyncTask to be deleted", 2*time.Minute, func() bool {
		return env.Client.Get(ctx, types.NamespacedName{Namespace: task.Namespace, Name: task.Name}, &syncv1alpha1.SyncTask{}) != nil
	})
	if _, err := checkpoint.NewStore(dc, config.DefaultDatabase, task.Name).Task(ctx); err == nil {
		t.Error("the task's checkpoint record is still on the target after deletion with deletePolicy Delete")
	}
	if hasReason(taskEvents(t, env.Client, task.Namespace, task.Name), "CheckpointCleanupFailed") {
		t.Error("a CheckpointCleanupFailed event: the manager could not reach the TLS target")
	}
}
