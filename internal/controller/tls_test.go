package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	syncv1alpha1 "github.com/mongoferry/mongoferry/api/v1alpha1"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// certManagerSecret is a Secret shaped as cert-manager writes one for a
// Certificate: type kubernetes.io/tls, the certificate under tls.crt, its
// key under tls.key and the issuing CA under ca.crt. The PEM bodies are
// markers, not certificates: the controller mounts keys, it does not parse
// them.
func certManagerSecret(ns, name, serial string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Annotations: map[string]string{"cert-manager.io/certificate-name": name, "cert-manager.io/issuer-kind": "ClusterIssuer"}},
		Type: corev1.SecretTypeTLS,
		StringData: map[string]string{
			corev1.TLSCertKey:       "-----BEGIN CERTIFICATE-----\nLEAF" + serial + "\n-----END CERTIFICATE-----\n",
			corev1.TLSPrivateKeyKey: "-----BEGIN EC PRIVATE KEY-----\nKEY" + serial + "\n-----END EC PRIVATE KEY-----\n",
			"ca.crt":                "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n",
		}}
}

// TestTLSCertificateSecret: tls.certificateSecret names a cert-manager
// Secret used as it is. The operator mounts its tls.crt and tls.key (and
// its ca.crt, named by caSecret) into the workers with the same file mode
// as the other TLS files, the task file names the two files and holds no
// PEM, a renewal (new tls.crt and tls.key) rolls the workers, and no PEM
// reaches the task's status or events.
func TestTLSCertificateSecret(t *testing.T) {
	ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) {
		st.Spec.Source.TLS = &syncv1alpha1.TLS{Enabled: true, CASecret: &syncv1alpha1.SecretKeyRef{Name: "ferry-client-tls", Key: "ca.crt"},
			CertificateSecret: "ferry-client-tls"}
		st.Spec.Target.TLS = &syncv1alpha1.TLS{Enabled: true, CertificateSecret: "ferry-client-tls"}
	})
	if err := env.Client.Create(testCtx(t), certManagerSecret(ns, "ferry-client-tls", "1")); err != nil {
		t.Fatal(err)
	}
	r, rec := newReconciler()
	reconcile(t, r, ns, "orders")
	s := get(t, ns, "orders-worker", &corev1.Secret{})
	if task := string(s.Data[TaskKey]); strings.Contains(task, "BEGIN") || strings.Contains(task, "certificateSecret") {
		t.Errorf("the task file holds PEM or Secret references:\n%s", task)
	}
	rendered, err := config.Parse(s.Data[TaskKey])
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]config.TLS{
		"source": {Enabled: true, CAFile: TLSMountPath + "/source/ca.pem", CertificateFile: TLSMountPath + "/source/client.crt", PrivateKeyFile: TLSMountPath + "/source/client.key"},
		"target": {Enabled: true, CertificateFile: TLSMountPath + "/target/client.crt", PrivateKeyFile: TLSMountPath + "/target/client.key"},
	}
	for role, got := range map[string]*config.TLS{"source": rendered.Source.TLS, "target": rendered.Target.TLS} {
		if got == nil || *got != want[role] {
			t.Errorf("rendered %s.tls %+v, want %+v", role, got, want[role])
		}
	}

	sts := get(t, ns, "orders-worker", &appsv1.StatefulSet{})
	var paths []string
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "tls" && v.Projected != nil {
			for _, src := range v.Projected.Sources {
				for _, it := range src.Secret.Items {
					paths = append(paths, fmt.Sprintf("%s:%s->%s:%o", src.Secret.Name, it.Key, it.Path, *it.Mode))
				}
			}
		}
	}
	wantPaths := []string{"ferry-client-tls:ca.crt->source/ca.pem:440", "ferry-client-tls:tls.crt->source/client.crt:440", "ferry-client-tls:tls.crt->target/client.crt:440",
		"ferry-client-tls:tls.key->source/client.key:440", "ferry-client-tls:tls.key->target/client.key:440"}
	slices.Sort(paths)
	if !slices.Equal(paths, wantPaths) {
		t.Errorf("projected files %v, want %v", paths, wantPaths)
	}

	// A renewal rolls the workers.
	hash := sts.Spec.Template.Annotations[ConfigHashAnnotation]
	renewed := get(t, ns, "ferry-client-tls", &corev1.Secret{})
	fresh := certManagerSecret(ns, "ferry-client-tls", "2")
	renewed.StringData = map[string]string{corev1.TLSCertKey: fresh.StringData[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: fresh.StringData[corev1.TLSPrivateKeyKey]}
	if err := env.Client.Update(testCtx(t), renewed); err != nil {
		t.Fatal(err)
	}
	reconcile(t, r, ns, "orders")
	if h := get(t, ns, "orders-worker", &appsv1.StatefulSet{}).Spec.Template.Annotations[ConfigHashAnnotation]; h == hash {
		t.Error("renewing the kubernetes.io/tls Secret did not change the config hash")
	}

	for _, e := range drainEvents(rec) {
		if strings.Contains(e, "BEGIN") || strings.Contains(e, "KEY") {
			t.Errorf("an event holds PEM: %s", e)
		}
	}
	if st := fmt.Sprintf("%+v", getTask(t, ns, "orders").Status); strings.Contains(st, "BEGIN") {
		t.Errorf("the status holds PEM: %s", st)
	}
}

// TestTLSCertificateSecretBlocked: a certificateSecret that is missing, or
// lacks tls.crt or tls.key, blocks the task with a Ready condition naming
// the field and saying what the Secret must hold.
func TestTLSCertificateSecretBlocked(t *testing.T) {
	cases := []struct {
		name   string
		secret *corev1.Secret // nil: none
		reason string
		want   string
	}{
		{"no Secret", nil, syncv1alpha1.ReasonSecretNotFound,
			`target.tls.certificateSecret: Secret "ferry-client-tls" not found in namespace %s: create it as a kubernetes.io/tls Secret with the client certificate under tls.crt and its key under tls.key (a cert-manager Certificate with this secretName writes one)`},
		{"no tls.key", &corev1.Secret{StringData: map[string]string{"tls.crt": "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n"}}, syncv1alpha1.ReasonSecretInvalid,
			`target.tls.certificateSecret: Secret "ferry-client-tls" has no key tls.key: it must hold the client certificate under tls.crt and its key under tls.key, as a kubernetes.io/tls Secret does; for a Secret with both PEMs under one key, use certificateKeySecret instead`},
		{"both PEMs under one key", &corev1.Secret{StringData: map[string]string{"tls.pem": "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n"}}, syncv1alpha1.ReasonSecretInvalid,
			`target.tls.certificateSecret: Secret "ferry-client-tls" has no key tls.crt: it must hold the client certificate under tls.crt and its key under tls.key, as a kubernetes.io/tls Secret does; for a Secret with both PEMs under one key, use certificateKeySecret instead`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := setup(t, "orders", func(st *syncv1alpha1.SyncTask) {
				st.Spec.Target.TLS = &syncv1alpha1.TLS{Enabled: true, CertificateSecret: "ferry-client-tls"}
			})
			if c.secret != nil {
				c.secret.Namespace, c.secret.Name = ns, "ferry-client-tls"
				if err := env.Client.Create(testCtx(t), c.secret); err != nil {
					t.Fatal(err)
				}
			}
			r, _ := newReconciler()
			reconcile(t, r, ns, "orders")
			want := c.want
			if strings.Contains(want, "%s") {
				want = fmt.Sprintf(want, ns)
			}
			cond := meta.FindStatusCondition(getTask(t, ns, "orders").Status.Conditions, syncv1alpha1.ConditionReady)
			if cond == nil || cond.Reason != c.reason || cond.Message != want {
				t.Errorf("Ready = %+v, want reason %s, message\n%s", cond, c.reason, want)
			}
		})
	}
}
