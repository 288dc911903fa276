package oplog

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// model describes a write model as "Kind filter update/replacement upsert".
func model(t *testing.T, m mongo.WriteModel) string {
	t.Helper()
	js := func(v any) string {
		if r, ok := v.(bson.Raw); ok {
			return r.String()
		}
		if p, ok := v.(pipeline); ok {
			return bson.RawArray(p).String()
		}
		return marshal(t, v).String()
	}
	switch m := m.(type) {
	case *mongo.ReplaceOneModel:
		return "ReplaceOne " + js(m.Filter) + " " + js(m.Replacement) + " upsert=" + boolStr(m.Upsert)
	case *mongo.UpdateOneModel:
		return "UpdateOne " + js(m.Filter) + " " + js(m.Update) + " upsert=" + boolStr(m.Upsert)
	case *mongo.DeleteOneModel:
		return "DeleteOne " + js(m.Filter)
	case *mongo.InsertOneModel:
		return "InsertOne " + js(m.Document)
	}
	t.Fatalf("unexpected model %T", m)
	return ""
}

func boolStr(b *bool) string {
	if b != nil && *b {
		return "true"
	}
	return "false"
}

func TestTranslateCRUD(t *testing.T) {
	id := bson.D{{Key: "_id", Value: 1}}
	js := func(v any) string { return marshal(t, v).String() }
	diffDoc := bson.D{{Key: "_id", Value: 1}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "x", Value: 1}}}}}, {Key: "n", Value: 2}}
	dollarDoc := bson.D{{Key: "_id", Value: 1}, {Key: "$v", Value: 2}, {Key: "$price", Value: 3}, {Key: "diff", Value: bson.D{}}}
	nestedDollar := bson.D{{Key: "_id", Value: 1}, {Key: "a.b", Value: 1}, {Key: "c", Value: bson.D{{Key: "$d", Value: 2}, {Key: "e.f", Value: 3}}}}
	literal := func(doc bson.D) string { return literalJS(t, doc) }
	tests := []struct {
		name  string
		entry bson.D
		kind  Kind
		key   string
		want  []string
	}{
		{"insert", with(outer(1, "i", "a.b"), "o", bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: "y"}}), Insert, js(id),
			[]string{"ReplaceOne " + js(id) + " " + js(bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: "y"}}) + " upsert=true"}},
		{"insert with shard key in o2", with(outer(1, "i", "a.b"), "o", bson.D{{Key: "_id", Value: 1}, {Key: "sk", Value: 3}}, "o2", bson.D{{Key: "sk", Value: 3}, {Key: "_id", Value: 1}}),
			Insert, js(bson.D{{Key: "sk", Value: 3}, {Key: "_id", Value: 1}}),
			[]string{"ReplaceOne " + js(bson.D{{Key: "sk", Value: 3}, {Key: "_id", Value: 1}}) + " " + js(bson.D{{Key: "_id", Value: 1}, {Key: "sk", Value: 3}}) + " upsert=true"}},
		{"replacement update", with(outer(1, "u", "a.b"), "o", bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: 2}}, "o2", id), Update, js(id),
			[]string{"ReplaceOne " + js(id) + " " + js(bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: 2}}) + " upsert=true"}},
		{"replacement with a field named diff", with(outer(1, "u", "a.b"), "o", diffDoc, "o2", id), Update, js(id),
			[]string{"ReplaceOne " + js(id) + " " + js(diffDoc) + " upsert=true"}},
		{"$v:1 operators", with(outer(1, "u", "a.b"), "o", bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{{Key: "a.b", Value: 1}}}, {Key: "$unset", Value: bson.D{{Key: "c", Value: true}}}}, "o2", id), Update, js(id),
			[]string{"UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: bson.D{{Key: "a.b", Value: 1}}}, {Key: "$unset", Value: bson.D{{Key: "c", Value: true}}}}) + " upsert=false"}},
		{"operators without $v", with(outer(1, "u", "a.b"), "o", bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}, {Key: "$unset", Value: bson.D{}}}, "o2", id), Update, js(id),
			[]string{"UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}) + " upsert=false"}},
		{"$v:1 with nothing to do", with(outer(1, "u", "a.b"), "o", bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{}}}, "o2", id), Update, "", nil},
		{"$v:2 diff", with(outer(1, "u", "a.b"), "o", bson.D{{Key: "$v", Value: int64(2)}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "x", Value: 1}}}, {Key: "d", Value: bson.D{{Key: "y", Value: false}}}}}}, "o2", id), Update, js(id),
			[]string{"UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}, {Key: "$unset", Value: bson.D{{Key: "y", Value: ""}}}}) + " upsert=false"}},
		{"$v:2 as a double", with(outer(1, "u", "a.b"), "o", bson.D{{Key: "$v", Value: 2.0}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "x", Value: 1}}}}}}, "o2", id), Update, js(id),
			[]string{"UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}) + " upsert=false"}},
		{"$v:2 empty diff", with(outer(1, "u", "a.b"), "o", bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{}}}, "o2", id), Update, "", nil},
		// 5.0+: a replacement may hold top-level $-prefixed fields, $v
		// included; mongod decides "has _id, so a replacement" first
		// (UpdateModification::parseFromOplogEntry, update/update_oplog_entry_serialization.cpp).
		// ... which a replacement cannot write (DollarPrefixedFieldName, 52):
		// a pipeline update replaces the document with it as it is.
		{"replacement with a top-level $v and $-field", with(outer(1, "u", "a.b"), "o", dollarDoc, "o2", id), Update, js(id),
			[]string{"UpdateOne " + js(id) + " " + literal(dollarDoc) + " upsert=true"}},
		{"insert with a top-level $-field", with(outer(1, "i", "a.b"), "o", bson.D{{Key: "_id", Value: 1}, {Key: "$price", Value: 3}}), Insert, js(id),
			[]string{"UpdateOne " + js(id) + " " + literal(bson.D{{Key: "_id", Value: 1}, {Key: "$price", Value: 3}}) + " upsert=true"}},
		{"replacement with nested $-fields and dotted names stays a replacement", with(outer(1, "u", "a.b"), "o", nestedDollar, "o2", id), Update, js(id),
			[]string{"ReplaceOne " + js(id) + " " + js(nestedDollar) + " upsert=true"}},
		// A user's applyOps may upsert an update (b: true); mongod then
		// creates the missing document (repl/oplog.cpp, applyOperation_inlock).
		{"$v:1 update with b: true", with(outer(1, "u", "a.b"), "o", bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}, "o2", id, "b", true), Update, js(id),
			[]string{"UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}) + " upsert=true"}},
		{"empty $v:1 update with b: true still creates the document", with(outer(1, "u", "a.b"), "o", bson.D{{Key: "$v", Value: 1}, {Key: "$set", Value: bson.D{}}}, "o2", id, "b", true), Update, js(id),
			[]string{"UpdateOne " + js(id) + " " + js(bson.D{{Key: "$set", Value: id}}) + " upsert=true"}},
		{"delete", with(outer(1, "d", "a.b"), "o", id), Delete, js(id), []string{"DeleteOne " + js(id)}},
		{"noop", with(outer(1, "n", ""), "o", bson.D{{Key: "msg", Value: "x"}}), Noop, "", nil},
		{"startIndexBuild", with(outer(1, "c", "a.$cmd"), "o", bson.D{{Key: "startIndexBuild", Value: "b"}}), Command, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := Translate(mustParse(t, tt.entry))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range ws {
				if w.NS != "a.b" || w.Kind != tt.kind || w.DocKey.String() != tt.key || w.DDL != nil {
					t.Errorf("write ns %q kind %v key %s ddl %v", w.NS, w.Kind, w.DocKey, w.DDL)
				}
				got = append(got, model(t, w.Model))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("writes\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// With InsertModels an insert is an InsertOne of the document, its key
// kept for the replacement a duplicate key falls back to; other entries
// translate as without it.
func TestTranslateInsertModels(t *testing.T) {
	js := func(v any) string { return marshal(t, v).String() }
	doc := bson.D{{Key: "_id", Value: 1}, {Key: "sk", Value: 3}}
	skKey := bson.D{{Key: "sk", Value: 3}, {Key: "_id", Value: 1}}
	tests := []struct {
		name  string
		entry bson.D
		key   string
		want  string
	}{
		{"insert", with(outer(1, "i", "a.b"), "o", doc), js(bson.D{{Key: "_id", Value: 1}}), "InsertOne " + js(doc)},
		{"insert with shard key in o2", with(outer(1, "i", "a.b"), "o", doc, "o2", skKey), js(skKey), "InsertOne " + js(doc)},
		{"replacement update stays an upsert", with(outer(1, "u", "a.b"), "o", doc, "o2", bson.D{{Key: "_id", Value: 1}}), js(bson.D{{Key: "_id", Value: 1}}),
			"ReplaceOne " + js(bson.D{{Key: "_id", Value: 1}}) + " " + js(doc) + " upsert=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := Translator{InsertModels: true}.Append(nil, mustParse(t, tt.entry))
			if err != nil {
				t.Fatal(err)
			}
			if len(ws) != 1 || ws[0].DocKey.String() != tt.key || model(t, ws[0].Model) != tt.want {
				t.Fatalf("writes %+v, want one %s keyed %s", ws, tt.want, tt.key)
			}
		})
	}
}

func TestTranslateErrors(t *testing.T) {
	id := bson.D{{Key: "_id", Value: 1}}
	upd := func(o bson.D) bson.D { return with(outer(1, "u", "a.b"), "o", o, "o2", id) }
	tests := []struct {
		name  string
		entry bson.D
		want  error
		text  string
	}{
		{"$v:3", upd(bson.D{{Key: "$v", Value: 3}, {Key: "diff", Value: bson.D{}}}), ErrUnsupportedUpdate, "$v"},
		{"$v a string", upd(bson.D{{Key: "$v", Value: "2"}, {Key: "diff", Value: bson.D{}}}), ErrUnsupportedUpdate, "$v"},
		{"$v:2 without diff", upd(bson.D{{Key: "$v", Value: 2}}), ErrUnsupportedUpdate, "diff"},
		{"$v:2 with operators", upd(bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{}}, {Key: "$set", Value: bson.D{}}}), ErrUnsupportedUpdate, "diff"},
		{"$v:2 diff not a document", upd(bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: 1}}), ErrMalformedDiff, "not a document"},
		{"$v:1 with $inc", upd(bson.D{{Key: "$v", Value: 1}, {Key: "$inc", Value: bson.D{{Key: "x", Value: 1}}}}), ErrUnsupportedUpdate, "$inc"},
		{"$v:1 with fields", upd(bson.D{{Key: "$v", Value: 1}, {Key: "x", Value: 1}}), ErrUnsupportedUpdate, "mixes"},
		{"operators mixed with fields", upd(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}, {Key: "y", Value: 1}}), ErrUnsupportedUpdate, "mixes"},
		{"operator not a document", upd(bson.D{{Key: "$set", Value: 1}}), ErrUnsupportedUpdate, "not a document"},
		{"unknown diff section", upd(bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{{Key: "x", Value: bson.D{}}}}}), ErrUnknownDiffSection, `"x"`},
		{"applyOps", with(outer(1, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{}}}), ErrNeedsAssembly, "Assembler"},
		{"commitTransaction", with(outer(1, "c", "admin.$cmd"), "o", bson.D{{Key: "commitTransaction", Value: 1}}), ErrNeedsAssembly, "Assembler"},
		{"unknown command", with(outer(1, "c", "a.$cmd"), "o", bson.D{{Key: "frobnicate", Value: 1}}), ErrUnknownCommand, "frobnicate"},
		{"create without a name", with(outer(1, "c", "a.$cmd"), "o", bson.D{{Key: "create", Value: 1}}), ErrMalformedEntry, "must name a collection"},
		{"rename without to", with(outer(1, "c", "admin.$cmd"), "o", bson.D{{Key: "renameCollection", Value: "a.b"}}), ErrMalformedEntry, "renameCollection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := Translate(mustParse(t, tt.entry))
			if !errors.Is(err, tt.want) || ws != nil {
				t.Fatalf("Translate = %v, %v; want %v", ws, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.text) || !strings.Contains(err.Error(), "ts=100.1") {
				t.Errorf("err = %q, want it to mention %q and the entry", err, tt.text)
			}
		})
	}
}

func TestTranslateDDL(t *testing.T) {
	mapper, err := catalog.NewMapper(config.Namespaces{Rename: []config.Rename{
		{From: "shop", To: "shop2"}, {From: "shop.a", To: "arch.a_old"},
	}}, "ferrycp")
	if err != nil {
		t.Fatal(err)
	}
	cmd := func(db string, o bson.D, kv ...any) bson.D {
		return with(with(outer(1, "c", db+".$cmd"), "o", o), kv...)
	}
	idx := bson.D{{Key: "v", Value: 2}, {Key: "key", Value: bson.D{{Key: "email", Value: 1}}}, {Key: "name", Value: "email_1"}, {Key: "unique", Value: true}}
	tests := []struct {
		name     string
		entry    bson.D
		class    CommandClass
		ns, to   string
		mappedNS string
		mappedTo string
		check    func(t *testing.T, d DDL)
	}{
		{"create", cmd("shop", bson.D{{Key: "create", Value: "orders"}, {Key: "capped", Value: true}, {Key: "size", Value: 4096}}),
			CmdCreate, "shop.orders", ".", "shop2.orders", ".", func(t *testing.T, d DDL) {
				opts, err := d.Options()
				if err != nil || opts.String() != marshal(t, bson.D{{Key: "capped", Value: true}, {Key: "size", Value: 4096}}).String() {
					t.Errorf("Options = %s, %v", opts, err)
				}
			}},
		{"drop", cmd("shop", bson.D{{Key: "drop", Value: "a"}}, "o2", bson.D{{Key: "numRecords", Value: 3}}),
			CmdDrop, "shop.a", ".", "arch.a_old", ".", func(t *testing.T, d DDL) {
				if d.O2.Lookup("numRecords").Int32() != 3 {
					t.Errorf("O2 = %s", d.O2)
				}
			}},
		{"renameCollection", cmd("admin", bson.D{{Key: "renameCollection", Value: "shop.a"}, {Key: "to", Value: "shop.b"}, {Key: "dropTarget", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}}}),
			CmdRenameCollection, "shop.a", "shop.b", "arch.a_old", "shop2.b", func(t *testing.T, d DDL) {
				if !d.DropTarget() {
					t.Error("DropTarget = false")
				}
			}},
		{"renameCollection without dropTarget", cmd("admin", bson.D{{Key: "renameCollection", Value: "shop.x"}, {Key: "to", Value: "other.y"}, {Key: "dropTarget", Value: false}}),
			CmdRenameCollection, "shop.x", "other.y", "shop2.x", "other.y", func(t *testing.T, d DDL) {
				if d.DropTarget() {
					t.Error("DropTarget = true")
				}
			}},
		{"dropDatabase", cmd("shop", bson.D{{Key: "dropDatabase", Value: 1}}), CmdDropDatabase, "shop.", ".", "shop2.", ".", nil},
		{"createIndexes", cmd("shop", append(bson.D{{Key: "createIndexes", Value: "orders"}}, idx...)), CmdCreateIndexes, "shop.orders", ".", "shop2.orders", ".",
			func(t *testing.T, d DDL) {
				specs, err := d.Indexes()
				if err != nil || len(specs) != 1 || specs[0].String() != marshal(t, idx).String() {
					t.Errorf("Indexes = %v, %v", specs, err)
				}
			}},
		{"commitIndexBuild", cmd("shop", bson.D{{Key: "commitIndexBuild", Value: "orders"}, {Key: "indexBuildUUID", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}}, {Key: "indexes", Value: bson.A{idx, idx}}}),
			CmdCommitIndexBuild, "shop.orders", ".", "shop2.orders", ".", func(t *testing.T, d DDL) {
				specs, err := d.Indexes()
				if err != nil || len(specs) != 2 || specs[1].String() != marshal(t, idx).String() {
					t.Errorf("Indexes = %v, %v", specs, err)
				}
			}},
		{"dropIndexes", cmd("shop", bson.D{{Key: "dropIndexes", Value: "orders"}, {Key: "index", Value: "email_1"}}), CmdDropIndexes, "shop.orders", ".", "shop2.orders", ".",
			func(t *testing.T, d DDL) {
				names, err := d.DropIndexNames()
				if err != nil || !slices.Equal(names, []string{"email_1"}) {
					t.Errorf("DropIndexNames = %v, %v", names, err)
				}
				if _, err := d.Indexes(); err == nil {
					t.Error("Indexes of dropIndexes succeeded")
				}
			}},
		{"collMod", cmd("shop", bson.D{{Key: "collMod", Value: "orders"}, {Key: "validationLevel", Value: "off"}}), CmdCollMod, "shop.orders", ".", "shop2.orders", ".",
			func(t *testing.T, d DDL) {
				opts, err := d.Options()
				if err != nil || opts.Lookup("validationLevel").StringValue() != "off" {
					t.Errorf("Options = %s, %v", opts, err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := Translate(mustParse(t, tt.entry))
			if err != nil {
				t.Fatal(err)
			}
			if len(ws) != 1 || ws[0].DDL == nil || ws[0].Model != nil || ws[0].Kind != Command {
				t.Fatalf("writes = %+v", ws)
			}
			d := *ws[0].DDL
			if d.Class != tt.class || d.NS.String() != tt.ns || d.To.String() != tt.to {
				t.Errorf("DDL %v %s -> %s, want %v %s -> %s", d.Class, d.NS, d.To, tt.class, tt.ns, tt.to)
			}
			wantNS := tt.ns
			if d.Class == CmdDropDatabase {
				wantNS = "shop"
			}
			if ws[0].NS != wantNS {
				t.Errorf("Write.NS = %q, want %q", ws[0].NS, wantNS)
			}
			if d.Command.String() != marshal(t, tt.entry[4].Value).String() {
				t.Errorf("Command = %s", d.Command)
			}
			m := d.Map(mapper.Target)
			if m.NS.String() != tt.mappedNS || m.To.String() != tt.mappedTo {
				t.Errorf("mapped %s -> %s, want %s -> %s", m.NS, m.To, tt.mappedNS, tt.mappedTo)
			}
			if tt.check != nil {
				tt.check(t, d)
			}
		})
	}
}
