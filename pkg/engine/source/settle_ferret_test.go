package source_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestSettleReadHoldsByItsOpening reproduces a late entry the chaos suite
// met (seed 3, a worker kill during replay): a prepared transaction's
// applyOps, written within 1.5 s of its ts, showed up after later entries
// were handed out, and replay stopped ("only inserts, updates and deletes
// can be applied out of order"). A Settle-mode read keeps its cursor
// across Next calls while it has more than a batch to hand out, and
// FerretDB computes a sorted query's result when it opens it; Next
// judged an entry old enough by the time of the call, so a read opened
// before an entry was written handed out the later entries of its second
// once that second had settled, without it.
//
// Here the read opens (a batch of one) while the entries (s,1) and (s,3)
// are visible, (s,2) is written after, and the read goes on once second
// s has settled: every entry must come out in ts order, none late.
func TestSettleReadHoldsByItsOpening(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a FerretDB server (make ferretdb); skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := testserver.Start(t).MustClient(t)
	oplog := c.Database("local").Collection("oplog.rs")
	old, s := uint32(time.Now().Add(-5*time.Second).Unix()), uint32(time.Now().Unix())
	entry := func(ts bson.Timestamp) bson.D {
		return bson.D{{Key: "ts", Value: ts}, {Key: "t", Value: int64(1)}, {Key: "op", Value: "i"}, {Key: "ns", Value: "app.items"},
			{Key: "o", Value: bson.D{{Key: "_id", Value: fmt.Sprintf("%d-%d", ts.T, ts.I)}}}}
	}
	var first []any
	for _, ts := range []bson.Timestamp{{T: old, I: 1}, {T: old, I: 2}, {T: old, I: 3}, {T: s, I: 1}, {T: s, I: 3}} {
		first = append(first, entry(ts))
	}
	if _, err := oplog.InsertMany(ctx, first); err != nil {
		t.Fatal(err)
	}
	tl := source.NewTailer(c, bson.Timestamp{T: old - 1})
	tl.Commit, tl.Settle, tl.BatchEntries, tl.Poll = nil, 2*time.Second, 1, 50*time.Millisecond
	tl.SkipDatabases = []string{"local"} // the server logs the inserts above there
	var got []bson.Timestamp
	next := func() {
		out, err := tl.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, raw := range out {
			tt, i := raw.Lookup("ts").Timestamp()
			got = append(got, bson.Timestamp{T: tt, I: i})
		}
	}
	next() // opens the read
	if _, err := oplog.InsertOne(ctx, entry(bson.Timestamp{T: s, I: 2})); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Unix(int64(s)+3, 200e6))) // second s has settled
	for deadline := time.Now().Add(20 * time.Second); len(got) < 6 && time.Now().Before(deadline); {
		next()
	}
	want := []bson.Timestamp{{T: old, I: 1}, {T: old, I: 2}, {T: old, I: 3}, {T: s, I: 1}, {T: s, I: 2}, {T: s, I: 3}}
	if fmt.Sprint(got) != fmt.Sprint(want) || tl.Late != 0 {
		t.Errorf("handed out %v (%d late), want %v in order, none late", got, tl.Late, want)
	}
}
