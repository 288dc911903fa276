package fullsync

import (
	"testing"

	"github.com/mongoferry/mongoferry/pkg/config"
)

// TestLimiterShares checks that rateLimit stays the task's ceiling when
// several processes copy at once: each gets an equal share, rounded up,
// never zero.
func TestLimiterShares(t *testing.T) {
	for _, tc := range []struct {
		rate      int64
		processes int
		want      float64 // 0: no limiter
	}{
		{rate: 0, processes: 3, want: 0},
		{rate: 300, processes: 1, want: 300},
		{rate: 300, processes: 0, want: 300},
		{rate: 100, processes: 3, want: 34},
		{rate: 2, processes: 5, want: 1},
	} {
		spec := &config.Spec{RateLimit: tc.rate}
		spec.SetDefaults()
		l := Limiter(spec, tc.processes)
		switch {
		case tc.want == 0 && l != nil:
			t.Errorf("rateLimit %d over %d processes: a limiter of %v, want none", tc.rate, tc.processes, l.Limit())
		case tc.want != 0 && (l == nil || float64(l.Limit()) != tc.want):
			t.Errorf("rateLimit %d over %d processes: %v per process, want %v", tc.rate, tc.processes, l, tc.want)
		}
	}
}
