package ferretdb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/mongoferry/mongoferry/internal/freeport"
)

// Postgres is a throwaway PostgreSQL server that asks every connection
// for a password (scram-sha-256): the storage of a FerretDB started with
// Options.PostgreSQL, which then accepts only clients that authenticate
// with PLAIN as a PostgreSQL user (FerretDB v1 hands PLAIN credentials to
// PostgreSQL). It runs from the PostgreSQL binaries on this machine
// (initdb and postgres on PATH or under /usr/lib/postgresql), as the
// postgres system user when run as root, which PostgreSQL refuses.
type Postgres struct {
	// Addr is host:port.
	Addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// ErrNoPostgres means no PostgreSQL binaries were found.
var ErrNoPostgres = errors.New("PostgreSQL not found: install it (Debian: apt-get install postgresql) to run the PLAIN authentication tests")

// pgBinary finds a PostgreSQL program.
func pgBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	if len(matches) == 0 {
		return "", ErrNoPostgres
	}
	return matches[len(matches)-1], nil
}

// StartPostgres initialises and starts a server whose only user is
// username with password; the caller must call Stop.
func StartPostgres(ctx context.Context, username, password string) (*Postgres, error) {
	initdb, err := pgBinary("initdb")
	if err != nil {
		return nil, err
	}
	postgres, err := pgBinary("postgres")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "mongoferry-postgres-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{dir: dir}
	cred, err := p.runAs()
	if err != nil {
		p.Stop()
		return nil, err
	}
	pwFile := filepath.Join(dir, "pw")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		p.Stop()
		return nil, err
	}
	if cred != nil {
		for _, f := range []string{dir, pwFile} {
			if err := os.Chown(f, int(cred.Uid), int(cred.Gid)); err != nil {
				p.Stop()
				return nil, err
			}
		}
	}
	data := filepath.Join(dir, "data")
	init := exec.CommandContext(ctx, initdb, "-D", data, "--auth=scram-sha-256", "--username="+username, "--pwfile="+pwFile, "-E", "UTF8", "--no-sync")
	init.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := init.CombinedOutput(); err != nil {
		p.Stop()
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	_ = os.Remove(pwFile)
	port, err := freeport.Port("127.0.0.1")
	if err != nil {
		p.Stop()
		return nil, err
	}
	p.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p.cmd = exec.Command(postgres, "-D", data, "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	log, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		p.Stop()
		return nil, err
	}
	defer func() { _ = log.Close() }()
	p.cmd.Stdout, p.cmd.Stderr = log, log
	if err := p.cmd.Start(); err != nil {
		p.Stop()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err == nil {
			_ = c.Close()
			return p, nil
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			p.Stop()
			return nil, fmt.Errorf("postgres exited at start:\n%s", b)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("postgres did not listen on %s within 30s", p.Addr)
		}
	}
}

// runAs is the credential of the postgres system user when this process
// runs as root (PostgreSQL refuses to run as root), else nil.
func (p *Postgres) runAs() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs the postgres system user: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// URL is the PostgreSQL URL FerretDB stores its data through, without
// credentials: FerretDB connects with each client's PLAIN credentials.
func (p *Postgres) URL() string {
	u := url.URL{Scheme: "postgres", Host: p.Addr, Path: "/postgres"}
	return u.String()
}

// Stop stops the server and removes its files.
func (p *Postgres) Stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	_ = os.RemoveAll(p.dir)
}
