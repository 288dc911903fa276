package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// TestShardedRunKilled kills `ferry run` on a 3-shard source with SIGKILL
// during the copy and at random moments of replay, under a live load
// through the router and with chunk migrations between the kills, and
// restarts it each time: every shard's subtask resumes from its own
// checkpoint, and the last run catches up, verifies and leaves the target
// equal to the union of the shards. Stand-ins as in
// TestShardedSourceBalancerOn.
func TestShardedRunKilled(t *testing.T) {
	ctx := context.Background()
	c := testserver.StartCluster(t, 3)
	dst := testserver.Start(t)
	ns := "app.k"
	var seed []bson.D
	var keys []int64
	for k := int64(0); k < 3000; k += 3 {
		seed = append(seed, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}, {Key: "pad", Value: strings.Repeat("s", 40)}})
		keys = append(keys, k)
	}
	if err := c.Insert(ctx, ns, seed...); err != nil {
		t.Fatal(err)
	}
	var shards strings.Builder
	for _, o := range c.Overrides() {
		fmt.Fprintf(&shards, "    - {name: %s, uri: %q}\n", o.Name, o.URI)
	}
	// rateLimit makes the copy last a few seconds: /status is polled every
	// 200 ms, and a copy of a few hundred documents at full speed can start
	// and end between two polls, so the kill meant for it would never come.
	yaml := writeFile(t, fmt.Sprintf(`name: sharded-killer
mode: fullAndIncremental
source:
  uri: %q
  kind: sharded
  shards:
%starget: {uri: %q}
cache: {batchSize: 100}
rateLimit: 300
verify: {mode: hash}
`, c.RouterURI(), shards.String(), dst.URI))
	bin := ferryBinary(t)
	addr := testutil.FreeAddr(t)
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "run", "-f", yaml, "--progress", "none", "--listen", addr)
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd
	}
	status := func() engine.Status {
		s, _ := getStatus(addr)
		return s
	}

	load := testserver.NewClusterLoad(c, ns, keys, 3001, 20)
	// Moved chunks keep being written, across kills: a recipient's
	// subtask holds their writes until the donor's has applied (and saved)
	// everything before the move.
	load.Quiet = -1
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadErr := make(chan error, 1)
	go func() { loadErr <- load.Run(loadCtx, rand.New(rand.NewPCG(4, 4))) }()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	cmd := start()
	waitFor(t, "the copy to start", time.Minute, func() bool { return status().Phase == engine.PhaseFullSync })
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	moves := [][3]int64{{0, 500, 2}, {1000, 1400, 0}, {2100, 2600, 1}}
	for i, m := range moves {
		cmd = start()
		waitFor(t, "replay to run", 3*time.Minute, func() bool { return status().Phase == engine.PhaseStreaming })
		if i == 0 {
			if s := status(); len(s.Shards) != 3 {
				t.Fatalf("/status lists %d shards, want 3", len(s.Shards))
			}
		}
		if _, err := load.Move(ctx, m[0], m[1], int(m[2])); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(500+rng.IntN(3000)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	stopLoad()
	if err := <-loadErr; err != nil {
		t.Fatalf("load: %v", err)
	}
	last := exec.Command(bin, "run", "-f", yaml, "--progress", "none", "--listen", "", "--until-caught-up")
	out, err := last.CombinedOutput()
	if err != nil {
		dumpShardedDoc(t, c, dst, ns, string(out))
		t.Fatalf("final run: %v\n%s", err, out)
	}
	ins, upd, del := load.Counts()
	t.Logf("killed 4 times; live load %d inserts, %d updates, %d deletes; 3 migrations", ins, upd, del)
	assertSameDocs(t, c.RouterClient(), ns, dst.MustClient(t), ns)
}

// dumpShardedDoc logs, for each document a verification report says
// changed, its state on the router and the target and every shard's oplog
// entries about it.
func dumpShardedDoc(t *testing.T, c *testserver.Cluster, dst *testserver.Server, ns, report string) {
	t.Helper()
	db, coll := split(ns)
	for _, line := range strings.Split(report, "\n") {
		i := strings.Index(line, `{"$numberLong":"`)
		differs := strings.Contains(line, "changed") || strings.Contains(line, "extra") || strings.Contains(line, "missing")
		if !differs || i < 0 {
			continue
		}
		var k int64
		if _, err := fmt.Sscanf(line[i+len(`{"$numberLong":"`):], "%d", &k); err != nil {
			continue
		}
		var want, got bson.Raw
		want, _ = c.RouterClient().Database(db).Collection(coll).FindOne(context.Background(), bson.D{{Key: "_id", Value: k}}).Raw()
		got, _ = dst.MustClient(t).Database(db).Collection(coll).FindOne(context.Background(), bson.D{{Key: "_id", Value: k}}).Raw()
		t.Logf("_id %d: router %s target %s", k, want, got)
		for i := range c.Shards {
			cur, err := c.ShardClient(i).Database("local").Collection("oplog.rs").Find(context.Background(), bson.D{{Key: "$or", Value: bson.A{
				bson.D{{Key: "o._id", Value: k}}, bson.D{{Key: "o2._id", Value: k}}}}})
			if err != nil {
				continue
			}
			for cur.Next(context.Background()) {
				t.Logf("  %s: %s", c.Names[i], cur.Current)
			}
		}
	}
}
