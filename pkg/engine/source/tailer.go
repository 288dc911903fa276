package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync/atomic"
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

// Tailer reads local.oplog.rs. It keeps one cursor open and re-opens it
// only when it must: the cursor died (killed, CappedPositionLost, a new
// primary), failed, or stayed silent for QuietReopen (longer than a
// MongoDB replica set's periodic no-op interval, so it only catches a
// cursor that stopped delivering). It hands out an entry only once the
// source's majority has it (Commit, commitcap.go), so that replay never
// applies a write a failover rolls back.
//
// In Settle mode (servers whose oplog can show an entry after later ones,
// FerretDB) there is no tailable cursor to keep: the oplog is read in ts
// order with a plain query, re-run for each poll, and on such a server
// every query reads the whole oplog (no ts range or sort pushdown, and a
// tailable cursor's getMore re-runs its query too). So a poll happens only
// when it can hand out something: entries held back as too young are
// re-read once they have settled, and an idle source is polled at an
// interval that doubles from Poll up to MaxPoll. Newest then reports what
// those reads saw (see NewestFromReads) instead of reading the oplog again.
type Tailer struct {
	client *mongo.Client
	last   bson.Timestamp
	start  bson.Timestamp // the position the tailer started after
	cur    *mongo.Cursor
	// BatchEntries caps the entries returned by one Next.
	BatchEntries int
	// QuietReopen re-opens a tailable cursor that returned nothing for
	// this long (0: never).
	QuietReopen time.Duration
	// Poll is the wait before reading again when caught up; MaxPoll the
	// longest wait it grows to while a Settle-mode source stays idle
	// (Poll when not above it).
	Poll, MaxPoll time.Duration
	// Late counts late entries found (Settle mode): entries that became
	// visible after later ones had been returned. Each lengthens Settle by
	// a quarter, up to MaxSettle.
	Late int64
	// Settle, when set, holds back entries younger than this: for servers
	// whose oplog can show a later entry before an earlier one (see
	// conn.Profile.OplogHasHoles). Entries are then read in ts order and handed out only
	// once no earlier entry can still appear.
	Settle time.Duration
	// NewestFromReads makes Newest report the newest entry the tailer's
	// own reads have seen, waiting for a read that starts after the call
	// when the tailer has handed out everything it saw, instead of
	// querying the oplog: for servers where reading the newest entry reads
	// the whole oplog (conn.Profile.OplogQueriesScan). Settle mode only:
	// set it only with Settle.
	NewestFromReads bool
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
	// nextRead is when a Settle-mode read is worth running again; idle
	// counts reads in a row that found nothing new.
	nextRead time.Time
	idle     int
	// scanNewest is the highest ts the open Settle-mode read has seen.
	scanNewest bson.Timestamp
	// stats counts the tailer's queries; read by Stats from any goroutine.
	stats tailerCounters
	reads readClock
	// Commit, when set, caps what Next releases at the source's majority
	// commit point (commitcap.go): an entry a failover could still roll
	// back is never handed out. NewTailer sets it to MajorityCommit of the
	// tailer's client; nil releases every entry read.
	Commit CommitReader
	// CommitPoll is how often the commit point is read again while read
	// entries wait for it; 10ms when zero.
	CommitPoll time.Duration
	capped     capState
	// handed is what EntryAt answers from.
	handed entryLog
	// settled is what Settled reads from any goroutine: the last position
	// handed out and the look-back window then in force.
	settled settledState
	// Log, when set, gets a debug line for each Settle-mode read: how long
	// its query took, what it handed out and held back, and when the next
	// read is due (where replay's latency goes on such a server).
	Log *slog.Logger
	// read is the open Settle-mode read: when its query was sent (what
	// an entry's age is measured from) and, for that line, what it took
	// and gave.
	read readTiming
}

// readTiming is what one Settle-mode read took and gave.
type readTiming struct {
	opened time.Time     // when the find was sent
	query  time.Duration // until the find answered its first batch
	handed int
}

// settledState is the part of a Tailer's state that Settled reads.
type settledState struct {
	last     atomic.Uint64 // bson.Timestamp, T in the high half
	lookBack atomic.Int64  // time.Duration; 0 without Settle
}

func (s *settledState) set(last bson.Timestamp, lookBack time.Duration) {
	s.last.Store(uint64(last.T)<<32 | uint64(last.I))
	s.lookBack.Store(int64(lookBack))
}

// TailerStats counts what a tailer asked of the source's oplog.
type TailerStats struct {
	// Reopens counts find commands that opened a cursor on the oplog (the
	// first one included): after a cursor died, failed or went quiet, or,
	// in Settle mode, for each poll.
	Reopens int64 `json:"reopens"`
	// NewestReads counts queries for the oplog's newest position (for
	// lag); with NewestFromReads only those made when no read came in
	// time.
	NewestReads int64 `json:"newestReads"`
	// LateEntries counts entries that became visible after later ones had
	// been handed out (Settle mode); replay re-reads their documents from
	// the source.
	LateEntries int64 `json:"lateEntries"`
	// CommitReads counts reads of the majority commit point; HistoryReads
	// the entries of an earlier term looked up on the source's primary
	// to confirm they are committed (commitcap.go).
	CommitReads  int64 `json:"commitReads"`
	HistoryReads int64 `json:"historyReads"`
	// Diverged counts cursors closed because they read entries the
	// source's primary does not hold (a branch being rolled back).
	Diverged int64 `json:"diverged"`
}

type tailerCounters struct {
	reopens, newest, late, commitReads, historyReads, diverged atomic.Int64
}

// Stats returns the tailer's counters; safe to call from any goroutine.
func (t *Tailer) Stats() TailerStats {
	return TailerStats{Reopens: t.stats.reopens.Load(), NewestReads: t.stats.newest.Load(), LateEntries: t.stats.late.Load(),
		CommitReads: t.stats.commitReads.Load(), HistoryReads: t.stats.historyReads.Load(), Diverged: t.stats.diverged.Load()}
}

// lookBack is how far below the last position a Settle-mode read starts,
// so that a late entry is found rather than stepped over.
func (t *Tailer) lookBack() time.Duration { return max(10*time.Second, 2*t.Settle) }

// NewTailer returns a tailer that yields entries with ts > from, each
// once it is majority-committed (Commit).
func NewTailer(client *mongo.Client, from bson.Timestamp) *Tailer {
	t := &Tailer{client: client, last: from, start: from, BatchEntries: 1000, QuietReopen: time.Minute,
		Poll: 500 * time.Millisecond, MaxPoll: 5 * time.Second, Commit: MajorityCommit(client)}
	t.settled.set(from, 0)
	return t
}

// Settled returns the highest position at or below which the tailer will
// hand out no more entries; safe to call from any goroutine. Without
// Settle that is the last position handed out: the oplog shows its
// entries in ts order. In Settle mode an entry may become visible after
// later ones were handed out (a late entry, found while it lies within the
// look-back window of a re-read), so only positions older than the
// look-back window on the wall clock are final: a checkpoint saved above
// them, then a crash, would step over a late entry for good, since a
// tailer started after a position never hands out anything at or below
// it.
func (t *Tailer) Settled() bson.Timestamp {
	v := t.settled.last.Load()
	last := bson.Timestamp{T: uint32(v >> 32), I: uint32(v)}
	lookBack := time.Duration(t.settled.lookBack.Load())
	if lookBack == 0 {
		return last
	}
	horizon := time.Now().Add(-lookBack).Unix()
	if horizon <= 0 {
		return bson.Timestamp{}
	}
	if final := (bson.Timestamp{T: uint32(horizon)}); final.Compare(last) < 0 {
		return final
	}
	return last
}

// publishSettled makes the position and look-back window Settled reads
// current.
func (t *Tailer) publishSettled() {
	lookBack := time.Duration(0)
	if t.Settle > 0 {
		lookBack = t.lookBack()
	}
	t.settled.set(t.last, lookBack)
}

func (t *Tailer) oplog() *mongo.Collection { return t.client.Database("local").Collection("oplog.rs") }

// Position returns the ts of the last entry returned.
func (t *Tailer) Position() bson.Timestamp { return t.last }

// Next implements OplogReader.
func (t *Tailer) Next(ctx context.Context) ([]bson.Raw, error) {
	if t.cur == nil {
		if err := t.waitNextRead(ctx); err != nil {
			return nil, err
		}
		if err := t.open(ctx); err != nil {
			return nil, err
		}
	}
	if t.Settle == 0 {
		return t.nextTailable(ctx)
	}
	var out []bson.Raw
	held := false
	// Too young is judged by when the read opened, not by now: a read
	// goes on over several calls while it has more than a batch, and the
	// server computed its result (a sorted query) when it opened, so an
	// entry written since is not in it. Judged by now, the later entries
	// of a second that settled after the read opened were handed out
	// without one written in between, which then showed up late.
	cutoff := uint32(t.read.opened.Add(-t.Settle).Unix())
	var heldTS bson.Timestamp
	for len(out) < t.BatchEntries && t.cur.TryNext(ctx) {
		raw := bson.Raw(append([]byte(nil), t.cur.Current...))
		if _, _, ok := raw.Lookup("ts").TimestampOK(); !ok {
			return out, fmt.Errorf("oplog entry without a ts: %s", raw)
		}
		ts := tsOf(raw)
		if t.Commit != nil && ts.Compare(t.start) > 0 {
			ok, err := t.settleCommitted(ctx, raw)
			if err != nil {
				// The entries taken are handed out (the position has
				// moved past them); the next read reports the error again
				// if it lasts.
				t.closeCursor(ctx)
				t.reads.failed()
				if len(out) > 0 {
					t.reads.handedOut(t.last)
					return out, nil
				}
				return nil, err
			}
			if !ok {
				held, heldTS = true, ts
				break
			}
		}
		v := t.classify(ts, cutoff)
		if v == entryHold {
			held, heldTS = true, ts
			break
		}
		if v == entryTake {
			t.handed.add(raw)
			out = append(out, raw)
		}
	}
	if len(out) > 0 {
		t.lastEntry = time.Now()
		t.reads.handedOut(t.last)
		t.read.handed += len(out)
	}
	t.publishSettled()
	if err := t.endRead(ctx, held, heldTS, len(out) > 0); err != nil {
		return nil, err
	}
	if len(out) == 0 && t.Settle == 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(t.Poll):
		}
	}
	return out, nil
}

// entryVerdict is what Next does with one entry read from the cursor.
type entryVerdict int

const (
	entrySkip entryVerdict = iota // handed out already, or at or before the start
	entryTake                     // hand it out
	entryHold                     // too young: end this read before it
)

// classify decides what to do with the entry at ts read now, entries
// younger than cutoff (seconds) being too young while Settle is set, and
// records it as handed out when it is taken.
func (t *Tailer) classify(ts bson.Timestamp, cutoff uint32) entryVerdict {
	if ts.Compare(t.scanNewest) > 0 {
		t.scanNewest = ts
	}
	if ts.Compare(t.last) <= 0 {
		if t.Settle == 0 {
			return entrySkip // a cursor re-delivering what it returned
		}
		if _, ok := t.seen[ts]; ok || ts.Compare(t.start) <= 0 {
			return entrySkip
		}
		// Late: visible only now, after later entries were handed out. It
		// is returned (the reader decides how to apply it out of order)
		// and later entries are held back longer.
		t.seen[ts] = struct{}{}
		t.Late++
		t.stats.late.Add(1)
		t.Settle = min(t.Settle+t.Settle/4, t.maxSettle())
		return entryTake
	}
	if t.Settle > 0 && ts.T >= cutoff {
		// Too young: an earlier entry may still appear. Read again once
		// it has settled.
		return entryHold
	}
	t.last = ts
	if t.Settle > 0 {
		if t.seen == nil {
			t.seen = map[bson.Timestamp]struct{}{}
		}
		t.seen[ts] = struct{}{}
	}
	return entryTake
}

// endRead closes the cursor when this read is finished (an entry held
// back, an error, the cursor exhausted) or quiet for QuietReopen, and plans
// the next read. It returns the cursor's error only when the read handed
// out nothing: entries read before a failure are returned (the position
// has moved past them), and the next call re-opens after them and reports
// the failure if it persists.
func (t *Tailer) endRead(ctx context.Context, held bool, heldTS bson.Timestamp, gotAny bool) error {
	err := t.cur.Err()
	if held && err == nil {
		// The rest of this read is younger still: read only its
		// positions, so that Newest knows them.
		err = t.drainNewest(ctx)
	}
	finished := held || err != nil || t.cur.ID() == 0
	if !finished && (t.QuietReopen <= 0 || time.Since(t.lastEntry) <= t.QuietReopen) {
		return nil
	}
	t.closeCursor(ctx)
	if err == nil && finished {
		t.reads.done(t.scanNewest, t.last)
	} else {
		t.reads.failed()
	}
	t.planNextRead(gotAny, held, heldTS)
	t.logRead(held, heldTS, err)
	if err != nil && ctx.Err() == nil && !gotAny {
		return fmt.Errorf("read oplog after %v: %w", t.last, err)
	}
	return nil
}

// open runs the query of one read: in Settle mode a ts-ordered read of
// everything after the look-back window, otherwise a tailable cursor.
func (t *Tailer) open(ctx context.Context) error {
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
		// the oplog is read with a plain query, re-run for each poll.
		opts.SetSort(bson.D{{Key: "ts", Value: 1}})
	} else {
		opts.SetCursorType(options.TailableAwait).SetMaxAwaitTime(time.Second).SetSort(bson.D{{Key: "$natural", Value: 1}})
	}
	t.scanNewest = t.last
	t.reads.started()
	t.stats.reopens.Add(1)
	t.read = readTiming{opened: time.Now()}
	cur, err := t.oplog().Find(ctx, filter, opts)
	t.read.query = time.Since(t.read.opened)
	if err != nil {
		t.reads.failed()
		return fmt.Errorf("open oplog cursor after %v: %w", t.last, err)
	}
	t.cur = cur
	t.lastEntry = time.Now()
	return nil
}

// logRead logs the Settle-mode read just finished, at debug level.
func (t *Tailer) logRead(held bool, heldTS bson.Timestamp, err error) {
	if t.Log == nil || t.Settle == 0 {
		return
	}
	now := time.Now()
	attrs := []any{"querySeconds", t.read.query.Seconds(), "readSeconds", now.Sub(t.read.opened).Seconds(),
		"handedOut", t.read.handed, "last", t.last, "newestSeen", t.scanNewest, "nextReadIn", max(t.nextRead.Sub(now), 0).Seconds()}
	if held {
		attrs = append(attrs, "heldBackFrom", heldTS)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	t.Log.Debug("oplog read", attrs...)
}

// drainNewest reads the rest of an open read for the highest ts in it.
func (t *Tailer) drainNewest(ctx context.Context) error {
	for t.cur.TryNext(ctx) {
		if ts := tsOf(t.cur.Current); ts.Compare(t.scanNewest) > 0 {
			t.scanNewest = ts
		}
	}
	return t.cur.Err()
}

// planNextRead sets when a Settle-mode read is next worth running, after
// one that read to its end: once the entry it held back as too young has
// settled; Poll after one that handed out entries (it read everything
// there was); after one that found nothing new, Poll doubled for each such
// read in a row, up to MaxPoll.
func (t *Tailer) planNextRead(handed, held bool, heldTS bson.Timestamp) {
	if t.Settle == 0 {
		return
	}
	now := time.Now()
	wait := t.Poll
	switch {
	case held:
		// ts.T < now-Settle (whole seconds) releases it.
		t.idle = 0
		wait = max(time.Unix(int64(heldTS.T)+1, 0).Add(t.Settle).Sub(now), t.Poll)
	case handed:
		t.idle = 0
	default:
		wait = min(t.Poll<<min(t.idle, 16), max(t.MaxPoll, t.Poll))
		t.idle++
	}
	t.nextRead = now.Add(wait)
}

// waitNextRead waits until the next Settle-mode read is due.
func (t *Tailer) waitNextRead(ctx context.Context) error {
	d := time.Until(t.nextRead)
	if t.Settle == 0 || d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	}
	return nil
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

// Newest implements OplogReader. With NewestFromReads it reports the
// newest entry the tailer's reads have seen: at once while that is past
// what it handed out (the caller is behind anyway), otherwise from a read
// that starts after the call, so that an answer a caller deems caught up
// with was read after it asked. It queries the oplog itself only when
// within newestWait no read was under way or started (the reader is not
// being driven), or when none finished within readCap.
//
// Newest runs beside Next (the replay's lag watch): it reads only the
// tailer's configuration, its reads' record (t.reads) and its counters,
// never Settle, which Next lengthens.
func (t *Tailer) Newest(ctx context.Context) (bson.Timestamp, error) {
	if t.NewestFromReads {
		ts, ok, err := t.reads.newest(ctx, newestWait(t))
		if err != nil {
			return ts, err
		}
		if ok {
			return t.capNewest(ctx, ts)
		}
	}
	t.stats.newest.Add(1)
	at := time.Now()
	ts, err := edgeTS(ctx, t.client, -1)
	if err == nil {
		t.reads.queried(at)
	}
	if err != nil {
		return ts, err
	}
	return t.capNewest(ctx, ts)
}

// NewestReadAt returns when the read behind the last position Newest
// returned started: a caller that needs the newest position as of some
// moment (a cut-over once writes stopped) trusts only answers read after
// it.
func (t *Tailer) NewestReadAt() time.Time { return t.reads.answeredAt() }

// newestWait is how long Newest waits for the tailer's next read before it
// queries the oplog itself: longer than the tailer ever waits between two
// reads (Settle grows up to maxSettle).
func newestWait(t *Tailer) time.Duration {
	return max(t.MaxPoll, t.Poll, t.maxSettle()) + 20*time.Second
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

// OldestTS returns the ts of the oldest entry of a source's oplog (zero
// when it is empty). It asks for the first entry in natural order with a
// hint rather than a sort: MongoDB reads it from the front of the oplog
// either way, and a server that ignores the hint (FerretDB) returns a
// capped collection in natural order unsorted, reading one entry, where a
// sort would read and sort all of them.
func OldestTS(ctx context.Context, client *mongo.Client) (bson.Timestamp, error) {
	return oplogEdge(ctx, client, options.FindOne().SetHint(bson.D{{Key: "$natural", Value: 1}}))
}

// edgeTS returns the ts of the newest (dir -1) or oldest (dir 1) entry.
func edgeTS(ctx context.Context, client *mongo.Client, dir int) (bson.Timestamp, error) {
	if dir > 0 {
		return OldestTS(ctx, client)
	}
	return oplogEdge(ctx, client, options.FindOne().SetSort(bson.D{{Key: "$natural", Value: dir}}))
}

func oplogEdge(ctx context.Context, client *mongo.Client, opts *options.FindOneOptionsBuilder) (bson.Timestamp, error) {
	raw, err := client.Database("local").Collection("oplog.rs").FindOne(ctx, bson.D{}, opts.SetProjection(bson.D{{Key: "ts", Value: 1}})).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return bson.Timestamp{}, nil
	}
	if err != nil {
		// The caller says whose: the source's for replay, the target's at
		// cut-over (where a reverse sync starts).
		return bson.Timestamp{}, fmt.Errorf("read the oplog (local.oplog.rs): %w; it takes a replica set member or a server that keeps an oplog", err)
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
