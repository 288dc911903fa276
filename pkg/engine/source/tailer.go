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
	cur    *mongo.Cursor
	// BatchEntries caps the entries returned by one Next.
	BatchEntries int
	// QuietReopen re-opens a cursor that returned nothing for this long.
	QuietReopen time.Duration
	// Poll is the wait between re-opens when caught up.
	Poll time.Duration
	// Settle, when set, holds back entries younger than this: for servers
	// whose oplog can show a later entry before an earlier one (see
	// OplogHasHoles). Entries are then read in ts order and handed out only
	// once no earlier entry can still appear.
	Settle time.Duration
	// SkipDatabases are left out by the server: entries on their
	// collections are never applied (local, config, the checkpoint
	// database). Commands and no-ops always come through.
	SkipDatabases []string
	lastEntry     time.Time
}

// NewTailer returns a tailer that yields entries with ts > from.
func NewTailer(client *mongo.Client, from bson.Timestamp) *Tailer {
	return &Tailer{client: client, last: from, BatchEntries: 1000, QuietReopen: 2 * time.Second, Poll: 500 * time.Millisecond}
}

func (t *Tailer) oplog() *mongo.Collection { return t.client.Database("local").Collection("oplog.rs") }

// Position returns the ts of the last entry returned.
func (t *Tailer) Position() bson.Timestamp { return t.last }

// Next implements OplogReader.
func (t *Tailer) Next(ctx context.Context) ([]bson.Raw, error) {
	if t.cur == nil {
		filter := bson.D{{Key: "ts", Value: bson.D{{Key: "$gt", Value: t.last}}}}
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
		if t.Settle > 0 && ts.T >= cutoff {
			// Too young: an earlier entry may still appear. Read again
			// from the last entry handed out.
			held = true
			break
		}
		t.last = ts
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

// Newest implements OplogReader.
func (t *Tailer) Newest(ctx context.Context) (bson.Timestamp, error) {
	return edgeTS(ctx, t.client, -1)
}

// OplogHasHoles reports whether the server may make an oplog entry visible
// before an entry with a lower ts. MongoDB never does (oplog visibility
// waits for earlier writes); FerretDB writes each oplog entry after its
// write, outside any ordering, so concurrent writers can leave a hole a
// tailer would step over.
func OplogHasHoles(ctx context.Context, client *mongo.Client) bool {
	raw, err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		return false
	}
	_, ferret := raw.Lookup("ferretdbVersion").StringValueOK()
	return ferret
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

// CheckWindow fails with ErrOplogWindowLost when the oldest entry of the
// source's oplog is newer than from, i.e. entries after from may have been
// overwritten and resuming would silently lose them.
func CheckWindow(ctx context.Context, client *mongo.Client, from bson.Timestamp) error {
	oldest, err := edgeTS(ctx, client, 1)
	if err != nil {
		return err
	}
	if from.Compare(oldest) < 0 {
		return fmt.Errorf("%w: the task must resume after %s but the source's oldest oplog entry is %s; "+
			"resync: delete the task's checkpoint (database mongoferry, or the task) and run it again, and enlarge the source's oplog so a copy fits in its window",
			ErrOplogWindowLost, formatTS(from), formatTS(oldest))
	}
	return nil
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
