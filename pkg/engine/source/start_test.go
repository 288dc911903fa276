package source_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestStartPositionByClockUnderWrites takes FerretDB's start position
// from its clock while two clients insert, then reads the collection as a
// copy started then would, and checks what copy and replay rely on: every
// oplog entry at or below the position is of a document that read found,
// so replay, which applies the entries after the position, misses
// nothing. It logs how many documents the read found whose entries are
// after the position (replayed again: a few milliseconds' worth).
func TestStartPositionByClockUnderWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := testserver.Start(t)
	c := s.MustClient(t)
	coll := c.Database("app").Collection("items")

	var (
		mu      sync.Mutex
		written = map[string]bool{} // acknowledged inserts
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				written[id] = true
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	pos, empty, err := source.StartPositionByClock(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	// What a copy started now reads: the documents written so far (and
	// maybe some written while it reads).
	copied := map[string]bool{}
	var docs []struct {
		ID string `bson:"_id"`
	}
	cur, err := coll.Find(ctx, bson.D{})
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		copied[d.ID] = true
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if empty {
		t.Fatal("the oplog holds entries, but the position says it was empty")
	}

	cur, err = c.Database("local").Collection("oplog.rs").Find(ctx, bson.D{{Key: "ns", Value: "app.items"}})
	if err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		TS bson.Timestamp `bson:"ts"`
		O  struct {
			ID string `bson:"_id"`
		} `bson:"o"`
	}
	if err := cur.All(ctx, &entries); err != nil {
		t.Fatal(err)
	}
	var atOrBelow, again int
	for _, e := range entries {
		switch {
		case e.TS.Compare(pos) > 0:
			if copied[e.O.ID] {
				again++ // copied and replayed: the tolerated overlap
			}
		case !copied[e.O.ID]:
			t.Errorf("entry %d,%d inserting %s is at or below the position %d,%d, but a copy started after the position was taken did not read the document: replay would miss it", e.TS.T, e.TS.I, e.O.ID, pos.T, pos.I)
		default:
			atOrBelow++
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("position %d,%d: %d entries at or below it, %d after it of documents the copy read too (replayed again); %d inserts in all", pos.T, pos.I, atOrBelow, again, len(written))
	if len(entries) != len(written) {
		t.Fatalf("%d oplog entries for %d inserts", len(entries), len(written))
	}
}
