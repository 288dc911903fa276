package conn

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestOpenClientCertificate connects to a FerretDB that listens with TLS
// only and requires a client certificate signed by its CA
// (--listen-tls-ca-file), presenting the certificate as one PEM
// (certificateKeyFile), as two files (certificateFile and privateKeyFile,
// a kubernetes.io/tls Secret's tls.crt and tls.key as the workers mount
// them) and as two PEMs held in memory (the operator's own connection). A
// client that connects reads the document the test wrote; a wrong pair
// fails with a message naming the fields and holding no PEM.
func TestOpenClientCertificate(t *testing.T) {
	_, files := testserver.MustCA(t, "mongoferry test CA")
	_, otherFiles := testserver.MustCA(t, "another CA")
	srv := testserver.Start(t, testserver.Options{TLS: &testserver.TLS{CertFile: files.ServerCert, KeyFile: files.ServerKey,
		CAFile: files.CA, Client: files.ClientConfig}})
	ctx := context.Background()
	if _, err := srv.MustClient(t).Database("app").Collection("orders").InsertOne(ctx, bson.D{{Key: "_id", Value: "o-1"}}); err != nil {
		t.Fatal(err)
	}
	read := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name string
		tls  config.TLS
		opts Options
		want string // in the error; "" for a connection
		is   error
	}{
		{name: "one PEM", tls: config.TLS{CertificateKeyFile: files.Client}},
		{name: "two files", tls: config.TLS{CertificateFile: files.ClientCert, PrivateKeyFile: files.ClientKey}},
		{name: "two PEMs in memory", opts: Options{CertificatePEM: read(files.ClientCert), PrivateKeyPEM: read(files.ClientKey)}},
		{name: "another certificate's key", tls: config.TLS{CertificateFile: files.ClientCert, PrivateKeyFile: otherFiles.ClientKey},
			want: "source.tls.certificateFile and source.tls.privateKeyFile: tls: private key does not match public key"},
		{name: "the key as the certificate", opts: Options{CertificatePEM: read(files.ClientKey), PrivateKeyPEM: read(files.ClientKey)},
			want: "source.tls.certificateFile and source.tls.privateKeyFile: tls: failed to find certificate PEM data in certificate input"},
		{name: "a key file that is not there", tls: config.TLS{CertificateFile: files.ClientCert, PrivateKeyFile: filepath.Join(t.TempDir(), "tls.key")},
			want: "source.tls.privateKeyFile: open "},
		{name: "a certificate from another CA", tls: config.TLS{CertificateFile: otherFiles.ClientCert, PrivateKeyFile: otherFiles.ClientKey},
			want: "when the server asks for a client certificate, source.tls.certificateFile and source.tls.privateKeyFile", is: ErrTLS},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tc := c.tls
			tc.Enabled, tc.CAFile = true, files.CA
			c.opts.ConnectTimeout = 5 * time.Second
			client, err := Open(ctx, "source", config.Endpoint{URI: srv.URI, TLS: &tc}, c.opts)
			if c.want == "" {
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer func() { _ = client.Disconnect(ctx) }()
				var doc bson.M
				if err := client.Database("app").Collection("orders").FindOne(ctx, bson.D{}).Decode(&doc); err != nil || doc["_id"] != "o-1" {
					t.Errorf("read %v, %v; want the document o-1", doc, err)
				}
				return
			}
			if err == nil {
				_ = client.Disconnect(ctx)
				t.Fatalf("Open connected, want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("error %q, want it to contain %q and no PEM", err, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, c.is)
			}
		})
	}
}
