package oplog

import (
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestTranslateWholeDocumentUpdates: with WholeDocumentUpdates (a FerretDB
// v1 source), {$v: 1, $set: <whole document>} replaces the document, so a
// field the source removed ($unset, a replacement, $rename) is removed on
// the target; any other shape reads as mongod writes it. Without it (a
// MongoDB source) the same entry is the partial update it is there.
func TestTranslateWholeDocumentUpdates(t *testing.T) {
	js := func(v any) string { return marshal(t, v).String() }
	id := bson.D{{Key: "_id", Value: 1}}
	whole := bson.D{{Key: "_id", Value: 1}, {Key: "b", Value: 2}}
	ferret := bson.D{{Key: "$v", Value: int32(1)}, {Key: "$set", Value: whole}}
	replace := "ReplaceOne " + js(id) + " " + js(whole) + " upsert=true"
	partial := "UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: whole}}) + " upsert=false"
	upd := func(o, o2 bson.D) bson.D { return with(outer(1, "u", "a.b"), "o", o, "o2", o2) }
	tests := []struct {
		name  string
		whole bool
		entry bson.D
		want  string
	}{
		{"FerretDB shape on a FerretDB source: replacement", true, upd(ferret, id), replace},
		{"$set before $v: replacement", true, upd(bson.D{{Key: "$set", Value: whole}, {Key: "$v", Value: 1}}, id), replace},
		{"same entry on a MongoDB source: partial update", false, upd(ferret, id), partial},
		{"$set without the _id: partial update", true,
			upd(bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{{Key: "b", Value: 2}}}}, id),
			"UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: bson.D{{Key: "b", Value: 2}}}}) + " upsert=false"},
		{"$set of another _id: partial update", true,
			upd(bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{{Key: "_id", Value: 2}}}}, id),
			"UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: bson.D{{Key: "_id", Value: 2}}}}) + " upsert=false"},
		{"_id of another type (1 and 1.0): partial update", true,
			upd(bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{{Key: "_id", Value: 1.0}}}}, id),
			"UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: bson.D{{Key: "_id", Value: 1.0}}}}) + " upsert=false"},
		{"$set and $unset: operators", true,
			upd(bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: whole}, {Key: "$unset", Value: bson.D{{Key: "c", Value: true}}}}, id),
			"UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: whole}, {Key: "$unset", Value: bson.D{{Key: "c", Value: true}}}}) + " upsert=false"},
		{"a shard key in o2: partial update", true,
			upd(ferret, bson.D{{Key: "sk", Value: 1}, {Key: "_id", Value: 1}}),
			"UpdateOne " + js(bson.D{{Key: "sk", Value: 1}, {Key: "_id", Value: 1}}) + " " + js(bson.D{{Key: "$set", Value: whole}}) + " upsert=false"},
		{"a replacement stays one", true, upd(whole, id), replace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := Translator{WholeDocumentUpdates: tt.whole}.Append(nil, mustParse(t, tt.entry))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range ws {
				got = append(got, model(t, w.Model))
			}
			if !slices.Equal(got, []string{tt.want}) {
				t.Errorf("writes\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}
