package cutover

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/replay"
)

// TestLagGate: the cut-over leaves CatchingUp only on a lag it knows to
// be at most maxLagSeconds, read after it was asked for; an unknown lag
// (the source's newest position not read yet, reported as lag 0 before)
// never passes, and the message says it is unknown rather than 0s.
func TestLagGate(t *testing.T) {
	known := func(lag float64) replay.Status {
		return replay.Status{NewestKnown: true, NewestTS: bson.Timestamp{T: 1000}, AppliedTS: bson.Timestamp{T: 1000 - uint32(lag)}, LagSeconds: lag}
	}
	unknown := replay.Status{LagUnknown: replay.LagNotRead}
	for _, tc := range []struct {
		name     string
		s        replay.Status
		fresh    bool
		pass     bool
		wantText string
	}{
		{"unknown lag", unknown, true, false, "lag unknown (the source's newest position is not read yet); the cut-over goes on once it is at most 5s"},
		{"a shard's unknown lag", replay.Status{LagUnknown: "shard rs1: " + replay.LagNotRead}, true, false, "lag unknown (shard rs1: "},
		{"lag above the limit", known(82), true, false, "lag 82s; the cut-over goes on once it is at most 5s"},
		{"lag at the limit", known(5), true, true, ""},
		{"caught up", known(0), true, true, ""},
		{"caught up by a stale read", known(0), false, false, "lag 0s by a read of the source's newest position made before"},
	} {
		pass, why := LagGate(tc.s, 5, tc.fresh)
		if pass != tc.pass || !strings.HasPrefix(why, tc.wantText) {
			t.Errorf("%s: pass %v, %q; want %v, %q", tc.name, pass, why, tc.pass, tc.wantText)
		}
		if strings.Contains(why, "lag 0s;") {
			t.Errorf("%s: %q", tc.name, why)
		}
	}
}
