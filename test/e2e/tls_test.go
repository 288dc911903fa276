package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// TestTLS runs `ferry run` against a source and a target that listen with
// TLS only (FerretDB --listen-tls, certificates made here): the source
// requires a client certificate signed by the CA, the target only proves
// its identity. A task that trusts the CA and presents the client
// certificate copies everything; a wrong CA, a missing client certificate
// and a plain connection each fail with a message naming the endpoint and
// what to check, and write nothing. The client certificate works as one
// PEM (certificateKeyFile) and as a certificate and its key in two files
// (certificateFile and privateKeyFile, as a kubernetes.io/tls Secret holds
// them); a key that is not the certificate's fails before any connection.
func TestTLS(t *testing.T) {
	_, files := testserver.MustCA(t, "mongoferry test CA")
	_, otherFiles := testserver.MustCA(t, "another CA")
	src := testserver.Start(t, testserver.Options{TLS: &testserver.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey,
		CAFile: files.CA, Client: files.ClientConfig}})
	dst := testserver.Start(t, testserver.Options{TLS: &testserver.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey,
		Client: files.ClientConfig}})
	servers := map[string]*mongo.Client{"source": src.MustClient(t), "target": dst.MustClient(t)}
	docs := make([]any, 300)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: fmt.Sprintf("secret-%d", i)}}
	}
	insertDocs(t, servers["source"], "app", "orders", docs)

	bin := ferryBinary(t)
	task := func(srcTLS, dstTLS string) string {
		return fmt.Sprintf("name: tls\nmode: full\nsource: {uri: %q%s}\ntarget: {uri: %q%s}\nverify: {mode: hash}\n", src.URI, srcTLS, dst.URI, dstTLS)
	}
	good := fmt.Sprintf(", tls: {enabled: true, caFile: %q, certificateKeyFile: %q}", files.CA, files.Client)
	serverOnly := fmt.Sprintf(", tls: {enabled: true, caFile: %q}", files.CA)
	// pair is the shape of a kubernetes.io/tls Secret's tls.crt and tls.key.
	pair := func(cert, key string) string {
		return fmt.Sprintf(", tls: {enabled: true, caFile: %q, certificateFile: %q, privateKeyFile: %q}", files.CA, cert, key)
	}
	cases := []struct {
		name     string
		src, dst string
		want     []string // in stderr, for a failure
	}{
		{"wrong CA for the target", good, fmt.Sprintf(", tls: {enabled: true, caFile: %q}", otherFiles.CA),
			[]string{"target: TLS handshake failed", "certificate signed by unknown authority", "check target.tls.caFile"}},
		{"no client certificate for the source", serverOnly, serverOnly,
			[]string{"source: TLS handshake failed", "certificate required", "source.tls.certificateKeyFile"}},
		{"client certificate from another CA", fmt.Sprintf(", tls: {enabled: true, caFile: %q, certificateKeyFile: %q}", files.CA, otherFiles.Client), serverOnly,
			[]string{"source: TLS handshake failed", "source.tls.certificateKeyFile"}},
		{"TLS off for a TLS-only target", good, "",
			[]string{"target: deployment unreachable"}},
		{"a client certificate in two files with another certificate's key", pair(files.ClientCert, otherFiles.ClientKey), serverOnly,
			[]string{"source.tls.certificateFile and source.tls.privateKeyFile: tls: private key does not match public key"}},
		{"a client certificate in two files from another CA", pair(otherFiles.ClientCert, otherFiles.ClientKey), serverOnly,
			[]string{"source: TLS handshake failed", "source.tls.certificateFile and source.tls.privateKeyFile"}},
		{"a client certificate file without its key", fmt.Sprintf(", tls: {enabled: true, caFile: %q, certificateFile: %q}", files.CA, files.ClientCert), serverOnly,
			[]string{"source.tls.privateKeyFile: is required with certificateFile"}},
		{"verified, with a client certificate", good, serverOnly, nil},
		{"verified, with a client certificate and its key in two files", pair(files.ClientCert, files.ClientKey), serverOnly, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := databases(t, servers)
			stdout, stderr, code := runFerry(t, bin, writeFile(t, task(c.src, c.dst)), nil)
			if c.want == nil {
				if code != 0 {
					t.Fatalf("ferry run exited %d:\n%s%s", code, stdout, stderr)
				}
				assertSameDocs(t, servers["source"], "app.orders", servers["target"], "app.orders")
				// The next copy starts from the target as it was.
				for _, db := range databases(t, servers)["target"] {
					if !slices.Contains(before["target"], db) {
						if err := servers["target"].Database(db).Drop(context.Background()); err != nil {
							t.Fatal(err)
						}
					}
				}
				return
			}
			if strings.Contains(stderr, "BEGIN") || strings.Contains(stderr, "PRIVATE KEY") {
				t.Errorf("stderr holds PEM:\n%s", stderr)
			}
			if code == 0 {
				t.Fatalf("ferry run exited 0, want a failure:\n%s", stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not contain %q:\n%s", w, stderr)
				}
			}
			after := databases(t, servers)
			for name := range servers {
				if !slices.Equal(before[name], after[name]) {
					t.Errorf("%s server's databases changed from %v to %v", name, before[name], after[name])
				}
			}
		})
	}
}
