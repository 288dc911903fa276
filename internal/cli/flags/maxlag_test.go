package flags

import (
	"strings"
	"testing"
)

// TestMaxLag: --max-lag takes a duration, or a bare number of seconds,
// and refuses what is not a whole number of seconds from 1s to 1h with a
// message saying what it takes.
func TestMaxLag(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr string
	}{
		{"2s", 2, ""},
		{"5", 5, ""},
		{"1m30s", 90, ""},
		{"1h", 3600, ""},
		{"0", 0, "from 1s to 1h"},
		{"1500ms", 0, "whole number of seconds"},
		{"2h", 0, "from 1s to 1h"},
		{"-3s", 0, "from 1s to 1h"},
		{"soon", 0, `"soon" is not a duration such as 5s or 2m`},
	} {
		var m MaxLag
		err := m.Set(tc.in)
		switch {
		case tc.wantErr == "" && (err != nil || m.Seconds != tc.want):
			t.Errorf("%q: %d, %v; want %d", tc.in, m.Seconds, err, tc.want)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q: %v; want an error with %q", tc.in, err, tc.wantErr)
		}
	}
}
