package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
)

// TestSpecTerms: the engine's connection errors, produced here by a real
// FerretDB that listens with TLS and requires a password, name task-file
// fields; in the SyncTask's status they name the fields a SyncTask user
// sets (the controller writes the task file from the SyncTask).
func TestSpecTerms(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	ctx := context.Background()
	_, files := testserver.MustCA(t, "server CA")
	_, other := testserver.MustCA(t, "another CA")
	srv := testserver.Start(t, testserver.Options{Username: "writer", Password: "wr1ter-pw",
		TLS: &testserver.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey, Client: files.ClientConfig}})
	t.Setenv("MONGOFERRY_TEST_PASSWORD", "not-the-password")
	tests := []struct {
		name    string
		role    string
		ep      config.Endpoint
		want    []string
		notWant []string
	}{
		{"a CA that did not sign the server's certificate", "source",
			config.Endpoint{URI: srv.URI, TLS: &config.TLS{Enabled: true, CAFile: other.CA}},
			[]string{"spec.source.tls.caSecret", "spec.source.tls.certificateKeySecret"}, []string{"caFile", "certificateKeyFile"}},
		{"a client certificate in two files", "target",
			config.Endpoint{URI: srv.URI, TLS: &config.TLS{Enabled: true, CAFile: other.CA, CertificateFile: files.ClientCert, PrivateKeyFile: files.ClientKey}},
			[]string{"spec.target.tls.caSecret", "spec.target.tls.certificateSecret"}, []string{"caFile", "privateKeyFile", "certificateFile"}},
		{"a wrong password", "target",
			config.Endpoint{URI: srv.URI, Username: "writer", PasswordEnv: "MONGOFERRY_TEST_PASSWORD", TLS: &config.TLS{Enabled: true, CAFile: files.CA}},
			[]string{"the username and password in spec.target.credentialsSecret", "spec.target.authSource"}, []string{"passwordEnv", "passwordFile"}},
		{"nothing listening", "source",
			config.Endpoint{URI: "mongodb://127.0.0.1:1/?directConnection=true"},
			[]string{"spec.source.uri"}, []string{"check source.uri"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := conn.Open(ctx, tc.role, tc.ep, conn.Options{ConnectTimeout: time.Second})
			if err == nil {
				t.Fatal("connected; want an error")
			}
			got := specTerms(err.Error())
			t.Log(got)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q\nlacks %q (engine's words: %q)", got, w, err)
				}
			}
			for _, nw := range tc.notWant {
				if strings.Contains(got, nw) {
					t.Errorf("%q\nstill names %q", got, nw)
				}
			}
		})
	}
	// Messages already in the SyncTask's terms are left as they are.
	const own = `spec.source.tls.caSecret: Secret "mongo-ca" not found; spec.target.uri is empty`
	if got := specTerms(own); got != own {
		t.Errorf("specTerms(%q) = %q", own, got)
	}
}
