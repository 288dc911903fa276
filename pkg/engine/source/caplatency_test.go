package source_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/internal/wiresim"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// latencies collects the time from each write to the tailer handing out
// its entry.
type latencies struct {
	mu      sync.Mutex
	written map[int]time.Time
	got     []time.Duration
}

func (l *latencies) wrote(id int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.written[id] = time.Now()
}

func (l *latencies) read(id int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at, ok := l.written[id]; ok {
		l.got = append(l.got, time.Since(at))
		delete(l.written, id)
	}
}

func (l *latencies) summary() (n int, median, p95, worst time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := slices.Clone(l.got)
	slices.Sort(d)
	if len(d) == 0 {
		return 0, 0, 0, 0
	}
	return len(d), d[len(d)/2], d[len(d)*95/100], d[len(d)-1]
}

// drain reads tl until ctx ends, noting each entry's document.
func drain(ctx context.Context, tl *source.Tailer, l *latencies) {
	for ctx.Err() == nil {
		es, _ := tl.Next(ctx)
		for _, e := range es {
			if id, ok := e.Lookup("o", "_id").AsInt64OK(); ok {
				l.read(int(id))
			}
		}
	}
}

// TestCapLatency measures the time from a write to its entry leaving the
// tailer, with the majority cap (Commit) and without it: on FerretDB as
// the engine reads it (Settle mode, 2 s), where the cap reads hello once
// and finds no replication, and on the wire stand-in serving a replica
// set whose commit point follows each write 2 ms later (a secondary's
// acknowledgement). The figures are in docs/reliability.md. Run with
// MONGOFERRY_CAP_LATENCY=1.
func TestCapLatency(t *testing.T) {
	if os.Getenv("MONGOFERRY_CAP_LATENCY") == "" {
		t.Skip("a measurement: set MONGOFERRY_CAP_LATENCY=1")
	}
	const writes = 40
	t.Run("FerretDB", func(t *testing.T) {
		s := testserver.Start(t)
		c := s.MustClient(t)
		for _, capped := range []bool{false, true} {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			from, err := source.ServerTime(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			tl := source.NewTailer(c, from)
			tl.Settle = 2 * time.Second
			if !capped {
				tl.Commit = nil
			}
			l := &latencies{written: map[int]time.Time{}}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); drain(rctx, tl, l) }()
			base := 0
			if capped {
				base = writes
			}
			for i := range writes {
				l.wrote(base + i)
				if _, err := c.Database("app").Collection("lat").InsertOne(ctx, bson.D{{Key: "_id", Value: base + i}}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			time.Sleep(8 * time.Second)
			stop()
			<-done
			n, med, p95, worst := l.summary()
			t.Logf("FerretDB, cap %v: %d of %d writes replayed, write to release median %v, p95 %v, max %v; tailer %+v",
				capped, n, writes, med.Round(time.Millisecond), p95.Round(time.Millisecond), worst.Round(time.Millisecond), tl.Stats())
			cancel()
		}
	})
	t.Run("ReplicaSetStandIn", func(t *testing.T) {
		for _, capped := range []bool{false, true} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			var commit commitVar
			o := wiresim.NewMemOplog()
			s, err := wiresim.Start(wiresim.Options{Oplog: o, Commit: commit.get})
			if err != nil {
				t.Fatal(err)
			}
			c := connect(ctx, t, s)
			tl := source.NewTailer(c, bson.Timestamp{})
			if !capped {
				tl.Commit = nil
			}
			l := &latencies{written: map[int]time.Time{}}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); drain(rctx, tl, l) }()
			for i := 1; i <= writes*5; i++ {
				l.wrote(i)
				o.Append(capEntry(t, uint32(i), 1, i, 1))
				s.Reveal(1)
				go func() {
					time.Sleep(2 * time.Millisecond)
					commit.raise(uint32(i), 1)
				}()
				time.Sleep(20 * time.Millisecond)
			}
			time.Sleep(time.Second)
			stop()
			<-done
			n, med, p95, worst := l.summary()
			t.Logf("replica set stand-in (commit 2 ms after each write), cap %v: %d of %d writes, write to release median %v, p95 %v, max %v; tailer %+v",
				capped, n, writes*5, med.Round(100*time.Microsecond), p95.Round(100*time.Microsecond), worst.Round(100*time.Microsecond), tl.Stats())
			_ = c.Disconnect(ctx)
			_ = s.Close()
			cancel()
		}
	})
}
