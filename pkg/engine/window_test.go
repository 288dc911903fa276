package engine

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/internal/testserver"
	"github.com/mongoferry/mongoferry/pkg/engine/source"
)

// TestWindowOf: the headroom is the seconds between the oplog's oldest
// entry and the checkpoint, negative once the oplog has rolled past it,
// and absent while the checkpoint is a start position on an empty oplog
// that no entry marks.
func TestWindowOf(t *testing.T) {
	ts := func(sec uint32) bson.Timestamp { return bson.Timestamp{T: sec, I: 1} }
	for _, c := range []struct {
		name           string
		from           bson.Timestamp
		sinceEmpty     bool
		oldest, newest bson.Timestamp
		span           float64
		headroom       *float64
	}{
		{"checkpoint inside the window", ts(1000), false, ts(400), ts(1010), 610, new(600.0)},
		{"checkpoint at the oldest entry", ts(400), false, ts(400), ts(1010), 610, new(0.0)},
		{"window lost", ts(300), false, ts(400), ts(1010), 610, new(-100.0)},
		{"start on an empty oplog, entries after it", ts(300), true, ts(400), ts(1010), 610, nil},
		{"start on an empty oplog, still inside", ts(500), true, ts(400), ts(1010), 610, new(100.0)},
		{"no position yet", bson.Timestamp{}, false, ts(400), ts(1010), 610, nil},
		{"empty oplog", ts(300), false, bson.Timestamp{}, bson.Timestamp{}, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := windowOf("rs0", c.from, c.sinceEmpty, c.oldest, c.newest)
			if w.SpanSeconds != c.span {
				t.Errorf("span %v, want %v", w.SpanSeconds, c.span)
			}
			switch {
			case (w.HeadroomSeconds == nil) != (c.headroom == nil):
				t.Errorf("headroom %v, want %v", w.HeadroomSeconds, c.headroom)
			case c.headroom != nil && *w.HeadroomSeconds != *c.headroom:
				t.Errorf("headroom %v, want %v", *w.HeadroomSeconds, *c.headroom)
			}
			if w.Shard != "rs0" || w.Checkpoint != c.from {
				t.Errorf("window %+v", w)
			}
		})
	}
}

// TestReadWindowByClock reads a FerretDB oplog's window both ways: by its
// entries (a $natural sort, which FerretDB answers by reading the whole
// oplog) and by the server's clock, as the engine does on such a source.
// The clock's newest position is at or past the newest entry's second,
// and the oldest is the same.
func TestReadWindowByClock(t *testing.T) {
	srv := testserver.Start(t)
	ctx := context.Background()
	c, err := srv.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	coll := c.Database("db").Collection("c")
	for i := range 20 {
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: i}}); err != nil {
			t.Fatal(err)
		}
	}
	from := bson.Timestamp{T: 1}
	byEntries, err := readWindow(ctx, source.OplogSide{Client: c, From: from})
	if err != nil {
		t.Fatal(err)
	}
	byClock, err := readWindow(ctx, source.OplogSide{Client: c, From: from, ByClock: true})
	if err != nil {
		t.Fatal(err)
	}
	if byEntries.Oldest.IsZero() || byClock.Oldest != byEntries.Oldest {
		t.Errorf("oldest %v by the clock, %v by the entries", byClock.Oldest, byEntries.Oldest)
	}
	if byClock.Newest.T < byEntries.Newest.T || byClock.Newest.T > byEntries.Newest.T+60 {
		t.Errorf("newest %v by the clock, %v by the entries", byClock.Newest, byEntries.Newest)
	}
}
