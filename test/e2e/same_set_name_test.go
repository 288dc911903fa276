package e2e

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/engine/conn"
)

// TestSameSetNameDeployments: two FerretDB servers on one host, both
// started with --repl-set-name=rs0, are two deployments: a task copies
// from one to the other and replays what the source writes meanwhile.
// The same server under two addresses is still refused before anything
// is written.
func TestSameSetNameDeployments(t *testing.T) {
	src := testserver.Start(t, testserver.Options{ReplSetName: "rs0"})
	dst := testserver.Start(t, testserver.Options{ReplSetName: "rs0"})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	insertDocs(t, sc, "app", "c", mixedIDDocs(500))

	t.Run("two servers named rs0 copy and replay", func(t *testing.T) {
		task := newTask(t, "rs0-pair", src, dst, func(t *config.Task) {
			t.Mode = config.ModeFullAndIncremental
			t.Verify.Mode = config.VerifyNone
		})
		e, stop := startEngine(t, task, engineOpts())
		waitFor(t, "replay to start", 2*time.Minute, func() bool { return e.Status().Phase == engine.PhaseStreaming })
		coll := sc.Database("app").Collection("c")
		ctx := context.Background()
		for i := range 20 {
			if _, err := coll.InsertOne(ctx, doc("_id", "live", "n", i)); err != nil && i == 0 {
				t.Fatal(err)
			}
			if _, err := coll.DeleteOne(ctx, doc("_id", "live")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := coll.InsertOne(ctx, doc("_id", "after", "n", 1)); err != nil {
			t.Fatal(err)
		}
		waitEngineCaughtUp(t, e, sc, 2*time.Minute)
		if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("run: %v", err)
		}
		assertSameDocs(t, sc, "app.c", dc, "app.c")
	})

	t.Run("one rs0 server under two addresses is refused", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(src.Addr)
		task := newTask(t, "rs0-self", src, src, func(t *config.Task) {
			t.Target.URI = "mongodb://[::ffff:127.0.0.1]:" + port + "/?directConnection=true"
		})
		e, err := engine.Open(context.Background(), task, engineOpts())
		if err == nil {
			e.Close()
			t.Fatal("a task from a server to itself (127.0.0.1 and ::ffff:127.0.0.1) was accepted")
		}
		if !errors.Is(err, conn.ErrSameDeployment) {
			t.Fatalf("open: %v, want ErrSameDeployment", err)
		}
	})
}
