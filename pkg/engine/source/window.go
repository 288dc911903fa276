package source

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// StartPosition returns where replay starts when it is recorded before a
// copy: the newest majority-committed entry of the source's oplog
// (CommittedTS), or, when the oplog is
// empty (a new deployment, or a server that writes no periodic no-ops,
// such as FerretDB), the server's current time (see ServerTime), with
// emptyOplog set. Either way it is a real point in time: every entry
// written later has a higher ts.
func StartPosition(ctx context.Context, client *mongo.Client) (ts bson.Timestamp, emptyOplog bool, err error) {
	ts, err = CommittedTS(ctx, client)
	if err != nil || !ts.IsZero() {
		return ts, false, err
	}
	ts, err = ServerTime(ctx, client)
	return ts, true, err
}

// StartPositionByClock is StartPosition for servers where reading the
// newest oplog entry reads the whole oplog (conn.Profile.OplogQueriesScan;
// seconds on FerretDB with a busy oplog): the start of the server's
// current second (SecondStart), whether or not the oplog holds entries,
// which costs a hello or two, at most a second's wait, and one read of
// the oldest entry (which such a server answers from the front of the
// oplog). Every entry written after the call has a higher ts; the entries
// of that second written before it, a few milliseconds' worth, are
// replayed too, which the overlap between copy and replay tolerates. When
// every entry in the oplog is of the current second (the clock's position
// is below them all), the oldest entry is the position instead: it was
// written before the copy starts, and the window check then finds the
// oplog holding it.
func StartPositionByClock(ctx context.Context, client *mongo.Client) (ts bson.Timestamp, emptyOplog bool, err error) {
	oldest, err := OldestTS(ctx, client)
	if err != nil {
		return bson.Timestamp{}, false, err
	}
	if ts, err = SecondStart(ctx, client); err != nil {
		return bson.Timestamp{}, false, err
	}
	if oldest.IsZero() {
		return ts, true, nil
	}
	if ts.Compare(oldest) < 0 {
		ts = oldest
	}
	return ts, false, nil
}

// secondStartSlack is how far into a second the server's clock may be for
// SecondStart to take that second's start rather than wait for the next.
const secondStartSlack = 30 * time.Millisecond

// SecondStart is ServerTime read near the start of a second: where the
// server reports only its clock (hello's localTime, no cluster time), it
// waits for the server's next second when the clock is more than
// secondStartSlack into the current one, so that the entries of the
// returned second written before the call are those of a few
// milliseconds rather than of up to a whole second. A server that reports
// a cluster time answers at once with it.
//
// Entries written after the call have a higher ts: on FerretDB an entry's
// ts is the clock after its write committed, with a counter that is never
// 0, so an entry at or below the returned (second, 0) has its document
// written before the call.
func SecondStart(ctx context.Context, client *mongo.Client) (bson.Timestamp, error) {
	for attempt := 0; ; attempt++ {
		raw, err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
		if err != nil {
			return bson.Timestamp{}, fmt.Errorf("read the source's current time (hello): %w", err)
		}
		ms, clockOnly := raw.Lookup("localTime").DateTimeOK()
		if _, _, ok := raw.Lookup("operationTime").TimestampOK(); ok {
			clockOnly = false
		}
		if _, _, ok := raw.Lookup("$clusterTime", "clusterTime").TimestampOK(); ok {
			clockOnly = false
		}
		into := time.Duration(ms%1000) * time.Millisecond
		if !clockOnly || into <= secondStartSlack || attempt == 2 {
			return serverTimeFrom(raw)
		}
		wait := time.NewTimer(time.Second - into + time.Millisecond)
		select {
		case <-ctx.Done():
			wait.Stop()
			return bson.Timestamp{}, ctx.Err()
		case <-wait.C:
		}
	}
}

// ServerTime returns the server's current time as a timestamp: the
// operationTime or $clusterTime of a hello reply (a replica set or
// mongos), else its clock (hello's localTime) at the start of the current
// second, so that every oplog entry written after the call has a higher
// ts.
func ServerTime(ctx context.Context, client *mongo.Client) (bson.Timestamp, error) {
	raw, err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
	if err != nil {
		return bson.Timestamp{}, fmt.Errorf("read the source's current time (hello): %w", err)
	}
	return serverTimeFrom(raw)
}

func serverTimeFrom(hello bson.Raw) (bson.Timestamp, error) {
	if t, i, ok := hello.Lookup("operationTime").TimestampOK(); ok && t > 0 {
		return bson.Timestamp{T: t, I: i}, nil
	}
	if t, i, ok := hello.Lookup("$clusterTime", "clusterTime").TimestampOK(); ok && t > 0 {
		return bson.Timestamp{T: t, I: i}, nil
	}
	if ms, ok := hello.Lookup("localTime").DateTimeOK(); ok && ms > 0 {
		return bson.Timestamp{T: uint32(ms / 1000)}, nil
	}
	return bson.Timestamp{}, errors.New("the source reports neither a cluster time nor its clock (hello: operationTime, $clusterTime, localTime): " +
		"its oplog is empty, so replay has no position to start from; write to the source once and run the task again")
}

// CheckWindow fails with ErrOplogWindowLost when the source's oplog may no
// longer hold every entry after from: resuming would silently lose them.
//
// When from is an entry's ts, the oplog holds everything after it while
// its oldest entry is at or before from. When from is a start position
// taken on an empty oplog (sinceEmpty: the server's time, no entry), the
// oldest entry is necessarily after it; nothing is lost as long as the
// oplog has not been trimmed since it was empty, which holds while it is
// under half its capped size (a capped collection is trimmed only past its
// size, by a small share of its oldest entries).
func CheckWindow(ctx context.Context, client *mongo.Client, from bson.Timestamp, sinceEmpty bool) error {
	oldest, err := OldestTS(ctx, client)
	if err != nil {
		return err
	}
	if oldest.IsZero() || from.Compare(oldest) >= 0 {
		return nil
	}
	const resync = "resync: delete the task's checkpoint (database mongoferry, or the task) and run it again, and enlarge the source's oplog so a copy fits in its window"
	if !sinceEmpty {
		return fmt.Errorf("%w: the task must resume after %s but the source's oldest oplog entry is %s; %s",
			ErrOplogWindowLost, formatTS(from), formatTS(oldest), resync)
	}
	st, err := oplogStats(ctx, client)
	if err != nil {
		return err
	}
	if st.untrimmed() {
		return nil
	}
	return fmt.Errorf("%w: the source's oplog was empty when the task started at %s, and it has since filled to %s (%d bytes of %d, %d entries), "+
		"so entries written after the start may have been trimmed (its oldest entry is %s); %s",
		ErrOplogWindowLost, formatTS(from), st.fill(), st.Size, st.MaxSize, st.Count, formatTS(oldest), resync)
}

// cappedStats is the part of collStats on local.oplog.rs that says how
// full the oplog is.
type cappedStats struct {
	Size, MaxSize, Count, Max int64
}

// untrimmed reports whether the oplog cannot have been trimmed since it
// was empty: it holds less than half its capped size (and half its
// capped count, when it has one).
func (s cappedStats) untrimmed() bool {
	return s.MaxSize > 0 && 2*s.Size < s.MaxSize && (s.Max <= 0 || 2*s.Count < s.Max)
}

func (s cappedStats) fill() string {
	if s.MaxSize <= 0 {
		return "an unknown share of its capped size"
	}
	return fmt.Sprintf("%.0f%% of its capped size", 100*float64(s.Size)/float64(s.MaxSize))
}

func oplogStats(ctx context.Context, client *mongo.Client) (cappedStats, error) {
	raw, err := client.Database("local").RunCommand(ctx, bson.D{{Key: "collStats", Value: "oplog.rs"}}).Raw()
	if err != nil {
		return cappedStats{}, fmt.Errorf("read the size of the source's oplog (collStats local.oplog.rs): %w", err)
	}
	var st cappedStats
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"size", &st.Size}, {"maxSize", &st.MaxSize}, {"count", &st.Count}, {"max", &st.Max}} {
		if v, ok := raw.Lookup(f.name).AsInt64OK(); ok {
			*f.dst = v
		}
	}
	return st, nil
}
