package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/internal/controller"
	"github.com/mongoferry/mongoferry/internal/envtestutil"
	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestOperatorTLSSecrets runs a SyncTask between two FerretDB servers that
// listen with TLS only, their certificates signed by a private CA made here
// (crypto/x509): the source also requires a client certificate signed by
// it, and both require a password. The CA, the client certificate with its
// key and the passwords are Secrets, named by tls.caSecret,
// tls.certificateKeySecret and credentialsSecret. The task waits, blocked,
// until the TLS Secrets exist; then the operator mounts them into the
// worker (the local pod runner writes the projected volume and stands in
// for the container's mount namespace), discovers the source's topology
// over TLS itself, and the worker copies and replays over TLS: the target's
// documents equal the source's, after the copy and after live writes.
// Deleting the task (deletePolicy Delete) removes its checkpoints over TLS
// with the target's CA from its Secret.
func TestOperatorTLSSecrets(t *testing.T) {
	env := envtestutil.Start(t)
	ns := env.Namespace(t)
	ctx := context.Background()
	const name = "tls"
	ca, files := testserver.MustCA(t, "mongoferry private CA")
	clientCert, clientKey, err := ca.Issue("ferry-worker", true)
	if err != nil {
		t.Fatal(err)
	}
	// The server certificates name 127.0.0.1: both servers listen there.
	src := testserver.Start(t, testserver.Options{Username: "reader", Password: "r3ader-pw",
		TLS: &testserver.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey, CAFile: files.CA, Client: files.ClientConfig}})
	dst := testserver.Start(t, testserver.Options{Username: "writer", Password: "wr1ter-pw",
		TLS: &testserver.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey, Client: files.ClientConfig}})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	docs := make([]any, 1000)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "sku", Value: fmt.Sprintf("sku-%04d", i)}, {Key: "qty", Value: int32(i % 7)}}
	}
	insertDocs(t, sc, "shop", "orders", docs)

	create := func(s *corev1.Secret) {
		t.Helper()
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	secret := func(name string, data map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
	}
	create(secret("src-creds", map[string]string{"username": "reader", "password": "r3ader-pw"}))
	create(secret("dst-creds", map[string]string{"username": "writer", "password": "wr1ter-pw"}))

	caRef := &syncv1alpha1.SecretKeyRef{Name: "mongo-ca", Key: "ca.crt"}
	get := startOperatorTask(t, env, ns, operatorTaskOptions{
		Name: name, FirstIP: "127.0.14.1",
		Spec: syncv1alpha1.SyncTaskSpec{
			Mode: config.ModeFullAndIncremental,
			Source: syncv1alpha1.Source{URI: src.URI, CredentialsSecret: "src-creds",
				TLS: &syncv1alpha1.TLS{Enabled: true, CASecret: caRef, CertificateKeySecret: &syncv1alpha1.SecretKeyRef{Name: "ferry-client", Key: "tls.pem"}}},
			Target:       syncv1alpha1.Target{URI: dst.URI, CredentialsSecret: "dst-creds", TLS: &syncv1alpha1.TLS{Enabled: true, CASecret: caRef}},
			DeletePolicy: syncv1alpha1.DeleteDelete,
			// One writer: FerretDB v1.24 (SQLite) stops answering for good
			// when several connections send `update` commands to one
			// database at once (each update's read-then-write waits on the
			// others; reproduced with the Go driver alone, with and without
			// TLS or authentication). This test replays an updateMany of
			// about 140 documents, which four writers would send at once; it
			// is about the operator's TLS material, not that server.
			Threads: config.Threads{Writers: 1},
		},
	}).get
	waitFor(t, "Ready False, SecretNotFound naming source.tls.caSecret", time.Minute, func() bool {
		c := meta.FindStatusCondition(get().Status.Conditions, syncv1alpha1.ConditionReady)
		return c != nil && c.Reason == syncv1alpha1.ReasonSecretNotFound && strings.HasPrefix(c.Message, `source.tls.caSecret: Secret "mongo-ca" not found`)
	})
	create(secret("mongo-ca", map[string]string{"ca.crt": string(ca.PEM)}))
	create(secret("ferry-client", map[string]string{"tls.pem": string(clientCert) + string(clientKey)}))

	waitFor(t, "phase Streaming", 4*time.Minute, func() bool { return get().Status.Phase == syncv1alpha1.PhaseStreaming })
	waitCaughtUp(t, env.Client, sc, ns, name)
	verifySame(t, sc, dc)

	// What the worker was given: files under the mount path, never PEM.
	var ws corev1.Secret
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: controller.WorkerName(name)}, &ws); err != nil {
		t.Fatal(err)
	}
	taskFile := string(ws.Data[controller.TaskKey])
	for _, want := range []string{"caFile: " + controller.TLSMountPath + "/source/ca.pem", "certificateKeyFile: " + controller.TLSMountPath + "/source/client.pem",
		"caFile: " + controller.TLSMountPath + "/target/ca.pem"} {
		if !strings.Contains(taskFile, want) {
			t.Errorf("the worker's task file lacks %q:\n%s", want, taskFile)
		}
	}
	if strings.Contains(taskFile, "BEGIN") {
		t.Errorf("the worker's task file holds PEM:\n%s", taskFile)
	}
	var sts appsv1.StatefulSet
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: controller.WorkerName(name)}, &sts); err != nil {
		t.Fatal(err)
	}
	var projected int
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Projected != nil {
			projected += len(v.Projected.Sources)
		}
	}
	if projected != 3 {
		t.Errorf("%d projected Secret keys in the worker pod, want 3 (source CA and client certificate, target CA)", projected)
	}

	// Live writes, replayed over TLS.
	more := make([]any, 200)
	for i := range more {
		more[i] = bson.D{{Key: "_id", Value: int32(1000 + i)}, {Key: "sku", Value: fmt.Sprintf("sku-%04d", 1000+i)}, {Key: "qty", Value: int32(1)}}
	}
	insertDocs(t, sc, "shop", "orders", more)
	if _, err := sc.Database("shop").Collection("orders").UpdateMany(ctx, bson.D{{Key: "qty", Value: int32(3)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "qty", Value: int32(30)}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Database("shop").Collection("orders").DeleteMany(ctx, bson.D{{Key: "qty", Value: int32(5)}}); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, env.Client, sc, ns, name)
	verifySame(t, sc, dc)

	// Deleting the task removes its checkpoints from the TLS target.
	deleteRemovesCheckpoints(t, env, dc, get())
}
