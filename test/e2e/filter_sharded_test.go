package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
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

// TestFilteredShardedSyncKilled splits one tenant out of a collection of
// a 3-shard source (namespaces.filters): every shard's subtask applies
// the filter, to its copy and its replay. The source takes, through the
// router, inserts of every tenant, updates that move documents into and
// out of the filter ($set of tenant), updates that leave it alone and
// deletes, and three chunk migrations between kills (the migrated
// documents' entries are fromMigrate and skipped, filter or not).
// `ferry run` is killed with SIGKILL once during the copy and three times
// during replay. At the end the target holds find(filter) of the source
// (the router) byte for byte and nothing else, and the task's hash
// verification of the subset passes. Stand-ins as in
// TestShardedSourceBalancerOn.
func TestFilteredShardedSyncKilled(t *testing.T) {
	ctx := context.Background()
	c := testserver.StartCluster(t, 3)
	dst := testserver.Start(t)
	ns := "app.k"
	tenants := []string{"acme", "globex", "initech"}
	var seed []bson.D
	var keys []int64
	for k := int64(0); k < 3000; k += 3 {
		seed = append(seed, bson.D{{Key: "_id", Value: k}, {Key: "tenant", Value: tenants[(k/3)%3]}, {Key: "v", Value: int64(0)}, {Key: "pad", Value: strings.Repeat("s", 40)}})
		keys = append(keys, k)
	}
	if err := c.Insert(ctx, ns, seed...); err != nil {
		t.Fatal(err)
	}
	var shards strings.Builder
	for _, o := range c.Overrides() {
		fmt.Fprintf(&shards, "    - {name: %s, uri: %q}\n", o.Name, o.URI)
	}
	yaml := writeFile(t, fmt.Sprintf(`name: sharded-tenant-split
mode: fullAndIncremental
source:
  uri: %q
  kind: sharded
  shards:
%starget: {uri: %q}
namespaces:
  include: [app.k]
  filters:
  - namespace: app.k
    query: {tenant: globex}
cache: {batchSize: 100}
rateLimit: 300
verify: {mode: hash}
`, c.RouterURI(), shards.String(), dst.URI))
	bin := ferryBinary(t)
	addr := testutil.FreeAddr(t)

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	loadDone := make(chan error, 1)
	ops := map[string]int{}
	go func() {
		rng := rand.New(rand.NewPCG(39, 3))
		next := int64(3001)
		var err error
		for loadCtx.Err() == nil && err == nil {
			time.Sleep(40 * time.Millisecond)
			i := rng.IntN(len(keys))
			kind := ""
			switch n := rng.IntN(10); {
			case n < 3 || len(keys) < 100:
				kind = "insert"
				err = c.Insert(ctx, ns, bson.D{{Key: "_id", Value: next}, {Key: "tenant", Value: tenants[rng.IntN(3)]}, {Key: "v", Value: int64(0)}, {Key: "pad", Value: "live"}})
				keys = append(keys, next)
				next += 7
			case n < 6:
				kind = "move"
				err = c.Update(ctx, ns, keys[i], bson.D{{Key: "tenant", Value: tenants[rng.IntN(3)]}})
			case n < 9:
				kind = "set"
				err = c.Update(ctx, ns, keys[i], bson.D{{Key: "v", Value: int64(rng.IntN(1000))}})
			default:
				kind = "delete"
				err = c.Delete(ctx, ns, keys[i])
				keys[i] = keys[len(keys)-1]
				keys = keys[:len(keys)-1]
			}
			if err == nil {
				ops[kind]++
			}
		}
		loadDone <- err
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 39))
	cmd := startRun(t, bin, yaml, addr)
	waitFor(t, "the copy to start", time.Minute, func() bool { return phaseAt(addr) == engine.PhaseFullSync })
	time.Sleep(time.Duration(200+rng.IntN(500)) * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	for _, m := range [][3]int64{{0, 600, 2}, {1200, 1500, 0}, {2100, 2700, 1}} {
		cmd = startRun(t, bin, yaml, addr)
		waitFor(t, "replay to run", 3*time.Minute, func() bool { return phaseAt(addr) == engine.PhaseStreaming })
		if _, err := c.MoveChunk(ctx, ns, m[0], m[1], int(m[2])); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	stopLoad()
	if err := <-loadDone; err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Logf("killed 4 times (1 in the copy, 3 in replay), 3 migrations; the source took %v", ops)

	last := exec.Command(bin, "run", "-f", yaml, "--progress", "none", "--listen", "", "--until-caught-up")
	if out, err := last.CombinedOutput(); err != nil {
		t.Fatalf("final run (with hash verification of the subset): %v\n%s", err, out)
	}
	filter := bson.D{{Key: "tenant", Value: "globex"}}
	want := docsMatching(t, c.RouterClient(), "app", "k", filter)
	got := docsByID(t, dst.MustClient(t), "app", "k")
	if diff := diffDocs(want, got, "find({tenant: globex}) on the router's app.k -> app.k"); diff != "" {
		t.Fatal(diff)
	}
	t.Logf("the target holds the %d documents of tenant globex, byte for byte, and none of the others", len(got))
}
