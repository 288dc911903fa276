package replay

import (
	"errors"
	"fmt"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
	"github.com/mongoferry/mongoferry/pkg/engine/oplog"
)

// ErrTimeSeriesReplay says writes to a time-series collection cannot be
// replayed yet. mongod logs them as inserts and $v:2 updates of the
// collection's buckets (compressed columns on 7.0+), which only apply to a
// target whose buckets are the same documents as the source's; the full
// copy writes measurements, so the target's buckets differ. Replaying
// them as updates would miss, silently, so the task stops instead.
var ErrTimeSeriesReplay = errors.New("time-series collections cannot be replayed")

// CheckReplayable refuses, before anything is copied, a task that would
// replay writes it cannot apply: a selected time-series collection.
func CheckReplayable(colls []catalog.Collection) error {
	var errs []error
	for _, c := range colls {
		if c.Type == "timeseries" {
			errs = append(errs, fmt.Errorf("%w: %s is a time-series collection: exclude it from the task (namespaces.exclude: ['%s'])"+
				" and copy it with a separate task in mode: full, or stop its writes during the sync", ErrTimeSeriesReplay, c.Source, regexpQuote(c.Source.String())))
		}
	}
	return errors.Join(errs...)
}

// refuseTimeSeries stops replay on a write to, or the creation of, a
// selected time-series collection (see ErrTimeSeriesReplay).
func (r *Replayer) refuseTimeSeries(op oplog.Entry) error {
	ns := op.Namespace()
	if op.Kind() == oplog.Command {
		if !op.Command().IsDDL() {
			return nil
		}
		d, err := op.DDL()
		if err != nil {
			return nil // Translate reports it
		}
		ns = d.NS
	} else if oplog.IsViews(ns) && op.Kind() == oplog.Insert {
		// The view half of a time-series create: {viewOn: system.buckets.<name>}.
		if on, ok := op.O().Lookup("viewOn").StringValueOK(); ok {
			ns = catalog.Namespace{DB: ns.DB, Coll: on}
		}
	}
	ts, ok := oplog.BucketsOf(ns)
	if !ok || !r.o.Mapper.Selected(ts) {
		return nil
	}
	t := op.TS()
	return fmt.Errorf("replay: %s at ts %d,%d: %w: a write to %s (its buckets, %s) cannot be replayed; the target would silently miss it."+
		" Exclude it from the task (namespaces.exclude: ['%s']) and resync, or copy it with a separate task in mode: full once its writes stop",
		op.Kind(), t.T, t.I, ErrTimeSeriesReplay, ts, ns, regexpQuote(ts.String()))
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
