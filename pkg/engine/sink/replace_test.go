package sink

import (
	"bytes"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestReplace: MongoDB 5.0+ refuses a top-level '$' field in an update's
// replacement (DollarPrefixedFieldName, 52; storage_validation.cpp checks
// the top level only), though it stores such documents. Replace sends
// those as the pipeline update [{$replaceWith: {$literal: doc}}], upserting
// on the same filter, and every other document (nested '$' names, dotted
// names, a DBRef inside a field) as the plain replacement it was. The
// update command carries the pipeline as an array under u. FerretDB
// refuses '$' field names altogether, so no server stands in here: the
// check is on the command's bytes.
func TestReplace(t *testing.T) {
	key := raw(t, bson.D{{Key: "_id", Value: 7}})
	tests := []struct {
		name    string
		doc     bson.D
		literal bool
	}{
		{"plain document", bson.D{{Key: "_id", Value: 7}, {Key: "x", Value: 1}}, false},
		{"top-level $-field", bson.D{{Key: "_id", Value: 7}, {Key: "$price", Value: 3}}, true},
		{"top-level $-field first", bson.D{{Key: "$v", Value: 2}, {Key: "_id", Value: 7}}, true},
		{"top-level DBRef fields", bson.D{{Key: "_id", Value: 7}, {Key: "$ref", Value: "c"}, {Key: "$id", Value: 1}}, true},
		{"nested $-field", bson.D{{Key: "_id", Value: 7}, {Key: "a", Value: bson.D{{Key: "$b", Value: 1}}}}, false},
		{"$-field inside an array", bson.D{{Key: "_id", Value: 7}, {Key: "a", Value: bson.A{bson.D{{Key: "$b", Value: 1}}}}}, false},
		{"dotted names", bson.D{{Key: "_id", Value: 7}, {Key: "a.b", Value: 1}, {Key: "c", Value: bson.D{{Key: "d.e", Value: 2}}}}, false},
		{"a value starting with $", bson.D{{Key: "_id", Value: 7}, {Key: "p", Value: "$price"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := raw(t, tt.doc)
			m := Replace(key, doc)
			cmd, ok := AppendWriteCommand(nil, "c", UpdateCommand, []mongo.WriteModel{m}, true, nil)
			if !ok {
				t.Fatalf("%T is not sent as a raw update command", m)
			}
			var u any = tt.doc
			if tt.literal {
				u = bson.A{bson.D{{Key: "$replaceWith", Value: bson.D{{Key: "$literal", Value: tt.doc}}}}}
			}
			want := raw(t, bson.D{{Key: "q", Value: bson.D{{Key: "_id", Value: 7}}}, {Key: "u", Value: u}, {Key: "upsert", Value: true}})
			got := bson.Raw(cmd).Lookup("updates", "0").Document()
			if !bytes.Equal(got, want) {
				t.Errorf("update statement\n got %s\nwant %s", got, want)
			}
			if stored := modelApply(t, m); !bytes.Equal(stored, doc) {
				t.Errorf("stored %s, want %s", stored, bson.Raw(doc))
			}
		})
	}
}

// modelApply applies a write from Replace to a missing document as
// MongoDB 5.0+ does: a replacement with a top-level '$' field fails
// (code 52), $replaceWith of a $literal stores the literal as it is.
func modelApply(t *testing.T, m mongo.WriteModel) bson.Raw {
	t.Helper()
	switch m := m.(type) {
	case *mongo.ReplaceOneModel:
		doc := m.Replacement.(bson.Raw)
		if TopLevelDollar(doc) {
			t.Fatalf("the server refuses the replacement %s: DollarPrefixedFieldName (52)", doc)
		}
		return doc
	case *mongo.UpdateOneModel:
		p := bson.RawArray(m.Update.(Pipeline))
		stage := p.Index(0).Document()
		return stage.Lookup("$replaceWith", "$literal").Document()
	}
	t.Fatalf("unexpected model %T", m)
	return nil
}

// TestTopLevelDollar: short or truncated input reports false, never
// panics.
func TestTopLevelDollar(t *testing.T) {
	for _, b := range [][]byte{nil, {5, 0, 0, 0}, {5, 0, 0, 0, 0}, {12, 0, 0, 0, 16, 'a', 0, 1, 0, 0, 0}} {
		if TopLevelDollar(b) {
			t.Errorf("TopLevelDollar(%v) = true", b)
		}
	}
}

// BenchmarkReplace: the common path (no top-level '$' field) costs one
// scan of the top-level keys and the model's allocation.
func BenchmarkReplace(b *testing.B) {
	d := bson.D{{Key: "_id", Value: 7}}
	for i := range 20 {
		d = append(d, bson.E{Key: "field" + string(rune('a'+i)), Value: bson.D{{Key: "x", Value: i}, {Key: "y", Value: "some text"}}})
	}
	doc, err := bson.Marshal(d)
	if err != nil {
		b.Fatal(err)
	}
	key, _ := bson.Marshal(bson.D{{Key: "_id", Value: 7}})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := Replace(key, doc).(*mongo.ReplaceOneModel); !ok {
			b.Fatal("not a replacement")
		}
	}
}
