package targetsharding

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestParseChunkVersion reads each version's config.chunks document with
// its lastmod, the version a migration's commit raises.
func TestParseChunkVersion(t *testing.T) {
	min, max := bson.D{{Key: "sk", Value: bson.MinKey{}}}, bson.D{{Key: "sk", Value: bson.MaxKey{}}}
	for _, tc := range []struct {
		name string
		doc  bson.D
		want bson.Timestamp
	}{
		{"7.0", chunk70(min, max, "rs0"), bson.Timestamp{T: 3, I: 1}},
		{"4.4", chunk44("shop.orders", min, max, "rs0"), bson.Timestamp{T: 2}},
		{"no lastmod", bson.D{{Key: "min", Value: min}, {Key: "max", Value: max}, {Key: "shard", Value: "rs0"}}, bson.Timestamp{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseChunk(raw(t, tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if c.Version != tc.want || c.Shard != "rs0" {
				t.Fatalf("chunk %+v, want version %v on rs0", c, tc.want)
			}
		})
	}
}
