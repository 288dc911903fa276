package e2e

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

// TestTailSettleReadsEveryEntry: the tailer reads a FerretDB oplog the way
// the engine does (Settle mode: ts-ordered reads re-run per poll, polls
// paced by held-back entries and backing off while the source is idle,
// the newest position taken from its own reads). Two clients insert
// concurrently in bursts, so that entries can become visible out of ts
// order, with idle gaps longer than the back-off ceiling. Every insert
// must come out of the tailer exactly once (late ones included), and the
// newest position asked for after the last write must cover it: a
// cut-over that waits for it misses nothing.
func TestTailSettleReadsEveryEntry(t *testing.T) {
	tests := []struct {
		name   string
		bursts int
		each   int // inserts per client per burst
		gap    time.Duration
	}{
		{"idle gaps longer than the back-off", 3, 15, 2500 * time.Millisecond},
		{"a steady trickle", 12, 2, 150 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := testserver.Start(t)
			c := src.MustClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			from, _, err := source.StartPositionByClock(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			tl := source.NewTailer(c, from)
			tl.Settle, tl.Poll, tl.MaxPoll, tl.NewestFromReads = time.Second, 100*time.Millisecond, time.Second, true
			tl.SkipDatabases = []string{"local", "config"}

			coll := c.Database("app").Collection("tail")
			want := map[string]bool{}
			var mu sync.Mutex
			var lastWrite time.Time
			writes := make(chan error, 1)
			go func() {
				for b := range tt.bursts {
					var wg sync.WaitGroup
					errs := make(chan error, 2)
					for w := range 2 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := range tt.each {
								id := fmt.Sprintf("b%d-w%d-%d", b, w, i)
								if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: id}}); err != nil {
									errs <- err
									return
								}
								mu.Lock()
								want[id] = true
								mu.Unlock()
							}
						}()
					}
					wg.Wait()
					close(errs)
					if err := <-errs; err != nil {
						writes <- err
						return
					}
					time.Sleep(tt.gap)
				}
				mu.Lock()
				lastWrite = time.Now()
				mu.Unlock()
				writes <- nil
			}()

			got := map[string]int{}
			var newest bson.Timestamp
			readDone := make(chan error, 1)
			readCtx, stopRead := context.WithCancel(ctx)
			defer stopRead()
			go func() {
				for readCtx.Err() == nil {
					raws, err := tl.Next(readCtx)
					if err != nil {
						readDone <- err
						return
					}
					for _, raw := range raws {
						if op, _ := raw.Lookup("op").StringValueOK(); op != "i" {
							continue
						}
						id, _ := raw.Lookup("o", "_id").StringValueOK()
						ts, i, _ := raw.Lookup("ts").TimestampOK()
						mu.Lock()
						got[id]++
						if (bson.Timestamp{T: ts, I: i}).Compare(newest) > 0 {
							newest = bson.Timestamp{T: ts, I: i}
						}
						mu.Unlock()
					}
				}
				readDone <- nil
			}()
			if err := <-writes; err != nil {
				t.Fatal(err)
			}
			// The newest position read after writes stopped covers every
			// entry written (the cut-over's question: it asks until the
			// answer comes from a read started after it asked).
			asked := time.Now()
			var nts bson.Timestamp
			for {
				if nts, err = tl.Newest(ctx); err != nil {
					t.Fatal(err)
				}
				if !tl.NewestReadAt().Before(asked) {
					break
				}
			}
			for {
				mu.Lock()
				n := len(got)
				mu.Unlock()
				if n >= len(want) || ctx.Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			stopRead()
			if err := <-readDone; err != nil && readCtx.Err() == nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			for id := range want {
				if got[id] != 1 {
					t.Errorf("insert %s came out of the tailer %d times, want once", id, got[id])
				}
			}
			for id := range got {
				if !want[id] {
					t.Errorf("the tailer returned %s, which was never inserted", id)
				}
			}
			if nts.Compare(newest) < 0 {
				t.Errorf("Newest after the last write (at %s) = %v, below the last entry read %v", lastWrite.Format(time.StampMilli), nts, newest)
			}
			st := tl.Stats()
			t.Logf("%d inserts; tailer: %d cursor opens, %d newest queries, %d late entries", len(want), st.Reopens, st.NewestReads, st.LateEntries)
		})
	}
}
