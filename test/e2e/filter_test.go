package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// TestFilteredSyncKilled splits one tenant out of a shared collection
// (namespaces.filters) on FerretDB while the source takes inserts of
// every tenant, updates that move documents into and out of the filter
// ($set of tenant), updates that leave it alone ($inc), replacements and
// deletes, killing `ferry run` with SIGKILL once during the copy and
// three times during replay. At the end the target holds find(filter) of
// the source byte for byte and nothing else, and the task's own hash
// verification, which compares the subset, passes. (FerretDB v1 takes
// no transactions: a transaction's entries of a filtered namespace are
// replayed in pkg/engine/replay's TestFilteredReplayOnFerretDB.)
func TestFilteredSyncKilled(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	ctx := context.Background()
	tenants := []string{"acme", "globex", "initech"}
	orders := sc.Database("shop").Collection("orders")
	var docs []any
	for i := range 3000 {
		docs = append(docs, doc("_id", int64(i), "tenant", tenants[i%3], "n", int64(0), "pad", fmt.Sprintf("%040d", i)))
	}
	insertDocs(t, sc, "shop", "orders", docs)

	yaml := writeFile(t, fmt.Sprintf(`name: tenant-split
mode: fullAndIncremental
source: {uri: %q}
target: {uri: %q}
namespaces:
  include: [shop.orders]
  filters:
  - namespace: shop.orders
    query: {tenant: globex}
threads: {readers: 2, writers: 3}
fullSync: {rangeDocuments: 300, split: always}
cache: {batchSize: 100}
rateLimit: 400
verify: {mode: hash}
`, src.URI, dst.URI))
	bin := ferryBinary(t)
	addr := testutil.FreeAddr(t)
	start := func() *exec.Cmd { return startRun(t, bin, yaml, addr) }
	phase := func() engine.Phase { return phaseAt(addr) }

	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan map[string]int)
	go func() {
		rng := rand.New(rand.NewPCG(39, 1))
		ops := map[string]int{}
		next := int64(3000)
		for loadCtx.Err() == nil {
			id := int64(rng.IntN(int(next)))
			var err error
			kind := ""
			switch k := rng.IntN(10); {
			case k < 3:
				kind = "insert"
				_, err = orders.InsertOne(loadCtx, doc("_id", next, "tenant", tenants[rng.IntN(3)], "n", int64(0), "pad", "new"))
				next++
			case k < 6:
				kind = "move"
				_, err = orders.UpdateOne(loadCtx, doc("_id", id), doc("$set", doc("tenant", tenants[rng.IntN(3)])))
			case k < 8:
				kind = "inc"
				_, err = orders.UpdateOne(loadCtx, doc("_id", id), doc("$inc", doc("n", int64(1))))
			case k < 9:
				kind = "replace"
				_, err = orders.ReplaceOne(loadCtx, doc("_id", id), doc("_id", id, "tenant", tenants[rng.IntN(3)], "n", int64(-1), "pad", "replaced"))
			default:
				kind = "delete"
				_, err = orders.DeleteOne(loadCtx, doc("_id", id))
			}
			if err == nil {
				ops[kind]++
			}
			time.Sleep(15 * time.Millisecond)
		}
		loadDone <- ops
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 39))
	cmd := start()
	waitFor(t, "the copy to start", time.Minute, func() bool { return phase() == engine.PhaseFullSync })
	time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	for range 3 {
		cmd = start()
		waitFor(t, "replay to run", 3*time.Minute, func() bool { return phase() == engine.PhaseStreaming })
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	stopLoad()
	ops := <-loadDone
	t.Logf("killed 4 times (1 in the copy, 3 in replay); the source took %v", ops)

	last := exec.Command(bin, "run", "-f", yaml, "--progress", "none", "--listen", "", "--until-caught-up")
	if out, err := last.CombinedOutput(); err != nil {
		t.Fatalf("final run (with hash verification of the subset): %v\n%s", err, out)
	}
	want := docsMatching(t, sc, "shop", "orders", doc("tenant", "globex"))
	got := docsByID(t, dc, "shop", "orders")
	if diff := diffDocs(want, got, "find({tenant: globex}) on shop.orders -> shop.orders"); diff != "" {
		t.Fatal(diff)
	}
	others, err := dc.Database("shop").Collection("orders").CountDocuments(ctx, doc("tenant", doc("$ne", "globex")))
	if err != nil || others != 0 {
		t.Fatalf("the target holds %d documents of other tenants (%v)", others, err)
	}
	t.Logf("the target holds the %d documents of tenant globex, byte for byte, and none of the others", len(got))
}
