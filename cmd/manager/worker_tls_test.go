package main

import (
	"context"
	"flag"
	"log/slog"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mongoferry/mongoferry/internal/envtestutil"
)

// TestWorkerTLSFlag: --worker-tls is off by default; on, the manager
// makes the workers' CA Secret in the named namespace at start and uses
// the same CA at the next start; with no namespace to put it in, it says
// which flag to set.
func TestWorkerTLSFlag(t *testing.T) {
	o := bindFlags(flag.NewFlagSet("manager", flag.ContinueOnError))
	if o.workerTLS || o.workerTLSSecret != DefaultWorkerCASecret {
		t.Fatalf("defaults: --worker-tls=%v --worker-tls-secret=%s", o.workerTLS, o.workerTLSSecret)
	}
	env := envtestutil.Start(t)
	ctx := context.Background()
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	t.Setenv("POD_NAMESPACE", "")
	if _, err := workerTLS(ctx, &options{workerTLS: true, workerTLSSecret: "ca"}, env.Config, scheme, log); err == nil || !strings.Contains(err.Error(), "--worker-tls-namespace") {
		t.Errorf("no namespace: %v, want an error naming --worker-tls-namespace", err)
	}
	ns := env.Namespace(t)
	o = &options{workerTLS: true, workerTLSSecret: "worker-ca", workerTLSNamespace: ns}
	first, err := workerTLS(ctx, o, env.Config, scheme, log)
	if err != nil {
		t.Fatal(err)
	}
	second, err := workerTLS(ctx, o, env.Config, scheme, log)
	if err != nil {
		t.Fatal(err)
	}
	if string(first.CA.CertPEM) != string(second.CA.CertPEM) {
		t.Error("the second start made a new CA")
	}
	var s corev1.Secret
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: "worker-ca"}, &s); err != nil || s.Type != corev1.SecretTypeTLS {
		t.Errorf("CA Secret: %v, type %s", err, s.Type)
	}
}
