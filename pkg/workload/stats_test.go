package workload

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	tests := []struct {
		name     string
		values   []time.Duration
		p50, p99 time.Duration
	}{
		{"empty", nil, 0, 0},
		{"one", []time.Duration{5 * time.Millisecond}, 5 * time.Millisecond, 5 * time.Millisecond},
		{"small exact", []time.Duration{10 * time.Microsecond, 20 * time.Microsecond, 30 * time.Microsecond}, 20 * time.Microsecond, 30 * time.Microsecond},
		{"ramp", ramp(1000, time.Millisecond), 500 * time.Millisecond, 990 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := new(histogram), new(histogram)
			for i, v := range tc.values {
				[]*histogram{a, b}[i%2].record(v)
			}
			q, maxD := quantiles([]*histogram{a, b}, 0.5, 0.99)
			for i, want := range []time.Duration{tc.p50, tc.p99} {
				if !near(q[i], want, 0.04) {
					t.Errorf("quantile %d = %s, want %s within 4%%", i, q[i], want)
				}
			}
			if len(tc.values) > 0 && maxD != slicesMax(tc.values).Truncate(time.Microsecond) {
				t.Errorf("max = %s, want %s", maxD, slicesMax(tc.values))
			}
		})
	}
}

func TestHistIndexMonotonic(t *testing.T) {
	prev := -1
	for us := int64(0); us < 1<<22; us += 1 + us/100 {
		idx := histIndex(us)
		if idx < prev {
			t.Fatalf("histIndex(%d) = %d < %d", us, idx, prev)
		}
		if v := histValue(idx); !near(time.Duration(v), time.Duration(us), 0.04) && us > 0 {
			t.Fatalf("histValue(histIndex(%d)) = %d, more than 4%% off", us, v)
		}
		prev = idx
	}
	if histIndex(math.MaxInt64) != histSize-1 || histIndex(-5) != 0 {
		t.Error("out-of-range values are not clamped")
	}
}

func TestStatsString(t *testing.T) {
	s := Stats{Phase: "run", Reads: 3, Updates: 2, NotFound: 1, Errors: 1, Elapsed: time.Second, OpsPerSec: 5, P50: time.Millisecond}
	if s.Ops() != 5 {
		t.Errorf("Ops() = %d", s.Ops())
	}
	want := "run: 5 ops in 1s (5 ops/s): read 3, update 2, insert 0, delete 0, not found 1, errors 1; latency p50 1ms, p99 0s, max 0s"
	if got := s.String(); got != want {
		t.Errorf("String() = %q\nwant %q", got, want)
	}
}

// TestLimiter checks the lower bound only: 21 operations at 1000/s cannot
// finish in under 20 ms. (An upper bound would depend on the machine.)
func TestLimiter(t *testing.T) {
	if newLimiter(0) != nil {
		t.Fatal("rate 0 should mean no limiter")
	}
	var none *limiter
	if err := none.wait(context.Background(), 5); err != nil {
		t.Fatal(err)
	}
	l := newLimiter(1000)
	start := time.Now()
	for range 21 {
		if err := l.wait(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Errorf("21 operations at 1000/s took %s, want at least 20ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := newLimiter(0.001)
	_ = slow.wait(ctx, 1) // the first goes at once
	if err := slow.wait(ctx, 1); err == nil {
		t.Error("wait on a cancelled context returned nil")
	}
}

func ramp(n int, step time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * step
	}
	return out
}

func slicesMax(v []time.Duration) time.Duration {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func near(got, want time.Duration, rel float64) bool {
	return math.Abs(float64(got-want)) <= rel*float64(want)+float64(time.Microsecond)
}
