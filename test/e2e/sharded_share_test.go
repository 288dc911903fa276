package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine"
)

// TestShardedWorkersShareCopy runs the full copy of a 3-shard source with
// one `ferry run --shard NAME` process per shard, as the operator's
// worker pods run it, where one worker alone would hold the whole copy:
// app.one is sharded but every chunk lives on shard1 (its other shards
// keep the moved documents as orphans, the range deleter not run yet),
// and app.flat is not sharded, read through mongos. Every worker helps:
// once its own part of a pass is copied, a worker copies the ranges of
// the other shards' parts that no worker holds once the part has been
// its own worker's alone for the lease's TTL (reading that shard
// directly, leaving its orphans out), and the ranges read through mongos
// are shared by every worker through the same leases.
//
// What a user gets: every worker streams and the target equals the
// source as read through the router. What the copy records: each range
// done once, app.one's shard1 ranges and app.flat's ranges each recorded
// by more than one worker.
//
// What stands in for what: as in TestShardedCopyWorkerKilled
// (testserver.Cluster); app.flat is written to the mongos stand-in only,
// which serves it as a real mongos serves an unsharded collection.
func TestShardedWorkersShareCopy(t *testing.T) {
	ctx := context.Background()
	c := testserver.StartCluster(t, 3)
	c.ChunkSize = chunkKeys
	dst := testserver.Start(t)
	const one, flat = "app.one", "app.flat"
	var seed []bson.D
	for k := int64(0); k < 12*chunkKeys; k += 2 {
		seed = append(seed, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: 0}, {Key: "pad", Value: strings.Repeat("o", 40)}})
	}
	if err := c.Insert(ctx, one, seed...); err != nil {
		t.Fatal(err)
	}
	// Every chunk onto shard1.
	for b := int64(0); b < 12; b++ {
		if c.Owner(one, b*chunkKeys) == 1 {
			continue
		}
		if _, err := c.MoveChunk(ctx, one, b*chunkKeys, (b+1)*chunkKeys, 1); err != nil {
			t.Fatal(err)
		}
	}
	flatDocs := make([]any, 400)
	for i := range flatDocs {
		flatDocs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("f%05d", i)}, {Key: "pad", Value: strings.Repeat("f", 40)}}
	}
	if _, err := c.RouterClient().Database("app").Collection("flat").InsertMany(ctx, flatDocs); err != nil {
		t.Fatal(err)
	}
	if err := c.ResetOplogs(ctx); err != nil {
		t.Fatal(err)
	}
	task := "share"
	// 20 documents a second per worker (rateLimit 60, shared by three):
	// shard1's 600 documents alone would take 30 s, and the others join
	// once its part has been its worker's alone for the lease's TTL (20 s).
	workers := startShardWorkers(t, c, ferryBinary(t), shardedTaskFile(t, task, c, dst, "rateLimit: 60"))
	waitFor(t, "every worker streaming", 4*time.Minute, func() bool {
		for _, w := range workers {
			if s, err := w.status(); err != nil || s.Phase != engine.PhaseStreaming {
				return false
			}
		}
		return true
	})
	waitWorkersCaughtUp(t, c, workers, 2*time.Minute)
	dc := dst.MustClient(t)
	assertSameDocs(t, c.RouterClient(), one, dc, one)
	assertSameDocs(t, c.RouterClient(), flat, dc, flat)

	meta := dc.Database("mongoferry")
	cc := countCopy(ctx, t, meta, task)   // every planned range of app.one done once
	owners := map[string]map[string]int{} // what -> owner pod -> ranges
	note := func(what, owner string) {
		pod, _, _ := strings.Cut(owner, "/")
		if owners[what] == nil {
			owners[what] = map[string]int{}
		}
		owners[what][pod]++
	}
	for id, r := range cc.doneBy {
		if cc.shardOf[id] == "shard1" {
			note("app.one on shard1", r.Owner)
		}
	}
	ranges := rangeStates(t, dst, task)
	records := map[string]int{}
	for _, r := range rangeRecords(ctx, t, meta, task) {
		if r.Done {
			records[r.Range]++
			if rg, ok := ranges[r.Range]; ok && rg.NS == flat {
				note(flat, r.Owner)
			}
		}
	}
	for id, r := range ranges {
		if r.NS == flat && records[id] != 1 {
			t.Errorf("range %s of %s has %d done records, want 1", id, flat, records[id])
		}
	}
	t.Logf("app.one: %d passes, %d ranges, %d documents kept in pass 0; ranges by worker: %v", cc.passes, cc.planned, cc.kept[0], owners)
	for _, what := range []string{"app.one on shard1", flat} {
		if len(owners[what]) < 2 {
			t.Errorf("%s was copied by %v: want more than one worker", what, owners[what])
		}
	}
}
