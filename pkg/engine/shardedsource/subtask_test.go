package shardedsource

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/engine/replay"
)

func TestAggregateReplay(t *testing.T) {
	ts := func(t uint32) bson.Timestamp { return bson.Timestamp{T: t} }
	st := func(phase string, applied, newest uint32, ops float64, fromMigrate int64) ShardStatus {
		return ShardStatus{Phase: phase, Replay: &replay.Status{AppliedTS: ts(applied), NewestTS: ts(newest), NewestKnown: true,
			LagSeconds: float64(newest - applied), OpsPerSecond: ops,
			Applied: map[string]int64{"insert": 1}, Skipped: map[string]int64{"fromMigrate": fromMigrate}}}
	}
	tests := []struct {
		name        string
		shards      []ShardStatus
		wantApplied uint32
		wantNewest  uint32
		wantLag     float64
		wantOps     float64
		wantInserts int64
		wantFromMig int64
	}{
		{"the lowest applied, the newest newest, the largest lag, sums",
			[]ShardStatus{st(SubtaskStreaming, 100, 105, 10, 3), st(SubtaskStreaming, 90, 91, 5, 4), st(SubtaskStreaming, 120, 130, 1, 0)},
			90, 130, 10, 16, 3, 7},
		{"a retired shard holds nothing back and keeps its counts",
			[]ShardStatus{st(SubtaskRetired, 10, 10, 0, 9), st(SubtaskStreaming, 100, 100, 2, 1)},
			100, 100, 0, 2, 2, 10},
		{"pending shards are left out", []ShardStatus{{Phase: SubtaskPending}, st(SubtaskStreaming, 50, 60, 1, 0)}, 50, 60, 10, 1, 1, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := AggregateReplay(tc.shards)
			if got == nil {
				t.Fatal("nil")
			}
			if got.AppliedTS.T != tc.wantApplied || got.NewestTS.T != tc.wantNewest || got.LagSeconds != tc.wantLag || got.OpsPerSecond != tc.wantOps ||
				got.Applied["insert"] != tc.wantInserts || got.Skipped["fromMigrate"] != tc.wantFromMig {
				t.Errorf("got applied %d newest %d lag %v ops %v inserts %d fromMigrate %d", got.AppliedTS.T, got.NewestTS.T, got.LagSeconds,
					got.OpsPerSecond, got.Applied["insert"], got.Skipped["fromMigrate"])
			}
		})
	}
	if AggregateReplay(nil) != nil {
		t.Error("no shards: want nil")
	}
}
