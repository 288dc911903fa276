// Package ferretdb starts throwaway FerretDB servers for the demo,
// benchmarks and tests (internal/testserver wraps it for tests): each on a
// free loopback port, with its own temporary SQLite storage and an oplog
// collection (local.oplog.rs) already created. Cluster (cluster.go) is the
// sharded-cluster stand-in of several such servers with chunks that move,
// ClusterLoad its live load (clusterload.go), and CA a certificate
// authority for servers and clients that speak TLS (tls.go).
//
// The server binary is built by `make ferretdb` into bin/ferretdb; set
// MONGOFERRY_FERRETDB to use another one.
package ferretdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mongoferry/mongoferry/internal/freeport"
	"github.com/mongoferry/mongoferry/internal/reporoot"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// DefaultOplogBytes is the capped size of the oplog collection created on a
// new server. FerretDB re-scans the whole oplog on every tailer re-open, so
// test oplogs are kept small.
const DefaultOplogBytes = 8 << 20

// Options configures a server.
type Options struct {
	// Host is the loopback address to listen on; 127.0.0.1 when empty.
	Host string
	// OplogBytes is the capped size of local.oplog.rs; DefaultOplogBytes
	// when zero, no oplog when negative.
	OplogBytes int64
	// Username and Password, when set, create that user and enforce
	// authentication.
	Username, Password string
	// Dir keeps the storage in this directory (it survives Stop); a new
	// temporary directory when empty.
	Dir string
	// LogFile receives the server's output; discarded when empty.
	LogFile string
	// ReplSetName, when set, starts the server with --repl-set-name: hello
	// then reports that set name, with the server as its only host.
	ReplSetName string
	// TLS, when set, makes the server listen with TLS only.
	TLS *TLS
	// CappedCleanup is how often the server trims its capped collections
	// (the oplog): every second when zero, so that a small test oplog stays
	// near its capped size. Each pass walks every page of the oplog's
	// database (SQLite's dbstat) whether or not anything is trimmed: with
	// 50,000 entries of 1.2 KB held, about 0.5 CPU-s per second.
	CappedCleanup time.Duration
	// PostgreSQL, when set, is the URL of the PostgreSQL server (see
	// StartPostgres) that stores the data instead of SQLite. FerretDB
	// then authenticates clients with PLAIN only, as PostgreSQL users:
	// Username and Password are such a user's, for the test's clients.
	PostgreSQL string
}

// Server is a running FerretDB process.
type Server struct {
	// Addr is host:port.
	Addr string
	// URI is a mongodb:// URI without credentials.
	URI string
	// DebugAddr is host:port of the server's debug handler, which serves
	// its Prometheus metrics at /debug/metrics (requests by command).
	DebugAddr string

	opts    Options
	bin     string
	dir     string
	tempDir string
	stop    sync.Once

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Binary returns the path of the FerretDB binary, or an error that says how
// to build it: MONGOFERRY_FERRETDB, else bin/ferretdb at the repository's
// root (internal/reporoot).
func Binary() (string, error) {
	if p := os.Getenv("MONGOFERRY_FERRETDB"); p != "" {
		return p, nil
	}
	root, err := reporoot.Find()
	if errors.Is(err, reporoot.ErrNotFound) {
		return "", errors.New("FerretDB binary not found: run `make ferretdb` in the repository (or set MONGOFERRY_FERRETDB)")
	} else if err != nil {
		return "", err
	}
	p := filepath.Join(root, "bin", "ferretdb")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("FerretDB binary not found at %s: run `make ferretdb` (or set MONGOFERRY_FERRETDB)", p)
	}
	return p, nil
}

// StartProcess starts a server; the caller must call Stop.
func StartProcess(ctx context.Context, o Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.OplogBytes == 0 {
		o.OplogBytes = DefaultOplogBytes
	}
	s := &Server{opts: o, bin: bin}
	s.dir = o.Dir
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "mongoferry-ferretdb-"); err != nil {
			return nil, err
		}
		s.tempDir = s.dir
	}
	if err := os.MkdirAll(filepath.Join(s.dir, "data"), 0o755); err != nil {
		return nil, err
	}
	// A port found free can be taken by another process before the server
	// binds it; a fresh pair of ports is tried then.
	for attempt := 1; ; attempt++ {
		port, err := freeport.Port(o.Host)
		if err != nil {
			return nil, err
		}
		s.Addr = net.JoinHostPort(o.Host, strconv.Itoa(port))
		s.URI = "mongodb://" + s.Addr + "/?directConnection=true"
		err = s.launch(ctx)
		if err == nil {
			break
		}
		if attempt < 3 && strings.Contains(err.Error(), "address already in use") {
			continue
		}
		s.Stop()
		return nil, err
	}
	if o.OplogBytes > 0 {
		if err := s.CreateOplog(ctx, o.OplogBytes); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// launch starts the process on s.Addr and s.dir and waits until it answers.
func (s *Server) launch(ctx context.Context) error {
	o := s.opts
	debugPort, err := freeport.Port(o.Host)
	if err != nil {
		return err
	}
	s.DebugAddr = net.JoinHostPort(o.Host, strconv.Itoa(debugPort))
	plain := s.Addr
	if o.TLS != nil {
		plain = ""
	}
	storage := []string{"--handler=sqlite", "--sqlite-url=file:" + filepath.Join(s.dir, "data") + "/"}
	if o.PostgreSQL != "" {
		storage = []string{"--handler=postgresql", "--postgresql-url=" + o.PostgreSQL}
	}
	cleanup := o.CappedCleanup
	if cleanup <= 0 {
		cleanup = time.Second
	}
	args := append(storage,
		"--state-dir="+s.dir,
		"--listen-addr="+plain,
		"--debug-addr="+s.DebugAddr,
		"--telemetry=disable",
		"--log-level=warn",
		// Trim capped collections (the oplog) every second (unless told
		// otherwise) instead of every minute: FerretDB scans the whole
		// oplog on every tailer re-open, so an oplog must stay near its
		// capped size.
		"--test-capped-cleanup-interval="+cleanup.String(),
	)
	if o.ReplSetName != "" {
		args = append(args, "--repl-set-name="+o.ReplSetName)
	}
	if o.TLS != nil {
		args = append(args, "--listen-tls="+s.Addr, "--listen-tls-cert-file="+o.TLS.CertFile, "--listen-tls-key-file="+o.TLS.KeyFile)
		if o.TLS.CAFile != "" {
			args = append(args, "--listen-tls-ca-file="+o.TLS.CAFile)
		}
	}
	if o.Username != "" && o.PostgreSQL == "" {
		args = append(args, "--test-enable-new-auth", "--setup-database=admin",
			"--setup-username="+o.Username, "--setup-password="+o.Password)
	}
	cmd := exec.Command(s.bin, args...)
	var logBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if o.LogFile != "" {
		f, err := os.OpenFile(o.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		cmd.Stdout, cmd.Stderr = f, f
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	if err := s.waitReady(ctx, done); err != nil {
		s.Kill()
		return fmt.Errorf("FerretDB on %s did not become ready: %w\n%s", s.Addr, err, logBuf.String())
	}
	return nil
}

// Kill stops the server with SIGKILL and waits for it to exit, keeping its
// storage: Restart starts it again on the same address and data.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Restart starts a killed server again on the same address and storage
// directory, as a crashed mongod restarts on its dbpath.
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		// A debug port taken between choosing and binding it gets another;
		// the server's own address stays.
		if err = s.launch(ctx); err == nil || !strings.Contains(err.Error(), "address already in use") {
			return err
		}
	}
	return err
}

// Pid returns the server process's id, 0 when it is not running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Dir returns the directory holding the server's storage.
func (s *Server) Dir() string { return s.dir }

// AuthURI returns the URI with the server's credentials embedded, for test
// clients only.
func (s *Server) AuthURI() string {
	if s.opts.Username == "" {
		return s.URI
	}
	u := url.URL{Scheme: "mongodb", Host: s.Addr, Path: "/",
		User: url.UserPassword(s.opts.Username, s.opts.Password), RawQuery: "directConnection=true"}
	if s.opts.PostgreSQL != "" {
		u.RawQuery += "&authMechanism=PLAIN"
	}
	return u.String()
}

// Client connects a client with the server's credentials (and, for a TLS
// server, Options.TLS.Client).
func (s *Server) Client(ctx context.Context) (*mongo.Client, error) {
	opts := options.Client().ApplyURI(s.AuthURI()).SetTimeout(2 * time.Minute)
	if s.opts.TLS != nil {
		opts.SetTLSConfig(s.opts.TLS.Client)
	}
	return mongo.Connect(opts)
}

// MustClient connects a client for a test and disconnects it when the test
// ends.
func (s *Server) MustClient(t TB) *mongo.Client {
	t.Helper()
	c, err := s.Client(context.Background())
	if err != nil {
		t.Fatalf("connect %s: %v", s.Addr, err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

// TB is the part of testing.TB that MustClient uses: this package imports
// no testing, so that the binaries that start servers (the demo) link none.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(f func())
}

// Stop kills the server and removes its temporary storage.
func (s *Server) Stop() {
	s.stop.Do(func() {
		s.Kill()
		if s.tempDir != "" {
			_ = os.RemoveAll(s.tempDir)
		}
	})
}

func (s *Server) waitReady(ctx context.Context, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var last error
	for {
		select {
		case <-done:
			return errors.New("server exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
		c, err := s.Client(ctx)
		if err != nil {
			last = err
			continue
		}
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		err = c.Database("admin").RunCommand(pctx, bson.D{{Key: "ping", Value: 1}}).Err()
		pcancel()
		_ = c.Disconnect(context.Background())
		if err == nil {
			return nil
		}
		last = err
	}
}

// CreateOplog creates local.oplog.rs as a capped collection of size bytes;
// from then on the server logs its writes there.
func (s *Server) CreateOplog(ctx context.Context, size int64) error {
	c, err := s.Client(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	err = c.Database("local").RunCommand(ctx, bson.D{
		{Key: "create", Value: "oplog.rs"}, {Key: "capped", Value: true}, {Key: "size", Value: size},
	}).Err()
	if err != nil {
		return fmt.Errorf("create local.oplog.rs: %w", err)
	}
	return nil
}
