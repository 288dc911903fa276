package peer

import (
	"strings"
	"testing"
	"time"
)

func TestRatio(t *testing.T) {
	for _, tc := range []struct {
		name      string
		peer, our float64
		lowerWins bool
		want      string
	}{
		{"time, ours shorter", 68.9, 4.2, true, "16.4x sooner"},
		{"time, ours longer", 45.3, 132.2, true, "2.9x later"},
		{"rate", 4937, 3666, false, "0.74x"},
		{"a side without a figure", 0, 3666, false, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ratio(tc.peer, tc.our, tc.lowerWins, "sooner", "later"); got != tc.want {
				t.Errorf("ratio(%g, %g) = %q, want %q", tc.peer, tc.our, got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := benchPeerFlags{records: 100, inserts: 10, updates: 5, deletes: 5, oplogMiB: 8, timeout: time.Minute}
	if err := ok.validate(); err != nil {
		t.Fatalf("valid flags refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*benchPeerFlags)
		want string
	}{
		{"no records", func(f *benchPeerFlags) { f.records = 0 }, "--records"},
		{"no inserts", func(f *benchPeerFlags) { f.inserts = 0 }, "--inserts"},
		{"no updates nor deletes", func(f *benchPeerFlags) { f.updates, f.deletes = 0, 0 }, "--updates plus --deletes at least 1"},
		{"more changes than records", func(f *benchPeerFlags) { f.updates = 100 }, "must not exceed --records"},
		{"missing peer binary", func(f *benchPeerFlags) { f.peerBin = "/nonexistent/collector" }, "--peer-bin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := ok
			tc.edit(&f)
			err := f.validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestPollDelay(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(n int64, s float64) countAt { return countAt{n, t0.Add(time.Duration(s * float64(time.Second)))} }
	for _, tc := range []struct {
		name        string
		first, last countAt
		want        time.Duration
	}{
		{"nothing counted yet", countAt{}, countAt{}, pollEvery},
		{"no progress since the first count", at(1000, 0), at(1000, 3), pollMax},
		{"far from the goal", at(1000, 0), at(11000, 10), pollMax},               // 39 s left
		{"two seconds left", at(1000, 0), at(48000, 47), 500 * time.Millisecond}, // 2 s left
		{"nearly there", at(1000, 0), at(49900, 48.9), pollEvery},                // 0.1 s left
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pollDelay(tc.first, tc.last, 50000); got != tc.want {
				t.Errorf("pollDelay = %s, want %s", got, tc.want)
			}
		})
	}
}
