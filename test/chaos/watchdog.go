package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// node is one FerretDB server the harness may kill, restart or find wedged.
type node struct {
	name string
	srv  *testserver.Server
	// mu is held while the harness has the server down on purpose, and by
	// the watchdog while it restarts a wedged one.
	mu     sync.Mutex
	wedges int
}

// WedgeTimeout is how long a server may leave a probe unanswered, while its
// process lives, before the watchdog calls it wedged.
const WedgeTimeout = 20 * time.Second

// probe asks the server for a ping and a count of a collection of db, on a
// new connection straight to it (not through a proxy), within timeout.
func (n *node) probe(ctx context.Context, db string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := mongo.Connect(options.Client().ApplyURI(n.srv.URI).SetTimeout(timeout).SetServerSelectionTimeout(timeout))
	if err != nil {
		return err
	}
	defer func() { _ = c.Disconnect(context.Background()) }()
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	if _, err := c.Database(db).Collection(countersColl).CountDocuments(ctx, bson.D{}); err != nil {
		return fmt.Errorf("count: %w", err)
	}
	return nil
}

// watchdog probes the node every few seconds until ctx ends. A probe left
// unanswered for WedgeTimeout while the process runs is a wedge: it saves
// the server's goroutines (FerretDB's debug handler) to dumpDir, kills the
// server and restarts it on its storage, and calls onWedge.
func (n *node) watchdog(ctx context.Context, db func() string, dumpDir string, logf func(string, ...any), onWedge func()) {
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(3 * time.Second):
		}
		if !n.mu.TryLock() {
			continue // down on purpose
		}
		err := n.probe(ctx, db(), WedgeTimeout)
		if err == nil || ctx.Err() != nil || n.srv.Pid() == 0 {
			n.mu.Unlock()
			continue
		}
		n.wedges++
		dump := fmt.Sprintf("%s/%s-wedge-%d-goroutines.txt", dumpDir, n.name, n.wedges)
		saveGoroutines(n.srv.DebugAddr, dump)
		logf("watchdog: the %s server (FerretDB, pid %d) answered no ping and count for %s while running: a wedged test server, not a MongoFerry fault (%v); goroutines in %s; restarting it on its data directory",
			n.name, n.srv.Pid(), WedgeTimeout, err, dump)
		if err := n.srv.Restart(ctx); err != nil {
			logf("watchdog: restart the %s server: %v", n.name, err)
		}
		onWedge()
		n.mu.Unlock()
	}
}

func saveGoroutines(debugAddr, path string) {
	if debugAddr == "" {
		return
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + debugAddr + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		return
	}
	defer func() { _ = resp.Body.Close() }()
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	_, _ = io.Copy(f, resp.Body)
}
