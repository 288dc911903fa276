// Package conn opens MongoDB clients for a task's endpoints: credentials
// from files or the environment, TLS, timeouts, a first ping whose failure
// is classified (unreachable, authentication), an identity check that
// refuses to use one deployment as both source and target (identity.go),
// and the server's profile read once from buildInfo, which decides how
// replay reads and writes it (ProbeProfile, profile.go).
package conn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// Sentinel errors a user acts on.
var (
	// ErrUnreachable: no server answered at the endpoint's address.
	ErrUnreachable = errors.New("deployment unreachable")
	// ErrAuthentication: the server refused the credentials.
	ErrAuthentication = errors.New("authentication failed")
	// ErrSameDeployment: source and target are one deployment.
	ErrSameDeployment = errors.New("source and target are the same deployment")
	// ErrTLS: the TLS handshake failed (an untrusted server certificate,
	// a missing or refused client certificate).
	ErrTLS = errors.New("TLS handshake failed")
)

// Options tunes Open.
type Options struct {
	// AppName is reported to the server.
	AppName string
	// ConnectTimeout bounds server selection and the first ping; 10s when
	// zero.
	ConnectTimeout time.Duration
	// MaxPoolSize caps connections; the driver's default when zero.
	MaxPoolSize uint64
	// Password, when not empty, is the endpoint's password, used instead
	// of its passwordFile or passwordEnv (for a caller that holds it, such
	// as the operator reading the source's shards).
	Password string
	// CAPEM, CertificateKeyPEM, CertificatePEM and PrivateKeyPEM, when not
	// empty, are the PEM of the endpoint's tls.caFile,
	// tls.certificateKeyFile, tls.certificateFile and tls.privateKeyFile,
	// used instead of reading those files (for a caller that holds them,
	// such as the operator reading a SyncTask's TLS Secrets).
	CAPEM, CertificateKeyPEM, CertificatePEM, PrivateKeyPEM []byte
}

// Open connects to an endpoint and pings it. role ("source" or "target")
// names the endpoint in errors, which never contain credentials.
func Open(ctx context.Context, role string, e config.Endpoint, o Options) (*mongo.Client, error) {
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = 10 * time.Second
	}
	opts := options.Client().ApplyURI(e.URI).
		SetServerSelectionTimeout(o.ConnectTimeout).
		SetConnectTimeout(o.ConnectTimeout)
	if o.AppName != "" {
		opts.SetAppName(o.AppName)
	}
	if o.MaxPoolSize > 0 {
		opts.SetMaxPoolSize(o.MaxPoolSize)
	}
	if e.Username != "" || e.AuthMechanism != "" {
		cred, err := credential(role, e, o)
		if err != nil {
			return nil, err
		}
		opts.SetAuth(cred)
	}
	if e.TLS != nil && e.TLS.Enabled {
		tc, err := tlsConfig(role, e.TLS, o)
		if err != nil {
			return nil, err
		}
		opts.SetTLSConfig(tc)
	}
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("%s.uri: %s", role, config.RedactError(err, e.URI))
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("%s.uri: %s", role, config.RedactError(err, e.URI))
	}
	pctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	if err := client.Ping(pctx, nil); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, classify(role, e, err)
	}
	return client, nil
}

// credential is the endpoint's credential: its username with the password
// from o, passwordFile or passwordEnv, its authMechanism (the server's
// choice when empty) and its authSource, else the URI's authSource
// option, else the mechanism's default (config.DefaultAuthSource).
func credential(role string, e config.Endpoint, o Options) (options.Credential, error) {
	cred := options.Credential{Username: e.Username, AuthMechanism: string(e.AuthMechanism), AuthSource: e.AuthSource}
	if e.Username != "" {
		password := o.Password
		if password == "" {
			var err error
			if password, err = readPassword(role, e); err != nil {
				return cred, err
			}
		}
		cred.Password, cred.PasswordSet = password, password != ""
	}
	if cred.AuthSource == "" {
		if cs, err := connstring.Parse(e.URI); err == nil && cs.AuthSourceSet {
			cred.AuthSource = cs.AuthSource
		} else {
			cred.AuthSource = config.DefaultAuthSource(e.AuthMechanism)
		}
	}
	return cred, nil
}

func classify(role string, e config.Endpoint, err error) error {
	msg := config.RedactError(err, e.URI)
	addr := config.Redact(e.URI)
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "x509:") || strings.Contains(low, "tls:"):
		return fmt.Errorf("%s: %w at %s: %s; check %s.tls.caFile (the CA that signed the server's certificate) and, when the server asks for a client certificate, %s",
			role, ErrTLS, addr, msg, role, clientCertificateFields(role, e.TLS))
	case strings.Contains(low, "auth"):
		return fmt.Errorf("%s: %w at %s: %s; check %s.username and the password (Secret, passwordFile or passwordEnv), %s.authSource and %s.authMechanism",
			role, ErrAuthentication, addr, msg, role, role, role)
	default:
		return fmt.Errorf("%s: %w: nothing answered at %s within the connect timeout (%s); check %s.uri's host and port and that the server is running",
			role, ErrUnreachable, addr, msg, role)
	}
}

// clientCertificateFields names the fields that give an endpoint's client
// certificate: certificateFile and privateKeyFile when it uses them,
// certificateKeyFile otherwise.
func clientCertificateFields(role string, t *config.TLS) string {
	if t != nil && (t.CertificateFile != "" || t.PrivateKeyFile != "") {
		return role + ".tls.certificateFile and " + role + ".tls.privateKeyFile"
	}
	return role + ".tls.certificateKeyFile"
}

func readPassword(role string, e config.Endpoint) (string, error) {
	switch {
	case e.PasswordFile != "":
		b, err := os.ReadFile(e.PasswordFile)
		if err != nil {
			return "", fmt.Errorf("%s.passwordFile: %w", role, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	case e.PasswordEnv != "":
		p, ok := os.LookupEnv(e.PasswordEnv)
		if !ok {
			return "", fmt.Errorf("%s.passwordEnv: environment variable %s is not set", role, e.PasswordEnv)
		}
		return p, nil
	}
	return "", nil
}

func tlsConfig(role string, t *config.TLS, o Options) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // user's explicit choice
	if pem := o.CAPEM; len(pem) > 0 || t.CAFile != "" {
		if len(pem) == 0 {
			var err error
			if pem, err = os.ReadFile(t.CAFile); err != nil {
				return nil, fmt.Errorf("%s.tls.caFile: %w", role, err)
			}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.tls.caFile: %s holds no PEM certificate", role, t.CAFile)
		}
		tc.RootCAs = pool
	}
	if pem := o.CertificateKeyPEM; len(pem) > 0 || t.CertificateKeyFile != "" {
		if len(pem) == 0 {
			var err error
			if pem, err = os.ReadFile(t.CertificateKeyFile); err != nil {
				return nil, fmt.Errorf("%s.tls.certificateKeyFile: %w", role, err)
			}
		}
		cert, err := tls.X509KeyPair(pem, pem)
		if err != nil {
			return nil, fmt.Errorf("%s.tls.certificateKeyFile: %w", role, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if len(o.CertificatePEM) > 0 || len(o.PrivateKeyPEM) > 0 || t.CertificateFile != "" || t.PrivateKeyFile != "" {
		cert, err := keyPair(role, t, o)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// keyPair loads a client certificate from two PEMs: tls.certificateFile and
// tls.privateKeyFile (or the caller's copies of them). Its errors name the
// fields, never the PEM.
func keyPair(role string, t *config.TLS, o Options) (tls.Certificate, error) {
	read := func(held []byte, file, field, other string) ([]byte, error) {
		if len(held) > 0 {
			return held, nil
		}
		if file == "" {
			return nil, fmt.Errorf("%s.tls.%s: is required with %s.tls.%s: a client certificate needs both certificateFile and privateKeyFile", role, field, role, other)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%s.tls.%s: %w", role, field, err)
		}
		return b, nil
	}
	certPEM, err := read(o.CertificatePEM, t.CertificateFile, "certificateFile", "privateKeyFile")
	if err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := read(o.PrivateKeyPEM, t.PrivateKeyFile, "privateKeyFile", "certificateFile")
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s.tls.certificateFile and %s.tls.privateKeyFile: %w", role, role, err)
	}
	return cert, nil
}

// WriteConcern is the write concern a client opened on uri writes with
// (its w and journal options); nil when the URI sets neither and
// the server's default applies.
func WriteConcern(uri string) *writeconcern.WriteConcern {
	return options.Client().ApplyURI(uri).WriteConcern
}
