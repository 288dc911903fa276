package shardedsource

import (
	"testing"

	"github.com/mongoferry/mongoferry/pkg/engine/replay"
)

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
		if got := AggregateReplay(tc.shards).LagText(); got != tc.want {
			t.Errorf("%s: lag %q, want %q", tc.name, got, tc.want)
		}
	}
}
