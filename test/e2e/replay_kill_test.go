package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine"
	"github.com/mongoferry/mongoferry/pkg/workload"
)

// TestReplayKilledRepeatedly kills `ferry run` with SIGKILL at random
// moments of replay (and once during the copy) while the source takes
// inserts, updates, deletes and $inc, restarting it each time. At the end
// the target equals the source: nothing lost, and no $inc applied twice.
func TestReplayKilledRepeatedly(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	ctx := context.Background()
	base := workload.Options{Database: "shop", Collection: "orders", RecordCount: 4000, FieldCount: 4, FieldLength: 30, Seed: 3}
	if _, err := workload.Load(ctx, sc, base); err != nil {
		t.Fatal(err)
	}
	counters := make([]any, 20)
	for i := range counters {
		counters[i] = doc("_id", int32(i), "n", int64(0))
	}
	insertDocs(t, sc, "shop", "counters", counters)

	// rateLimit makes the copy last a few seconds: /status is polled every
	// 200 ms, and a copy of a few hundred documents at full speed can start
	// and end between two polls, so the kill meant for it would never come.
	yaml := writeFile(t, fmt.Sprintf(`name: killer
mode: fullAndIncremental
source: {uri: %q}
target: {uri: %q}
threads: {readers: 2, writers: 3}
fullSync: {rangeDocuments: 500, split: always}
cache: {batchSize: 200}
rateLimit: 1000
verify: {mode: hash}
`, src.URI, dst.URI))
	bin := ferryBinary(t)
	addr := testutil.FreeAddr(t)
	start := func(args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"run", "-f", yaml, "--progress", "none"}, args...)...)
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	phase := func() engine.Phase {
		s, err := getStatus(addr)
		if err != nil {
			return ""
		}
		return s.Phase
	}

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		run := base
		run.Workload, run.Threads, run.Rate, run.Distribution = workload.WorkloadMixed, 2, 30, workload.Uniform
		run.InsertProportion, run.UpdateProportion, run.DeleteProportion = 0.4, 0.4, 0.2
		_, _ = workload.Run(loadCtx, sc, run)
	}()
	var incs int64
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for loadCtx.Err() == nil {
			if _, err := sc.Database("shop").Collection("counters").UpdateOne(loadCtx,
				doc("_id", int32(rng.IntN(20))), doc("$inc", doc("n", int64(1)))); err == nil {
				incs++
			}
			time.Sleep(40 * time.Millisecond)
		}
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	kills := 0
	// One kill during the copy.
	cmd := start("--listen", addr)
	waitFor(t, "the copy to start", time.Minute, func() bool { return phase() == engine.PhaseFullSync })
	time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	kills++
	// Five during replay, each at a random moment.
	for kills < 6 {
		cmd = start("--listen", addr)
		waitFor(t, "replay to run", 3*time.Minute, func() bool { return phase() == engine.PhaseStreaming })
		time.Sleep(time.Duration(200+rng.IntN(2500)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		kills++
	}
	stopLoad()
	wg.Wait()
	t.Logf("killed %d times; the source took %d $inc", kills, incs)

	// The last run catches up, verifies and exits 0.
	last := exec.Command(bin, "run", "-f", yaml, "--progress", "none", "--listen", "", "--until-caught-up")
	out, err := last.CombinedOutput()
	if err != nil {
		t.Fatalf("final run: %v\n%s", err, out)
	}
	assertSameDocs(t, sc, "shop.orders", dc, "shop.orders")
	assertSameDocs(t, sc, "shop.counters", dc, "shop.counters")
	sum := func(c *mongo.Client) int64 {
		var total struct {
			N int64 `bson:"n"`
		}
		cur, err := c.Database("shop").Collection("counters").Aggregate(ctx, []bson.D{{{Key: "$group", Value: doc("_id", nil, "n", doc("$sum", "$n"))}}})
		if err != nil {
			t.Fatal(err)
		}
		if cur.Next(ctx) {
			_ = cur.Decode(&total)
		}
		return total.N
	}
	// The source's own sum is the truth (an $inc cancelled with the load
	// may still have been applied there).
	if got, want := sum(dc), sum(sc); got != want || want < incs {
		t.Errorf("counters add up to %d on the target and %d on the source (%d $inc acknowledged)", got, want, incs)
	}
}
