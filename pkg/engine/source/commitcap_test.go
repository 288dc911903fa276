package source_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongoferry/mongoferry/internal/wiresim"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// capEntry is an insert oplog entry of document {_id: id, v: v} at ts
// (second 1000, increment i) in term term.
func capEntry(t *testing.T, i uint32, term int64, id, v int) bson.Raw {
	t.Helper()
	raw, err := bson.Marshal(bson.D{
		{Key: "ts", Value: bson.Timestamp{T: 1000, I: i}}, {Key: "t", Value: term}, {Key: "op", Value: "i"},
		{Key: "ns", Value: "app.c"}, {Key: "o", Value: bson.D{{Key: "_id", Value: id}, {Key: "v", Value: v}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// commitVar is a replica set's majority commit point as a test moves it.
type commitVar struct {
	mu   sync.Mutex
	ts   bson.Timestamp
	term int64
}

func (c *commitVar) set(i uint32, term int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ts, c.term = bson.Timestamp{T: 1000, I: i}, term
}

// raise moves the commit point to increment i unless it is past it.
func (c *commitVar) raise(i uint32, term int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ts := (bson.Timestamp{T: 1000, I: i}); ts.Compare(c.ts) > 0 {
		c.ts, c.term = ts, term
	}
}

func (c *commitVar) get() (bson.Timestamp, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ts, c.term
}

// readUntil reads the tailer until it has handed out n entries or the
// wait ends, and returns the (ts increment, v) of each. A failed read is
// retried, as replay retries it (a failover closes connections).
func readUntil(ctx context.Context, t *testing.T, tl *source.Tailer, n int, wait time.Duration) [][2]int {
	t.Helper()
	var got [][2]int
	deadline := time.Now().Add(wait)
	for len(got) < n && time.Now().Before(deadline) {
		es, err := tl.Next(ctx)
		if err != nil {
			t.Logf("Next: %v (retried)", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for _, e := range es {
			_, i, _ := e.Lookup("ts").TimestampOK()
			v, _ := e.Lookup("o", "v").AsInt64OK()
			got = append(got, [2]int{int(i), int(v)})
		}
	}
	return got
}

func connect(ctx context.Context, t *testing.T, s *wiresim.Server) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()).SetTimeout(10 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.WithoutCancel(ctx)) })
	return c
}

// TestTailerReleasesOnlyCommitted reads a replica set's primary (the wire
// stand-in, serving an oplog held in memory and reporting the majority
// commit point a test sets in hello's lastWrite.majorityOpTime): entries
// past the commit point are not handed out until it reaches them, on a
// tailable cursor and in Settle mode (ts-ordered reads).
func TestTailerReleasesOnlyCommitted(t *testing.T) {
	for _, settle := range []time.Duration{0, time.Millisecond} {
		t.Run(fmt.Sprintf("settle=%v", settle), func(t *testing.T) { testReleasesOnlyCommitted(t, settle) })
	}
}

func testReleasesOnlyCommitted(t *testing.T, settle time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var commit commitVar
	commit.set(2, 1)
	o := wiresim.NewMemOplog()
	for i := uint32(1); i <= 5; i++ {
		o.Append(capEntry(t, i, 1, int(i), 1))
	}
	s, err := wiresim.Start(wiresim.Options{Oplog: o, Commit: commit.get})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() }) // after the client's Disconnect
	tl := source.NewTailer(connect(ctx, t, s), bson.Timestamp{})
	tl.Poll, tl.MaxPoll, tl.Settle = 50*time.Millisecond, 50*time.Millisecond, settle
	got := readUntil(ctx, t, tl, 5, 2*time.Second)
	if len(got) != 2 || got[1][0] != 2 {
		t.Fatalf("with the commit point at entry 2, handed out %v; want entries 1 and 2", got)
	}
	if n := tl.Stats().CommitReads; settle == 0 && n > 30 {
		t.Errorf("the commit point was read %d times in 2 s while it did not move; want the poll to back off", n)
	}
	commit.set(5, 1)
	got = readUntil(ctx, t, tl, 3, 5*time.Second)
	if len(got) != 3 || got[0][0] != 3 || got[2][0] != 5 {
		t.Fatalf("after the commit point reached entry 5, handed out %v; want entries 3 to 5", got)
	}
	if st := tl.Stats(); st.CommitReads == 0 {
		t.Errorf("stats %+v: no read of the commit point counted", st)
	}
}

// TestTailerAcrossRollback follows a failover as mongod makes one
// (rollback_impl.cpp): the old primary wrote entries 1-6 in term 1, only
// 1-4 reached a majority (the commit point stays at 3 on it), a new
// primary elected in term 2 holds 1-4 and writes its own entries, one of
// them at the ts of a rolled-back one. The tailer hands out 1-4 and the
// new primary's entries, never the old primary's 5 and 6.
func TestTailerAcrossRollback(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var commit commitVar
	commit.set(3, 1)
	old := wiresim.NewMemOplog()
	for i := uint32(1); i <= 6; i++ {
		old.Append(capEntry(t, i, 1, int(i), 1))
	}
	s, err := wiresim.Start(wiresim.Options{Oplog: old, Commit: commit.get})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() }) // after the client's Disconnect
	tl := source.NewTailer(connect(ctx, t, s), bson.Timestamp{})
	tl.Poll = 50 * time.Millisecond
	got := readUntil(ctx, t, tl, 6, 2*time.Second)
	if len(got) != 3 {
		t.Fatalf("before the failover, handed out %v; want entries 1 to 3", got)
	}
	// The new primary: the common point is entry 4; entries 5 and 6 are
	// gone, its own start at 5 (another write, v 2) in term 2.
	newer := wiresim.NewMemOplog(old.Entries()[:4]...)
	newer.Append(capEntry(t, 5, 2, 50, 2), capEntry(t, 7, 2, 70, 2))
	commit.set(7, 2)
	s.Failover(newer)
	got = readUntil(ctx, t, tl, 3, 20*time.Second)
	want := [][2]int{{4, 1}, {5, 2}, {7, 2}}
	if len(got) != len(want) {
		t.Fatalf("after the failover, handed out %v; want %v", got, want)
	}
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("after the failover, handed out %v; want %v (never the rolled-back 5 and 6 of term 1)", got, want)
		}
	}
	if st := tl.Stats(); st.HistoryReads == 0 {
		t.Errorf("stats %+v: entry 4 (term 1) was released under a term-2 commit point without checking the new primary holds it", st)
	}
}
