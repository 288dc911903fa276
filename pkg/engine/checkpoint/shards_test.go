package checkpoint

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestMinApplied(t *testing.T) {
	ts := func(t uint32) bson.Timestamp { return bson.Timestamp{T: t} }
	tests := []struct {
		name   string
		recs   map[string]ShardRecord
		want   uint32
		wantOK bool
	}{
		{"none", nil, 0, false},
		{"the lowest applied", map[string]ShardRecord{
			"a": {Started: true, StartTS: ts(5), AppliedTS: ts(20)},
			"b": {Started: true, StartTS: ts(5), AppliedTS: ts(12)},
		}, 12, true},
		{"a shard that applied nothing yet counts with its start", map[string]ShardRecord{
			"a": {Started: true, StartTS: ts(5), AppliedTS: ts(20)},
			"b": {Started: true, StartTS: ts(7)},
		}, 7, true},
		{"retired shards hold nothing back", map[string]ShardRecord{
			"a": {Started: true, StartTS: ts(5), AppliedTS: ts(20)},
			"b": {Started: true, StartTS: ts(1), AppliedTS: ts(2), Retired: true},
		}, 20, true},
		{"a shard added later starts at zero", map[string]ShardRecord{
			"a":   {Started: true, StartTS: ts(5), AppliedTS: ts(20)},
			"new": {Started: true},
		}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := MinApplied(tc.recs)
			if got.T != tc.want || ok != tc.wantOK {
				t.Errorf("MinApplied = %v, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
