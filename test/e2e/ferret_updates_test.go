package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/testutil"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// shapeDoc is a document of the update-shapes workload: nested fields and
// an array, so that $unset, $rename and $push have something to change.
func shapeDoc(id int32, rng *rand.Rand) bson.D {
	return doc("_id", id, "name", fmt.Sprintf("n%d", rng.IntN(1000)), "qty", int64(rng.IntN(50)),
		"tags", bson.A{"a", fmt.Sprintf("t%d", rng.IntN(9))},
		"meta", doc("color", "red", "size", int32(rng.IntN(5)), "note", "x"), "gone", true)
}

// shapeOp applies one random write of the workload to the source: $unset
// (top level and nested), a replacement with fewer fields, $rename, $push,
// $set, $inc, an insert or a delete. It returns the kind, for the log.
func shapeOp(ctx context.Context, c *mongo.Collection, rng *rand.Rand, nextID *int32, ids int32) (string, error) {
	id := int32(rng.IntN(int(ids)))
	filter := doc("_id", id)
	var err error
	kind := ""
	switch n := rng.IntN(10); n {
	case 0, 1:
		kind = "$unset"
		_, err = c.UpdateOne(ctx, filter, doc("$unset", doc("gone", "", "meta.note", "")))
	case 2, 3:
		kind = "replace"
		_, err = c.ReplaceOne(ctx, filter, doc("name", fmt.Sprintf("r%d", rng.IntN(1000)), "v", int32(n)))
	case 4:
		kind = "$rename"
		_, err = c.UpdateOne(ctx, filter, doc("$rename", doc("qty", "quantity")))
	case 5:
		kind = "$push"
		_, err = c.UpdateOne(ctx, filter, doc("$push", doc("tags", fmt.Sprintf("p%d", rng.IntN(100)))))
	case 6:
		kind = "$set+$inc"
		_, err = c.UpdateOne(ctx, filter, doc("$set", doc("meta.color", "blue", "added", doc("deep", bson.A{int32(1)})), "$inc", doc("qty", int64(1))))
	case 7:
		kind = "insert"
		*nextID++
		_, err = c.InsertOne(ctx, shapeDoc(*nextID, rng))
	case 8:
		kind = "delete"
		_, err = c.DeleteOne(ctx, filter)
	default:
		kind = "upsert-replace"
		_, err = c.ReplaceOne(ctx, doc("_id", ids+int32(rng.IntN(50))), doc("fresh", true), options.Replace().SetUpsert(true))
	}
	return kind, err
}

// TestFerretDBSourceUpdateShapesUnderKills: a FerretDB source logs every
// update ($unset, replacements, $rename, $push included) as a $set of the
// whole new document. While a workload of those writes runs on the
// source, `ferry run` is killed with SIGKILL during the copy and twice
// during replay, then finishes with --until-caught-up: the target ends
// byte-equal to the source, every field included (a removed field
// removed).
func TestFerretDBSourceUpdateShapesUnderKills(t *testing.T) {
	src, dst := testserver.Start(t), testserver.Start(t)
	sc, dc := src.MustClient(t), dst.MustClient(t)
	ctx := context.Background()
	const ids = 600
	rng := rand.New(rand.NewPCG(14, 1))
	seed := make([]any, ids)
	for i := range seed {
		seed[i] = shapeDoc(int32(i), rng)
	}
	insertDocs(t, sc, "app", "shapes", seed)

	// rateLimit makes the copy last a few seconds: /status is polled every
	// 200 ms, and a copy of a few hundred documents at full speed can start
	// and end between two polls, so the kill meant for it would never come.
	yaml := writeFile(t, fmt.Sprintf(`name: shapes
mode: fullAndIncremental
source: {uri: %q}
target: {uri: %q}
threads: {readers: 2, writers: 3}
cache: {batchSize: 100}
rateLimit: 200
verify: {mode: hash}
`, src.URI, dst.URI))
	bin := ferryBinary(t)
	addr := testutil.FreeAddr(t)
	start := func() *exec.Cmd { return startRun(t, bin, yaml, addr) }
	phase := func() engine.Phase { return phaseAt(addr) }

	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	counts := map[string]int{}
	go func() {
		defer wg.Done()
		coll := sc.Database("app").Collection("shapes")
		lrng := rand.New(rand.NewPCG(14, 2))
		next := int32(ids + 100)
		for loadCtx.Err() == nil {
			if kind, err := shapeOp(loadCtx, coll, lrng, &next, ids); err == nil {
				counts[kind]++
			}
			time.Sleep(30 * time.Millisecond)
		}
	}()

	krng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))
	cmd := start()
	waitFor(t, "the copy to start", time.Minute, func() bool { return phase() == engine.PhaseFullSync })
	time.Sleep(time.Duration(100+krng.IntN(400)) * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	for range 2 {
		cmd = start()
		waitFor(t, "replay to run", 3*time.Minute, func() bool { return phase() == engine.PhaseStreaming })
		time.Sleep(time.Duration(1000+krng.IntN(3000)) * time.Millisecond)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	stopLoad()
	wg.Wait()
	t.Logf("source writes during the run: %v", counts)

	last := exec.Command(bin, "run", "-f", yaml, "--progress", "none", "--listen", "", "--until-caught-up")
	if out, err := last.CombinedOutput(); err != nil {
		t.Fatalf("final run: %v\n%s", err, out)
	}
	assertSameDocs(t, sc, "app.shapes", dc, "app.shapes")
}
