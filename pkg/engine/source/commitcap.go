package source

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// The majority cap: a tailer releases an oplog entry only once it is
// majority-committed, so that replay never applies a write a failover
// rolls back (docs/reliability.md, "Failover and rollback").
//
// An entry E = (ts, t) read from the cursor is released when ts is at or
// below the commit point C = (ts, t) last read from the source, and
//   - E.t equals C.t: one primary writes a term's entries, so E is on the
//     branch C commits, at or below it; or
//   - the source's primary, asked after C was read, holds an entry with
//     E's ts and t: two oplogs that share an entry share everything before
//     it, and a later primary holds every committed entry, so E is in the
//     committed history. This covers the entries of earlier terms a tailer
//     reads after an election. When the primary does not hold E, the
//     cursor reads a branch that is being rolled back (it stayed on a
//     deposed primary): it is closed and the oplog read again from the
//     last entry released.
//
// Entries before a released one on the same cursor are released with it
// (the same oplog, read in order). Entries read but not yet released wait
// in pending, at most BatchEntries of them; a cursor that closes drops
// them, and the next read starts after the last entry released, so an
// entry that was rolled back meanwhile is never seen again.

// defaultCommitPoll is how often the commit point is read again while
// entries wait for it.
const defaultCommitPoll = 10 * time.Millisecond

// capState is what the cap keeps between reads.
type capState struct {
	point  CommitPoint
	readAt time.Time
	known  bool
	// confirmed is the highest ts read on the open cursor known to be in
	// the committed history.
	confirmed bson.Timestamp
	// pending are entries read from the open cursor, not yet released.
	pending []bson.Raw
	// misses counts reads in a row that released nothing while entries
	// waited (see commitPoll).
	misses int
}

// maxCommitPoll is the longest the commit point goes unread while entries
// wait for it: the poll doubles for each read in a row that released
// nothing (a majority down or far behind), so that a long wait costs a
// hello a second rather than a hundred.
const maxCommitPoll = time.Second

// commitPoll is the wait before the commit point is read again.
func (t *Tailer) commitPoll() time.Duration {
	p := defaultCommitPoll
	if t.CommitPoll > 0 {
		p = t.CommitPoll
	}
	return min(p<<min(max(t.capped.misses-1, 0), 10), max(maxCommitPoll, p))
}

// refreshCommit reads the commit point again when it does not allow ts
// and was read more than CommitPoll ago.
func (t *Tailer) refreshCommit(ctx context.Context, ts bson.Timestamp) error {
	c := &t.capped
	if t.Commit == nil {
		c.point, c.known = CommitPoint{}, true
		return nil
	}
	if c.known && (c.point.Allows(ts) || time.Since(c.readAt) < t.commitPoll()) {
		return nil
	}
	p, err := t.Commit(ctx)
	if err != nil {
		return fmt.Errorf("read oplog after %v: %w", t.last, err)
	}
	c.point, c.readAt, c.known = p, time.Now(), true
	t.stats.commitReads.Add(1)
	return nil
}

// errDiverged means the open cursor reads entries the source's primary
// does not hold: a branch a failover is rolling back.
var errDiverged = errors.New("the oplog read is not the source's committed history")

// releasable returns how many of the pending entries are
// majority-committed (see the comment at the top of this file).
func (t *Tailer) releasable(ctx context.Context) (int, error) {
	c := &t.capped
	if len(c.pending) == 0 {
		return 0, nil
	}
	if err := t.refreshCommit(ctx, tsOf(c.pending[len(c.pending)-1])); err != nil {
		return 0, err
	}
	if !c.point.Capped {
		return len(c.pending), nil
	}
	k := len(c.pending) - 1
	for k >= 0 && !c.point.Allows(tsOf(c.pending[k])) {
		k--
	}
	if k < 0 {
		return 0, nil
	}
	last := c.pending[k]
	ts := tsOf(last)
	if ts.Compare(c.confirmed) <= 0 || termOf(last) == c.point.Term {
		c.confirmed = maxTS(c.confirmed, ts)
		return k + 1, nil
	}
	ok, err := t.inHistory(ctx, ts, termOf(last))
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, errDiverged
	}
	c.confirmed = ts
	return k + 1, nil
}

// inHistory reports whether the source's primary holds an entry with ts
// and term t.
func (t *Tailer) inHistory(ctx context.Context, ts bson.Timestamp, term int64) (bool, error) {
	t.stats.historyReads.Add(1)
	oplog := t.client.Database("local", options.Database().SetReadPreference(readpref.Primary())).Collection("oplog.rs")
	raw, err := oplog.FindOne(ctx, bson.D{{Key: "ts", Value: ts}},
		options.FindOne().SetProjection(bson.D{{Key: "ts", Value: 1}, {Key: "t", Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read oplog entry %v to check it is committed: %w", ts, err)
	}
	return termOf(raw) == term, nil
}

// releaseCommitted hands the committed pending entries to classify,
// appending those it takes to out. A cursor found on a diverging branch
// is closed: the next read starts after the last entry released.
func (t *Tailer) releaseCommitted(ctx context.Context, out []bson.Raw) ([]bson.Raw, error) {
	n, err := t.releasable(ctx)
	if errors.Is(err, errDiverged) {
		t.stats.diverged.Add(1)
		t.closeCursor(ctx)
		return out, nil
	}
	if err != nil {
		return out, err
	}
	c := &t.capped
	if n == 0 && len(c.pending) > 0 {
		c.misses++
	} else {
		c.misses = 0
	}
	for _, raw := range c.pending[:n] {
		if t.classify(tsOf(raw), 0) == entryTake {
			t.handed.add(raw)
			out = append(out, raw)
		}
	}
	c.pending = append(c.pending[:0], c.pending[n:]...)
	return out, nil
}

// closeCursor closes the open cursor and drops what the cap holds from
// it.
func (t *Tailer) closeCursor(ctx context.Context) {
	if t.cur != nil {
		_ = t.cur.Close(context.WithoutCancel(ctx))
		t.cur = nil
	}
	t.capped.pending, t.capped.confirmed, t.capped.misses = nil, bson.Timestamp{}, 0
}

// nextTailable is Next on a tailable cursor: it reads what the cursor
// has into pending, awaiting new entries only when none is pending, then
// releases the committed ones. It returns once the cursor's current
// batch is read, so that a source writing steadily has its entries
// handed out as they come rather than once BatchEntries gathered.
func (t *Tailer) nextTailable(ctx context.Context) ([]bson.Raw, error) {
	c := &t.capped
	for len(c.pending) < t.BatchEntries && (len(c.pending) == 0 || t.cur.RemainingBatchLength() > 0) && t.cur.TryNext(ctx) {
		raw := bson.Raw(append([]byte(nil), t.cur.Current...))
		if _, _, ok := raw.Lookup("ts").TimestampOK(); !ok {
			return nil, fmt.Errorf("oplog entry without a ts: %s", raw)
		}
		c.pending = append(c.pending, raw)
	}
	out, err := t.releaseCommitted(ctx, nil)
	if len(out) > 0 {
		t.lastEntry = time.Now()
		t.reads.handedOut(t.last)
	}
	t.publishSettled()
	if t.cur != nil {
		if rerr := t.endRead(ctx, false, bson.Timestamp{}, len(out) > 0); rerr != nil && err == nil {
			err = rerr
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	wait := t.Poll
	if len(c.pending) > 0 {
		wait = t.commitPoll()
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(wait):
	}
	return nil, nil
}

// settleCommitted is the cap for a Settle-mode read, one entry at a
// time: whether the entry raw may be handed out now. One that may not
// ends the read, which runs again later.
func (t *Tailer) settleCommitted(ctx context.Context, raw bson.Raw) (bool, error) {
	c := &t.capped
	ts := tsOf(raw)
	if err := t.refreshCommit(ctx, ts); err != nil {
		return false, err
	}
	switch {
	case !c.point.Capped || ts.Compare(c.confirmed) <= 0:
		return true, nil
	case !c.point.Allows(ts):
		return false, nil
	case termOf(raw) == c.point.Term:
		c.confirmed = ts
		return true, nil
	}
	ok, err := t.inHistory(ctx, ts, termOf(raw))
	if ok {
		c.confirmed = ts
	}
	return ok, err
}

// termOf returns an entry's term (t), -1 when it has none.
func termOf(raw bson.Raw) int64 {
	if v, ok := raw.Lookup("t").AsInt64OK(); ok {
		return v
	}
	return -1
}

// capNewest lowers a newest position to the commit point, for the lag
// and the caught-up check.
func (t *Tailer) capNewest(ctx context.Context, ts bson.Timestamp) (bson.Timestamp, error) {
	if t.Commit == nil {
		return ts, nil
	}
	p, err := t.Commit(ctx)
	if err != nil {
		return bson.Timestamp{}, err
	}
	if p.Capped && p.TS.Compare(ts) < 0 {
		return p.TS, nil
	}
	return ts, nil
}

func maxTS(a, b bson.Timestamp) bson.Timestamp {
	if a.Compare(b) >= 0 {
		return a
	}
	return b
}
