package oplog

import (
	"bytes"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestChanges: what an update changes, for a filter reading tenant and
// region: the whole new document of a replacement, else whether a field
// the filter reads may change. A path below a read field, a read field
// set whole, unset or diffed in a sub-diff touches it; a field beside
// them does not.
func TestChanges(t *testing.T) {
	reads := func(f string) bool { return f == "tenant" || f == "region" }
	type D = bson.D
	id := D{{Key: "_id", Value: int32(1)}}
	diff := func(d D) D { return D{{Key: "$v", Value: int32(2)}, {Key: "diff", Value: d}} }
	v1 := func(op string, d D) D { return D{{Key: "$v", Value: int32(1)}, {Key: op, Value: d}} }
	whole := D{{Key: "_id", Value: int32(1)}, {Key: "tenant", Value: "a"}, {Key: "v", Value: int32(2)}}
	tests := []struct {
		name    string
		o       D
		tr      Translator
		whole   bool // the new document is o, or o's $set for WholeDocumentUpdates
		touches bool
		err     error
	}{
		{"replacement", whole, Translator{}, true, false, nil},
		{"replacement without _id", D{{Key: "tenant", Value: "a"}}, Translator{}, false, true, nil},
		{"$v:1 $set of a field beside", v1("$set", D{{Key: "v", Value: 2}}), Translator{}, false, false, nil},
		{"$v:1 $set of the field", v1("$set", D{{Key: "tenant", Value: "b"}}), Translator{}, false, true, nil},
		{"$v:1 $set below the field", v1("$set", D{{Key: "region.code", Value: "eu"}}), Translator{}, false, true, nil},
		{"$v:1 $set of a field with the field's name as prefix", v1("$set", D{{Key: "tenants", Value: 1}}), Translator{}, false, false, nil},
		{"$v:1 $unset of the field", v1("$unset", D{{Key: "region", Value: true}}), Translator{}, false, true, nil},
		{"operators without $v", D{{Key: "$set", Value: D{{Key: "v", Value: 1}}}, {Key: "$unset", Value: D{{Key: "tenant", Value: true}}}}, Translator{}, false, true, nil},
		{"$v:2 u of a field beside", diff(D{{Key: "u", Value: D{{Key: "v", Value: 2}}}}), Translator{}, false, false, nil},
		{"$v:2 u of the field", diff(D{{Key: "u", Value: D{{Key: "tenant", Value: "b"}}}}), Translator{}, false, true, nil},
		{"$v:2 d of the field", diff(D{{Key: "d", Value: D{{Key: "region", Value: false}}}}), Translator{}, false, true, nil},
		{"$v:2 i of the field", diff(D{{Key: "i", Value: D{{Key: "region", Value: "eu"}}}}), Translator{}, false, true, nil},
		{"$v:2 sub-diff below the field", diff(D{{Key: "sregion", Value: D{{Key: "u", Value: D{{Key: "code", Value: "eu"}}}}}}), Translator{}, false, true, nil},
		{"$v:2 sub-diff beside", diff(D{{Key: "sinfo", Value: D{{Key: "u", Value: D{{Key: "tenant", Value: "x"}}}}}}), Translator{}, false, false, nil},
		{"$v:2 several sections, one touching", diff(D{{Key: "u", Value: D{{Key: "v", Value: 2}}}, {Key: "d", Value: D{{Key: "tenant", Value: false}}}}), Translator{}, false, true, nil},
		{"whole-document $set as FerretDB logs it", v1("$set", whole), Translator{WholeDocumentUpdates: true}, true, false, nil},
		{"whole-document $set read as operators", v1("$set", whole), Translator{}, false, true, nil},
		{"unknown $v", D{{Key: "$v", Value: int32(3)}}, Translator{}, false, false, ErrUnsupportedUpdate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustParse(t, with(outer(1, "u", "db.c"), "o", tt.o, "o2", id))
			doc, touches, err := tt.tr.Changes(e, reads)
			if !errors.Is(err, tt.err) {
				t.Fatalf("Changes: error %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			var want bson.Raw
			if tt.whole {
				want = marshal(t, whole)
			}
			if !bytes.Equal(doc, want) || touches != tt.touches {
				t.Errorf("Changes = %s, %v; want %s, %v", doc, touches, want, tt.touches)
			}
		})
	}
	if _, _, err := (Translator{}).Changes(mustParse(t, with(outer(1, "i", "db.c"), "o", id)), reads); !errors.Is(err, ErrMalformedEntry) {
		t.Errorf("Changes of an insert: %v, want ErrMalformedEntry", err)
	}
}
