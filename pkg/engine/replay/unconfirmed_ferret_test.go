package replay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/internal/testserver"
)

// TestReplayUpdateLoggedAfterItsDelete replays a FerretDB source's oplog
// in which updates are logged after the delete of their document.
// FerretDB v1 logs an update after writing it whether or not the write
// found the document (backends/decorators/oplog, UpdateAll): an update
// that read a document a concurrent delete then removed is logged, with
// the whole document it meant to write, after that delete. Replayed as
// it reads (a replacement upsert), it brings back a document the source
// no longer has: TestReplayKilledRepeatedly once ended with such a
// document on the target. Here the source races updates and deletes of
// the same 400 documents until its oplog holds such entries, the target
// starts as the copy left it, and after replay it must equal the source.
func TestReplayUpdateLoggedAfterItsDelete(t *testing.T) {
	if testing.Short() {
		t.Skip("needs FerretDB servers (make ferretdb); skipped with -short")
	}
	src, dst := testserver.Start(t), testserver.Start(t, testserver.Options{OplogBytes: -1})
	sc, dc := src.MustClient(t), dst.MustClient(t)
	ctx := context.Background()
	if _, err := sc.Database("shop").Collection("start").InsertOne(ctx, bson.D{}); err != nil {
		t.Fatal(err)
	}
	from := newestOplogTS(t, sc)
	phantoms := 0
	for round := 0; round < 5 && phantoms < 3; round++ {
		docs := make([]any, 400)
		for i := range docs {
			docs[i] = bson.D{{Key: "_id", Value: int32(round*1000 + i)}, {Key: "state", Value: "new"}}
		}
		for _, c := range []*mongo.Client{sc, dc} {
			if _, err := c.Database("shop").Collection("orders").InsertMany(ctx, docs); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		wg.Add(2)
		coll := sc.Database("shop").Collection("orders")
		go func() {
			defer wg.Done()
			for i := range docs {
				_, _ = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: int32(round*1000 + i)}}, bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "shipped"}}}})
			}
		}()
		go func() {
			defer wg.Done()
			for i := range docs {
				_, _ = coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: int32(round*1000 + i)}})
			}
		}()
		wg.Wait()
		phantoms = updatesAfterDelete(t, sc, from)
	}
	if phantoms == 0 {
		t.Skip("FerretDB logged no update after its document's delete in 5 rounds of 400 races")
	}
	last := newestOplogTS(t, sc)
	t.Logf("the source's oplog holds %d updates logged after their document's delete", phantoms)

	r, _ := ferretReplayer(t, "phantom", sc, dc, from, nil)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	started := time.Now()
	for r.Status().AppliedTS.Compare(last) < 0 || r.Status().InFlight > 0 {
		select {
		case err := <-done:
			t.Fatalf("replay stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Since(started) > 3*time.Minute {
			t.Fatalf("not applied after 3 minutes: %+v", r.Status())
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	t.Logf("replayed in %s: %v", time.Since(started), r.Status().Applied)
	want, got := sortedDocs(t, sc), sortedDocs(t, dc)
	if len(got) != len(want) {
		t.Fatalf("target holds %d documents, source %d: an update logged after its document's delete brought it back", len(got), len(want))
	}
	for i := range want {
		if !bytesEqualRaw(got[i], want[i]) {
			t.Fatalf("document %d differs: target %s, source %s", i, got[i], want[i])
		}
	}
}

// updatesAfterDelete counts the update entries of shop.orders after from
// whose document was deleted by an earlier entry.
func updatesAfterDelete(t *testing.T, c *mongo.Client, from bson.Timestamp) int {
	t.Helper()
	ctx := context.Background()
	cur, err := c.Database("local").Collection("oplog.rs").Find(ctx, bson.D{{Key: "ns", Value: "shop.orders"}, {Key: "ts", Value: bson.D{{Key: "$gt", Value: from}}}})
	if err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		Op string         `bson:"op"`
		TS bson.Timestamp `bson:"ts"`
		O  bson.Raw       `bson:"o"`
		O2 bson.Raw       `bson:"o2"`
	}
	if err := cur.All(ctx, &entries); err != nil {
		t.Fatal(err)
	}
	deleted := map[string]bson.Timestamp{}
	for _, e := range entries {
		if e.Op == "d" {
			deleted[e.O.Lookup("_id").String()] = e.TS
		}
	}
	n := 0
	for _, e := range entries {
		if d, ok := deleted[e.O2.Lookup("_id").String()]; ok && e.Op == "u" && e.TS.After(d) {
			n++
		}
	}
	return n
}
