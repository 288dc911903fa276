// Package conn opens MongoDB clients for a task's endpoints: credentials
// from files or the environment, TLS, timeouts, a first ping whose failure
// is classified (unreachable, authentication), and an identity check that
// refuses to use one deployment as both source and target.
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

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

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
	if e.Username != "" {
		password := o.Password
		if password == "" {
			var err error
			if password, err = readPassword(role, e); err != nil {
				return nil, err
			}
		}
		cred := options.Credential{Username: e.Username, Password: password, PasswordSet: password != "", AuthSource: e.AuthSource}
		if cred.AuthSource == "" {
			cred.AuthSource = "admin"
		}
		opts.SetAuth(cred)
	}
	if e.TLS != nil && e.TLS.Enabled {
		tc, err := tlsConfig(role, e.TLS)
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

func classify(role string, e config.Endpoint, err error) error {
	msg := config.RedactError(err, e.URI)
	addr := config.Redact(e.URI)
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "auth"):
		return fmt.Errorf("%s: %w at %s: %s; check %s.username and the password (Secret, passwordFile or passwordEnv) and %s.authSource",
			role, ErrAuthentication, addr, msg, role, role)
	default:
		return fmt.Errorf("%s: %w: nothing answered at %s within the connect timeout (%s); check %s.uri's host and port and that the server is running",
			role, ErrUnreachable, addr, msg, role)
	}
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

func tlsConfig(role string, t *config.TLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // user's explicit choice
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.tls.caFile: %w", role, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.tls.caFile: %s holds no PEM certificate", role, t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertificateKeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertificateKeyFile, t.CertificateKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.tls.certificateKeyFile: %w", role, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Identity names the server process or replica set behind a client.
type Identity struct {
	SetName string
	Host    string
	PID     int64
}

// Identify asks the server who it is.
func Identify(ctx context.Context, c *mongo.Client) (Identity, error) {
	var id Identity
	var hello struct {
		SetName string `bson:"setName"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return id, fmt.Errorf("hello: %w", err)
	}
	id.SetName = hello.SetName
	var status struct {
		Host string `bson:"host"`
		PID  int64  `bson:"pid"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "serverStatus", Value: 1}}).Decode(&status); err == nil {
		id.Host, id.PID = status.Host, status.PID
	}
	return id, nil
}

// IsFerretDB reports whether the server is FerretDB (it names itself in
// buildInfo). FerretDB differs from MongoDB in ways the engine works
// around: its oplog can show entries out of order, and it stalls on large
// bulk writes.
func IsFerretDB(ctx context.Context, c *mongo.Client) bool {
	raw, err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil {
		return false
	}
	_, ferret := raw.Lookup("ferretdbVersion").StringValueOK()
	return ferret
}

// CheckDistinct fails with ErrSameDeployment when source and target are one
// server or one replica set, even when their URIs differ (localhost and
// 127.0.0.1, a DNS alias).
func CheckDistinct(ctx context.Context, source, target *mongo.Client) error {
	a, err := Identify(ctx, source)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	b, err := Identify(ctx, target)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	same := (a.SetName != "" && a.SetName == b.SetName && a.Host == b.Host) ||
		(a.PID != 0 && a.PID == b.PID && a.Host == b.Host)
	if same {
		return fmt.Errorf("target.uri: %w (server %s, pid %d): point target.uri at the destination deployment", ErrSameDeployment, a.Host, a.PID)
	}
	return nil
}
