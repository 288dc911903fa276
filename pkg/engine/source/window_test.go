package source

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestServerTimeFrom(t *testing.T) {
	clock := time.Date(2026, 11, 24, 0, 32, 58, 750e6, time.UTC)
	tests := []struct {
		name  string
		hello bson.D
		want  bson.Timestamp
		err   string
	}{
		{"replica set: operationTime", bson.D{{Key: "localTime", Value: bson.NewDateTimeFromTime(clock)},
			{Key: "$clusterTime", Value: bson.D{{Key: "clusterTime", Value: bson.Timestamp{T: 1795998779, I: 3}}}},
			{Key: "operationTime", Value: bson.Timestamp{T: 1795998778, I: 9}}}, bson.Timestamp{T: 1795998778, I: 9}, ""},
		{"mongos: $clusterTime", bson.D{{Key: "localTime", Value: bson.NewDateTimeFromTime(clock)},
			{Key: "$clusterTime", Value: bson.D{{Key: "clusterTime", Value: bson.Timestamp{T: 1795998779, I: 3}}}}}, bson.Timestamp{T: 1795998779, I: 3}, ""},
		{"FerretDB: its clock, at the start of the second", bson.D{{Key: "isWritablePrimary", Value: true}, {Key: "localTime", Value: bson.NewDateTimeFromTime(clock)}},
			bson.Timestamp{T: uint32(clock.Unix())}, ""},
		{"nothing", bson.D{{Key: "isWritablePrimary", Value: true}}, bson.Timestamp{}, "write to the source once"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := bson.Marshal(tt.hello)
			if err != nil {
				t.Fatal(err)
			}
			got, err := serverTimeFrom(raw)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestCappedStatsUntrimmed(t *testing.T) {
	tests := []struct {
		name string
		st   cappedStats
		want bool
	}{
		{"a few entries in a large oplog", cappedStats{Size: 200 << 10, MaxSize: 8 << 20, Count: 600}, true},
		{"past half the size", cappedStats{Size: 5 << 20, MaxSize: 8 << 20, Count: 15000}, false},
		{"just trimmed (about 90% full)", cappedStats{Size: 7 << 20, MaxSize: 8 << 20, Count: 20000}, false},
		{"past half the capped count", cappedStats{Size: 10 << 10, MaxSize: 8 << 20, Count: 600, Max: 1000}, false},
		{"under half the capped count", cappedStats{Size: 10 << 10, MaxSize: 8 << 20, Count: 400, Max: 1000}, true},
		{"size unknown", cappedStats{Size: 10 << 10}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.st.untrimmed(); got != tt.want {
				t.Errorf("untrimmed() = %v, want %v", got, tt.want)
			}
		})
	}
}
