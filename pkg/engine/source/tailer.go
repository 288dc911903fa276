package source

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ErrOplogWindowLost means the source's oplog no longer holds the position
// a task must resume from: entries were overwritten before they were read.
var ErrOplogWindowLost = errors.New("OplogWindowLost: the source's oplog no longer holds the checkpoint")

// OplogReader yields raw oplog entries in order, from after a position.
// The tailer implements it on a live oplog; tests implement it with
// scripted entries.
type OplogReader interface {
	// Next returns the next entries (possibly none, after waiting a little
	// when caught up). Returned documents are owned by the caller.
	Next(ctx context.Context) ([]bson.Raw, error)
	// Newest returns the newest position the source has written, for lag.
	Newest(ctx context.Context) (bson.Timestamp, error)
}

// Tailer reads local.oplog.rs with a tailable cursor. When the cursor dies
// (killed, CappedPositionLost, a new primary) or goes quiet, it re-opens
// from the last position it returned: servers whose tailable cursors never
// deliver later entries (FerretDB) are read by re-opening too.
type Tailer struct {
	client *mongo.Client
	last   bson.Timestamp
	start  bson.Timestamp // the position the tailer started after
	cur    *mongo.Cursor
	// BatchEntries caps the entries returned by one Next.
	BatchEntries int
	// QuietReopen re-opens a cursor that returned nothing for this long.
	QuietReopen time.Duration
	// Poll is the wait between re-opens when caught up.
	Poll time.Duration
	// Late counts late entries found (Settle mode): entries that became
	// visible after later ones had been returned. Each lengthens Settle by
	// a quarter, up to MaxSettle.
	Late int64
	// Settle, when set, holds back entries younger than this: for servers
	// whose oplog can show a later entry before an earlier one (see
	// conn.Profile.OplogHasHoles). Entries are then read in ts order and handed out only
	// once no earlier entry can still appear.
	Settle time.Duration
	// SkipDatabases are left out by the server: entries on their
	// collections are never applied (local, config, the checkpoint
	// database). Commands and no-ops always come through.
	SkipDatabases []string
	// MaxSettle bounds how far Settle grows after late entries; 5s when
	// zero. Late entries are still applied correctly (the reader's caller
	// re-reads their documents); a longer Settle only makes them rarer, at
	// the price of lag.
	MaxSettle time.Duration
	lastEntry time.Time
	// seen holds the positions handed out within the look-back window
	// (Settle mode only): a re-read that finds an entry at or below last
	// which is not in seen has found a late entry, one that became visible
	// after later entries had been handed out.
	seen map[bson.Timestamp]struct{}
}

// lookBack is how far below the last position a Settle-mode read starts,
// so that a late entry is found rather than stepped over.
func (t *Tailer) lookBack() time.Duration { return max(10*time.Second, 2*t.Settle) }

// NewTailer returns a tailer that yields entries with ts > from.
func NewTailer(client *mongo.Client, from bson.Timestamp) *Tailer {
	return &Tailer{client: client, last: from, start: from, BatchEntries: 1000, QuietReopen: 2 * time.Second, Poll: 500 * time.Millisecond}
}

func (t *Tailer) oplog() *mongo.Collection { return t.client.Database("local").Collection("oplog.rs") }

// Position returns the ts of the last entry returned.
func (t *Tailer) Position() bson.Timestamp { return t.last }

// Next implements OplogReader.
func (t *Tailer) Next(ctx context.Context) ([]bson.Raw, error) {
	if t.cur == nil {
		from := t.last
		if t.Settle > 0 {
			// Re-read the look-back window: an entry that appeared in it
			// since is late, and is handed out rather than lost.
			from = bson.Timestamp{T: t.last.T - min(t.last.T, uint32(t.lookBack()/time.Second))}
			t.pruneSeen(from)
		}
		filter := bson.D{{Key: "ts", Value: bson.D{{Key: "$gt", Value: from}}}}
		if len(t.SkipDatabases) > 0 {
			skip := make(bson.A, 0, len(t.SkipDatabases))
			for _, db := range t.SkipDatabases {
				skip = append(skip, bson.Regex{Pattern: "^" + regexp.QuoteMeta(db) + `\.`})
			}
			filter = append(filter, bson.E{Key: "ns", Value: bson.D{{Key: "$nin", Value: skip}}})
		}
		opts := options.Find().SetBatchSize(int32(t.BatchEntries))
		if t.Settle > 0 {
			// A tailable cursor only reads in $natural order; in ts order
			// the oplog is read with a plain query, re-opened every time.
			opts.SetSort(bson.D{{Key: "ts", Value: 1}})
		} else {
			opts.SetCursorType(options.TailableAwait).SetMaxAwaitTime(time.Second).SetSort(bson.D{{Key: "$natural", Value: 1}})
		}
		cur, err := t.oplog().Find(ctx, filter, opts)
		if err != nil {
			return nil, fmt.Errorf("open oplog cursor after %v: %w", t.last, err)
		}
		t.cur = cur
		t.lastEntry = time.Now()
	}
	var out []bson.Raw
	held := false
	cutoff := uint32(time.Now().Add(-t.Settle).Unix())
	for len(out) < t.BatchEntries && t.cur.TryNext(ctx) {
		raw := bson.Raw(append([]byte(nil), t.cur.Current...))
		if _, _, ok := raw.Lookup("ts").TimestampOK(); !ok {
			return out, fmt.Errorf("oplog entry without a ts: %s", raw)
		}
		ts := tsOf(raw)
		if ts.Compare(t.last) <= 0 {
			if t.Settle == 0 {
				continue // a cursor re-delivering what it returned
			}
			if _, ok := t.seen[ts]; ok || ts.Compare(t.start) <= 0 {
				continue // handed out already, or at or before the start
			}
			// Late: visible only now, after later entries were handed
			// out. It is returned (the reader decides how to apply it out
			// of order) and later entries are held back longer.
			t.seen[ts] = struct{}{}
			t.Late++
			t.Settle = min(t.Settle+t.Settle/4, t.maxSettle())
			out = append(out, raw)
			continue
		}
		if t.Settle > 0 && ts.T >= cutoff {
			// Too young: an earlier entry may still appear. Read again
			// from the last entry handed out.
			held = true
			break
		}
		t.last = ts
		if t.Settle > 0 {
			if t.seen == nil {
				t.seen = map[bson.Timestamp]struct{}{}
			}
			t.seen[ts] = struct{}{}
		}
		out = append(out, raw)
	}
	if len(out) > 0 {
		t.lastEntry = time.Now()
	}
	err := t.cur.Err()
	if held || err != nil || t.cur.ID() == 0 || time.Since(t.lastEntry) > t.QuietReopen {
		_ = t.cur.Close(context.WithoutCancel(ctx))
		t.cur = nil
		// Entries read before the failure are returned (the position has
		// moved past them); the next call re-opens after them and reports
		// the failure if it persists.
		if err != nil && ctx.Err() == nil && len(out) == 0 {
			return nil, fmt.Errorf("read oplog after %v: %w", t.last, err)
		}
	}
	if len(out) == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(t.Poll):
		}
	}
	return out, nil
}

func (t *Tailer) maxSettle() time.Duration {
	if t.MaxSettle > 0 {
		return t.MaxSettle
	}
	return 5 * time.Second
}

// pruneSeen forgets positions at or below from: a re-read no longer
// returns them.
func (t *Tailer) pruneSeen(from bson.Timestamp) {
	for ts := range t.seen {
		if ts.Compare(from) <= 0 {
			delete(t.seen, ts)
		}
	}
}

// Newest implements OplogReader.
func (t *Tailer) Newest(ctx context.Context) (bson.Timestamp, error) {
	return edgeTS(ctx, t.client, -1)
}

// ClusterTime returns the deployment's current cluster time (from a
// replica set's or mongos's $clusterTime): where a change stream starts
// when the oplog itself may not be readable.
func ClusterTime(ctx context.Context, client *mongo.Client) (bson.Timestamp, error) {
	raw, err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		return bson.Timestamp{}, fmt.Errorf("hello: %w", err)
	}
	t, i, ok := raw.Lookup("$clusterTime", "clusterTime").TimestampOK()
	if !ok {
		return bson.Timestamp{}, errors.New("the source reports no cluster time: change streams need a replica set or a sharded cluster (MongoDB 6.0 or later)")
	}
	return bson.Timestamp{T: t, I: i}, nil
}

// NewestTS returns the ts of the newest entry of a source's oplog: the
// position replay starts from when it is recorded before a copy.
func NewestTS(ctx context.Context, client *mongo.Client) (bson.Timestamp, error) {
	return edgeTS(ctx, client, -1)
}

func edgeTS(ctx context.Context, client *mongo.Client, dir int) (bson.Timestamp, error) {
	raw, err := client.Database("local").Collection("oplog.rs").FindOne(ctx, bson.D{},
		options.FindOne().SetSort(bson.D{{Key: "$natural", Value: dir}}).SetProjection(bson.D{{Key: "ts", Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return bson.Timestamp{}, nil
	}
	if err != nil {
		return bson.Timestamp{}, fmt.Errorf("read the source's oplog (local.oplog.rs): %w; replay needs a replica set member or a server that keeps an oplog", err)
	}
	return tsOf(raw), nil
}

func tsOf(raw bson.Raw) bson.Timestamp {
	t, i, _ := raw.Lookup("ts").TimestampOK()
	return bson.Timestamp{T: t, I: i}
}

func formatTS(ts bson.Timestamp) string {
	return fmt.Sprintf("%s (ts %d,%d)", time.Unix(int64(ts.T), 0).UTC().Format(time.RFC3339), ts.T, ts.I)
}
