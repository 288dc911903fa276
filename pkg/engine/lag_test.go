package engine

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
		pass, why := lagGate(tc.s, 5, tc.fresh)
		if pass != tc.pass || !strings.HasPrefix(why, tc.wantText) {
			t.Errorf("%s: pass %v, %q; want %v, %q", tc.name, pass, why, tc.pass, tc.wantText)
		}
		if strings.Contains(why, "lag 0s;") {
			t.Errorf("%s: %q", tc.name, why)
		}
	}
}

// TestAggregateUnknownLag: a sharded task's lag is unknown while any
// streaming shard's is, and says which; a retired shard's does not count.
func TestAggregateUnknownLag(t *testing.T) {
	streaming := func(shard string, lag float64, unknown string) ShardStatus {
		return ShardStatus{Shard: shard, Phase: SubtaskStreaming, Replay: &replay.Status{Shard: shard, NewestKnown: unknown == "", LagSeconds: lag, LagUnknown: unknown}}
	}
	for _, tc := range []struct {
		name   string
		shards []ShardStatus
		want   string
	}{
		{"first shard unknown", []ShardStatus{streaming("rs0", 0, replay.LagNotRead), streaming("rs1", 3, "")}, "unknown (shard rs0: the source's newest position is not read yet)"},
		{"second shard unknown", []ShardStatus{streaming("rs0", 3, ""), streaming("rs1", 0, replay.LagNotRead)}, "unknown (shard rs1: the source's newest position is not read yet)"},
		{"all known", []ShardStatus{streaming("rs0", 3, ""), streaming("rs1", 7, "")}, "7s"},
		{"retired shard left out", []ShardStatus{{Shard: "rs9", Phase: SubtaskRetired, Replay: &replay.Status{LagUnknown: replay.LagNotRead}}, streaming("rs1", 2, "")}, "2s"},
	} {
		if got := aggregateReplay(tc.shards).LagText(); got != tc.want {
			t.Errorf("%s: lag %q, want %q", tc.name, got, tc.want)
		}
	}
}
