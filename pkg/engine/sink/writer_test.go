package sink

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestWriterOverwritesOneAtATime: copy writers resuming an interrupted
// copy (own batches) on a real FerretDB overwrite the documents an earlier
// attempt left. With SerialUpdates, as FerretDB's profile asks, no two of
// their update commands to one database are under way at once, and the
// target ends with every document's copied version.
func TestWriterOverwritesOneAtATime(t *testing.T) {
	if testing.Short() {
		t.Skip("starts FerretDB")
	}
	ctx := context.Background()
	srv := testserver.Start(t)
	var inFlight, overlapped, updates atomic.Int32
	var started sync.Map // request id of an update command under way
	mon := &event.CommandMonitor{
		Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if e.CommandName == "update" && e.DatabaseName == "shop" {
				started.Store(e.RequestID, true)
				updates.Add(1)
				if inFlight.Add(1) > 1 {
					overlapped.Add(1)
				}
			}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			if _, ok := started.LoadAndDelete(e.RequestID); ok {
				inFlight.Add(-1)
			}
		},
		Failed: func(_ context.Context, e *event.CommandFailedEvent) {
			if _, ok := started.LoadAndDelete(e.RequestID); ok {
				inFlight.Add(-1)
			}
		},
	}
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI).SetMonitor(mon))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(ctx) })

	const writers, batches, perBatch = 3, 2, 20
	doc := func(id, v int) bson.Raw {
		return raw(t, bson.D{{Key: "_id", Value: int32(id)}, {Key: "v", Value: int32(v)}})
	}
	colls := []*mongo.Collection{client.Database("shop").Collection("orders"), client.Database("shop").Collection("items")}
	// An earlier attempt left version 0 of every document.
	for _, c := range colls {
		var left []any
		for id := range writers * batches * perBatch {
			left = append(left, doc(id, 0))
		}
		if _, err := c.InsertMany(ctx, left); err != nil {
			t.Fatal(err)
		}
	}
	w := &Writer{MaxRetries: 2, SerialUpdates: true}
	var wg sync.WaitGroup
	errs := make(chan error, writers*len(colls))
	for i := range writers {
		for _, c := range colls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for b := range batches {
					var docs []bson.Raw
					for k := range perBatch {
						docs = append(docs, doc((i*batches+b)*perBatch+k, 1))
					}
					res, err := w.Insert(ctx, c, docs, config.ConflictFail, true)
					if err != nil {
						errs <- err
						return
					}
					if res.Overwritten != perBatch {
						t.Errorf("%s: %d overwritten, want %d", c.Name(), res.Overwritten, perBatch)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if overlapped.Load() > 0 || updates.Load() == 0 {
		t.Errorf("%d of %d update commands to shop ran beside another; want one at a time", overlapped.Load(), updates.Load())
	}
	for _, c := range colls {
		n, err := c.CountDocuments(ctx, bson.D{{Key: "v", Value: int32(1)}})
		if err != nil {
			t.Fatal(err)
		}
		if all := int64(writers * batches * perBatch); n != all {
			t.Errorf("%s: %d of %d documents hold the copied version", c.Name(), n, all)
		}
	}
}
