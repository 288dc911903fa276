// Package servers starts the throwaway FerretDB servers (bin/ferretdb)
// that `ferry demo` and `ferry bench` run on: a source and a target on
// free loopback ports, removed when stopped; `ferry servers` (command.go)
// starts them for trying ferry by hand.
package servers

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mongoferry/mongoferry/internal/ferretdb"
)

// Pair is a source and a target server.
type Pair struct {
	Source, Target *ferretdb.Server
}

// StartPair starts a source server whose oplog holds sourceOplogBytes (no
// oplog when negative) and a target server without one.
func StartPair(ctx context.Context, sourceOplogBytes int64) (*Pair, error) {
	return StartPairWith(ctx, ferretdb.Options{OplogBytes: sourceOplogBytes})
}

// StartPairWith starts a source server with options o and a target
// server without an oplog.
func StartPairWith(ctx context.Context, o ferretdb.Options) (*Pair, error) {
	src, err := ferretdb.StartProcess(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("start the source server: %w", err)
	}
	dst, err := StartTarget(ctx)
	if err != nil {
		src.Stop()
		return nil, err
	}
	return &Pair{Source: src, Target: dst}, nil
}

// StartTarget starts a target server: no oplog, as nothing reads one.
func StartTarget(ctx context.Context) (*ferretdb.Server, error) {
	dst, err := ferretdb.StartProcess(ctx, ferretdb.Options{OplogBytes: -1})
	if err != nil {
		return nil, fmt.Errorf("start the target server: %w", err)
	}
	return dst, nil
}

// Stop stops both servers and removes their storage.
func (p *Pair) Stop() {
	p.Target.Stop()
	p.Source.Stop()
}

// Version is the servers' name and version, as the server binary tells
// it ("FerretDB v1.24.0").
func Version(ctx context.Context) string {
	bin, err := ferretdb.Binary()
	if err != nil {
		return "FerretDB (version unknown)"
	}
	b, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "FerretDB (" + filepath.Base(bin) + ", version unknown)"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "version:"); ok {
			return "FerretDB " + strings.TrimSpace(v)
		}
	}
	return "FerretDB"
}
