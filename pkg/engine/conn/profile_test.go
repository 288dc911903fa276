package conn

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestProfileFromBuildInfo(t *testing.T) {
	tests := []struct {
		name  string
		reply bson.D
		want  Profile
	}{
		{"MongoDB 7.0", bson.D{{Key: "version", Value: "7.0.14"}, {Key: "ok", Value: 1.0}},
			Profile{Flavor: FlavorMongoDB, Version: "7.0.14", Major: 7, IndexedRangeReads: true, UpdateShape: UpdatesAsApplied, PipelineUpdates: true}},
		{"MongoDB 8.0 has bulkWrite", bson.D{{Key: "version", Value: "8.0.4"}, {Key: "versionArray", Value: bson.A{int32(8), int32(0), int32(4), int32(0)}}, {Key: "ok", Value: 1.0}},
			Profile{Flavor: FlavorMongoDB, Version: "8.0.4", Major: 8, IndexedRangeReads: true, UpdateShape: UpdatesAsApplied, PipelineUpdates: true, BulkWriteCommand: true}},
		{"MongoDB 8.2 without versionArray", bson.D{{Key: "version", Value: "8.2.1"}, {Key: "ok", Value: 1.0}},
			Profile{Flavor: FlavorMongoDB, Version: "8.2.1", Major: 8, IndexedRangeReads: true, UpdateShape: UpdatesAsApplied, PipelineUpdates: true, BulkWriteCommand: true}},
		{"MongoDB 10.0", bson.D{{Key: "version", Value: "10.0.0"}, {Key: "versionArray", Value: bson.A{int32(10), int32(0), int32(0), int32(0)}}, {Key: "ok", Value: 1.0}},
			Profile{Flavor: FlavorMongoDB, Version: "10.0.0", Major: 10, IndexedRangeReads: true, UpdateShape: UpdatesAsApplied, PipelineUpdates: true, BulkWriteCommand: true}},
		{"FerretDB v1.24.0", bson.D{{Key: "version", Value: "7.0.77"}, {Key: "ferretdbVersion", Value: "v1.24.0"}, {Key: "ok", Value: 1.0}},
			Profile{Flavor: FlavorFerretDB, Version: "v1.24.0", OplogHasHoles: true, OplogQueriesScan: true, MaxWriteBatch: FerretDBMaxWriteBatch, UpdateShape: UpdatesAsWholeDocument, IndexesOneByOne: true, SerialUpdates: true, ReinsertReplacements: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := bson.Marshal(tt.reply)
			if err != nil {
				t.Fatal(err)
			}
			if got := profileFromBuildInfo(raw); got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
