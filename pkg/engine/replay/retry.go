package replay

import (
	"context"
	"time"

	"github.com/mongoferry/mongoferry/pkg/engine/sink"
)

// retry paces the attempts of a write that failed with a retryable
// error. Most back off from 200 ms, doubling, over 8 attempts (a primary
// stepping down, a network error). A FerretDB target's write lock held
// by another writer (sink.Busy) is let go within milliseconds: its
// attempts wait from 20 ms up to 1 s, 40 of them (about 35 s in all,
// near the other kind's 51 s over 8), so that a replayed write does not wait
// tens of seconds behind a lock long gone (docs/benchmarks.md, "Where
// the time goes").
type retry struct {
	attempts, busy int
	backoff, quick time.Duration
}

// wait waits before the next attempt after err; false when the attempts
// are spent (or ctx is done), and the write fails with err.
func (r *retry) wait(ctx context.Context, err error) bool {
	d, ok := r.next(err)
	if !ok {
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// next returns how long to wait before the attempt after err, and false
// when the attempts of err's kind are spent.
func (r *retry) next(err error) (time.Duration, bool) {
	if sink.Busy(err) {
		if r.busy >= 40 {
			return 0, false
		}
		r.busy++
		r.quick = min(max(2*r.quick, 20*time.Millisecond), time.Second)
		return r.quick, true
	}
	if r.attempts >= 8 {
		return 0, false
	}
	r.attempts++
	r.backoff = min(max(2*r.backoff, 200*time.Millisecond), 30*time.Second)
	return r.backoff, true
}

// n is the attempts made so far, for the log.
func (r *retry) n() int { return r.attempts + r.busy }
