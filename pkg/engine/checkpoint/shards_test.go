package checkpoint

import (
	"testing"
	"time"

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

// TestCutoverOf: a shard's part in a cut-over counts only for the attempt
// it was recorded in; a record written before sharded cut-overs existed
// (no cutover field) reads as nothing done.
func TestCutoverOf(t *testing.T) {
	attempt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	drained := &ShardCutover{StartedAt: attempt, CaughtUp: true, DrainTS: bson.Timestamp{T: 9, I: 1}, Drained: true}
	tests := []struct {
		name string
		rec  ShardRecord
		want ShardCutover
	}{
		{"an old record", ShardRecord{Shard: "a", Started: true}, ShardCutover{StartedAt: attempt}},
		{"an earlier attempt", ShardRecord{Cutover: &ShardCutover{StartedAt: attempt.Add(-time.Hour), CaughtUp: true, Drained: true}}, ShardCutover{StartedAt: attempt}},
		{"this attempt", ShardRecord{Cutover: drained}, *drained},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rec.CutoverOf(attempt); got != tc.want {
				t.Errorf("CutoverOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestShardRecordDecodesOldDocuments: a shard record stored before the
// cut-over fields existed decodes with no cut-over part.
func TestShardRecordDecodesOldDocuments(t *testing.T) {
	raw, err := bson.Marshal(bson.D{{Key: "_id", Value: "t/a"}, {Key: "task", Value: "t"}, {Key: "shard", Value: "a"},
		{Key: "started", Value: true}, {Key: "startTS", Value: bson.Timestamp{T: 5}}, {Key: "appliedTS", Value: bson.Timestamp{T: 7}}})
	if err != nil {
		t.Fatal(err)
	}
	var rec ShardRecord
	if err := bson.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Cutover != nil || rec.ResumeTS() != (bson.Timestamp{T: 7}) {
		t.Errorf("decoded %+v", rec)
	}
}
