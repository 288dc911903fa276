package replay

import (
	"errors"
	"testing"
	"time"
)

// TestRetryPacing: a FerretDB target's busy write lock is tried again
// within a second, 40 times; any other retryable error backs off from
// 200 ms, 8 times; both spend tens of seconds in all.
func TestRetryPacing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		attempts int
		longest  time.Duration
		min, max time.Duration
	}{
		{"busy lock", errors.New("(InternalError) database is locked (5) (SQLITE_BUSY)"), 40, time.Second, 25 * time.Second, 45 * time.Second},
		{"other", errors.New("connection reset by peer"), 8, 25600 * time.Millisecond, 25 * time.Second, 60 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r retry
			var total, longest time.Duration
			n := 0
			for {
				d, ok := r.next(tc.err)
				if !ok {
					break
				}
				n++
				total += d
				longest = max(longest, d)
			}
			if n != tc.attempts || longest != tc.longest || total < tc.min || total > tc.max {
				t.Errorf("%d waits, longest %s, %s in all; want %d, %s, between %s and %s", n, longest, total, tc.attempts, tc.longest, tc.min, tc.max)
			}
		})
	}
}
