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
