package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// Time-series collections (oplog/timeseries.go has their oplog shapes).
// Replay writes a selected time-series collection's bucket inserts,
// updates and deletes to the target's buckets collection, as the source
// logged them, and applies the DDL of the collection (oplog.TimeSeriesDDL):
// its create makes the time-series collection on the target with the
// source's options, so its buckets are the source's from then on. A
// bucket update with a binary diff (8.0's compressed columns) re-reads
// the bucket from the source's buckets collection.
//
// What is not done: the full copy of a time-series collection. The copy
// reads and writes measurements, so the target's buckets would differ
// from the source's and the bucket writes replayed after it would miss
// or double measurements. A task that copies is refused before the copy
// when it selects a time-series collection (CheckReplayable); one the
// source creates during the sync is replayed.

// ErrTimeSeriesReplay says a task would copy a time-series collection and
// then replay its writes, which is not supported (see above).
var ErrTimeSeriesReplay = errors.New("time-series collections cannot be copied and then replayed")

// CheckReplayable refuses, before anything is copied, a task that copies
// a selected time-series collection (copies: the task's mode includes a
// full copy) and then replays it, and one that filters a time-series
// collection's documents (ErrTimeSeriesFilter). A task in mode:
// incremental replays one onto the target's time-series collection of
// that name, which must hold the source's buckets as of the task's start
// (mongodump and mongorestore of the collection copy its buckets as they
// are).
func CheckReplayable(colls []catalog.Collection, copies bool) error {
	var errs []error
	for _, c := range colls {
		if c.Type == "timeseries" && c.Filter != nil {
			errs = append(errs, errTimeSeriesFilter(c.Source))
			continue
		}
		if copies && c.Type == "timeseries" {
			errs = append(errs, fmt.Errorf("%w: %s is a time-series collection, and its full copy would write measurements, not the source's buckets, "+
				"which the replayed bucket writes need: exclude it from the task (namespaces.exclude: ['%s']) and copy it with mongodump/mongorestore "+
				"(which copy its buckets), or stop its writes and copy it with a separate task in mode: full",
				ErrTimeSeriesReplay, c.Source, regexpQuote(c.Source.String())))
		}
	}
	return errors.Join(errs...)
}

// bucketsTarget returns the target's buckets collection of time-series
// collection ts (a source name): that of its target name.
func (r *Replayer) bucketsTarget(ts catalog.Namespace) catalog.Namespace {
	return oplog.BucketsNamespace(r.o.Mapper.Target(ts))
}

// applyTimeSeriesDDL applies DDL logged on the buckets collection of
// time-series collection ts (oplog.TimeSeriesDDL): what acts on ts goes
// through applyDDL under ts's name, what stays on the buckets acts on
// the target's buckets.
func (r *Replayer) applyTimeSeriesDDL(ctx context.Context, d oplog.DDL, ts catalog.Namespace) error {
	if !r.o.Mapper.Selected(ts) {
		r.count("filtered", true)
		return nil
	}
	ds, err := oplog.TimeSeriesDDL(d, ts)
	if err != nil {
		return fmt.Errorf("replay %s on %s: %w", d.Class, d.NS, err)
	}
	for _, x := range ds {
		if _, onBuckets := oplog.BucketsOf(x.NS); !onBuckets {
			err = r.applyDDL(ctx, x)
		} else {
			mapped := x
			mapped.NS = r.bucketsTarget(ts)
			err = r.applyMapped(ctx, x, mapped)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// regexpQuote escapes the dots of a namespace for namespaces.exclude.
func regexpQuote(s string) string {
	out := make([]byte, 0, len(s)+4)
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}
