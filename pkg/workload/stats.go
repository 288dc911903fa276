package workload

import (
	"context"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Stats counts what a phase did. Reads, Updates, Inserts and Deletes count
// completed operations, including those that found no document (NotFound
// counts these); Errors counts failed ones, which are in no other count.
// In the load phase Inserts counts documents and the latencies are those of
// whole insertMany batches.
type Stats struct {
	// Phase is "load", "run" or "baseline".
	Phase string
	// Reads, Updates, Inserts and Deletes are completed operations.
	Reads, Updates, Inserts, Deletes int64
	// NotFound counts reads, updates and deletes whose key did not exist
	// (deleted earlier in a mixed run); they are not errors.
	NotFound int64
	// Errors counts failed operations (documents in the load phase).
	Errors int64
	// Elapsed is the time since the phase started.
	Elapsed time.Duration
	// OpsPerSec is Ops()/Elapsed.
	OpsPerSec float64
	// P50, P99 and Max are operation (batch) latencies, within 3%.
	P50, P99, Max time.Duration
}

// Ops returns the number of completed operations.
func (s Stats) Ops() int64 { return s.Reads + s.Updates + s.Inserts + s.Deletes }

// String is a one-line summary.
func (s Stats) String() string {
	return fmt.Sprintf("%s: %d ops in %s (%.0f ops/s): read %d, update %d, insert %d, delete %d, not found %d, errors %d; latency p50 %s, p99 %s, max %s",
		s.Phase, s.Ops(), s.Elapsed.Round(time.Millisecond), s.OpsPerSec, s.Reads, s.Updates, s.Inserts, s.Deletes,
		s.NotFound, s.Errors, roundLatency(s.P50), roundLatency(s.P99), roundLatency(s.Max))
}

func roundLatency(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

// opKind indexes counters.
type opKind int

const (
	opRead opKind = iota
	opUpdate
	opInsert
	opDelete
	numKinds
)

func (k opKind) String() string {
	return [...]string{"read", "update", "insert", "delete"}[k]
}

// Latencies are kept in a log-linear histogram of microseconds: values
// below 64 exactly, above in 32 sub-buckets per power of two (at most 3%
// off), up to about 2^40 us (12 days).
const (
	histLinear = 64
	histSub    = 32
	histMaxExp = 34
	histSize   = histLinear + histMaxExp*histSub
)

// histogram is safe for concurrent Record and snapshot.
type histogram struct {
	counts [histSize]atomic.Int64
	max    atomic.Int64
}

func histIndex(us int64) int {
	if us < histLinear {
		if us < 0 {
			return 0
		}
		return int(us)
	}
	e := bits.Len64(uint64(us)) - 6 // us>>e is in [32, 64)
	idx := histLinear + (e-1)*histSub + int(us>>e) - histSub
	if idx >= histSize {
		return histSize - 1
	}
	return idx
}

// histValue returns the middle of bucket idx in microseconds.
func histValue(idx int) int64 {
	if idx < histLinear {
		return int64(idx)
	}
	e := (idx-histLinear)/histSub + 1
	m := int64((idx-histLinear)%histSub + histSub)
	return m<<e + (int64(1)<<e)/2
}

func (h *histogram) record(d time.Duration) {
	us := d.Microseconds()
	h.counts[histIndex(us)].Add(1)
	for {
		m := h.max.Load()
		if us <= m || h.max.CompareAndSwap(m, us) {
			return
		}
	}
}

// quantiles returns the latencies at the given quantiles (0..1, ascending)
// of the merged histograms, and the maximum.
func quantiles(hs []*histogram, qs ...float64) ([]time.Duration, time.Duration) {
	var merged [histSize]int64
	var total, maxUS int64
	for _, h := range hs {
		for i := range merged {
			c := h.counts[i].Load()
			merged[i] += c
			total += c
		}
		maxUS = max(maxUS, h.max.Load())
	}
	out := make([]time.Duration, len(qs))
	if total == 0 {
		return out, 0
	}
	var seen int64
	qi := 0
	for i, c := range merged {
		seen += c
		for qi < len(qs) && float64(seen) >= qs[qi]*float64(total) && seen > 0 {
			out[qi] = time.Duration(min(histValue(i), maxUS)) * time.Microsecond
			qi++
		}
	}
	for ; qi < len(qs); qi++ {
		out[qi] = time.Duration(maxUS) * time.Microsecond
	}
	return out, time.Duration(maxUS) * time.Microsecond
}

// tracker collects a phase's counters and latencies from its workers.
type tracker struct {
	phase    string
	start    time.Time
	ops      [numKinds]atomic.Int64
	notFound atomic.Int64
	errors   atomic.Int64
	hists    []*histogram

	mu       sync.Mutex
	firstErr error
}

func newTracker(phase string, workers int) *tracker {
	t := &tracker{phase: phase, start: time.Now(), hists: make([]*histogram, workers)}
	for i := range t.hists {
		t.hists[i] = new(histogram)
	}
	return t
}

// fail counts n failed operations and keeps the first error.
func (t *tracker) fail(n int64, err error) {
	t.errors.Add(n)
	t.mu.Lock()
	if t.firstErr == nil {
		t.firstErr = err
	}
	t.mu.Unlock()
}

func (t *tracker) err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.firstErr
}

// snapshot returns the stats so far.
func (t *tracker) snapshot() Stats {
	s := Stats{
		Phase:    t.phase,
		Reads:    t.ops[opRead].Load(),
		Updates:  t.ops[opUpdate].Load(),
		Inserts:  t.ops[opInsert].Load(),
		Deletes:  t.ops[opDelete].Load(),
		NotFound: t.notFound.Load(),
		Errors:   t.errors.Load(),
		Elapsed:  time.Since(t.start),
	}
	if secs := s.Elapsed.Seconds(); secs > 0 {
		s.OpsPerSec = float64(s.Ops()) / secs
	}
	q, m := quantiles(t.hists, 0.50, 0.99)
	s.P50, s.P99, s.Max = q[0], q[1], m
	return s
}

// reportProgress calls progress every interval until stop is closed.
func (t *tracker) reportProgress(progress func(Stats), interval time.Duration, stop <-chan struct{}, done *sync.WaitGroup) {
	if progress == nil {
		return
	}
	done.Add(1)
	go func() {
		defer done.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				progress(t.snapshot())
			}
		}
	}()
}

// limiter spaces operations to a rate shared by all workers. Idle time is
// not saved up: after a pause the next operation goes at once, not a burst.
type limiter struct {
	mu       sync.Mutex
	interval float64 // nanoseconds per operation
	next     time.Time
}

// newLimiter returns nil (no limit) for a rate of 0.
func newLimiter(rate float64) *limiter {
	if rate <= 0 {
		return nil
	}
	return &limiter{interval: float64(time.Second) / rate}
}

// wait blocks until n more operations may start.
func (l *limiter) wait(ctx context.Context, n int) error {
	if l == nil {
		return ctx.Err()
	}
	l.mu.Lock()
	now := time.Now()
	at := l.next
	if at.Before(now) {
		at = now
	}
	l.next = at.Add(time.Duration(l.interval * float64(n)))
	l.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
