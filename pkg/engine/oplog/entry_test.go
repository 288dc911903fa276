package oplog

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestParseFields(t *testing.T) {
	uuid := bson.Binary{Subtype: 4, Data: []byte("0123456789abcdef")}
	wall := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	e := mustParse(t, with(outer(7, "u", "shop.orders"),
		"ui", uuid,
		"o", bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "x", Value: 1}}}}}},
		"o2", bson.D{{Key: "_id", Value: 5}},
		"fromMigrate", true,
		"lsid", lsidOf(1),
		"txnNumber", int64(9),
		"prevOpTime", bson.D{{Key: "ts", Value: tsAt(3)}, {Key: "t", Value: int64(2)}},
		"wall", bson.NewDateTimeFromTime(wall),
		"v", 2, // unknown fields are ignored
	))
	if e.TS() != tsAt(7) || e.Op() != OpUpdate || e.Kind() != Update || e.NS() != "shop.orders" {
		t.Fatalf("ts/op/kind/ns: %v %v %v %v", e.TS(), e.Op(), e.Kind(), e.NS())
	}
	if n := e.Namespace(); n.DB != "shop" || n.Coll != "orders" {
		t.Errorf("Namespace = %v", n)
	}
	if term, ok := e.Term(); !ok || term != 1 {
		t.Errorf("Term = %d, %v", term, ok)
	}
	if ui, ok := e.UI(); !ok || string(ui.Data) != "0123456789abcdef" || ui.Subtype != 4 {
		t.Errorf("UI = %v, %v", ui, ok)
	}
	if got := e.O2().Lookup("_id").Int32(); got != 5 {
		t.Errorf("O2 _id = %d", got)
	}
	if e.O().Lookup("$v").Int32() != 2 {
		t.Errorf("O = %s", e.O())
	}
	if !e.FromMigrate() || e.PartialTxn() || e.Prepare() {
		t.Errorf("flags: fromMigrate %v partialTxn %v prepare %v", e.FromMigrate(), e.PartialTxn(), e.Prepare())
	}
	if id := e.LSID().Lookup("id"); id.Type != bson.TypeBinary {
		t.Errorf("LSID = %s", e.LSID())
	}
	if n, ok := e.TxnNumber(); !ok || n != 9 {
		t.Errorf("TxnNumber = %d, %v", n, ok)
	}
	if p, ok := e.PrevOpTime(); !ok || p.TS != tsAt(3) || p.Term != 2 {
		t.Errorf("PrevOpTime = %+v, %v", p, ok)
	}
	if w, ok := e.WallTime(); !ok || !w.Equal(wall) {
		t.Errorf("WallTime = %v, %v", w, ok)
	}
	if !strings.Contains(e.String(), "u shop.orders ts=100.7") {
		t.Errorf("String = %q", e.String())
	}

	// Absent optional fields read as zero values.
	n := mustParse(t, with(outer(1, "n", ""), "o", bson.D{{Key: "msg", Value: "periodic noop"}}))
	if _, ok := n.UI(); ok {
		t.Error("UI of a no-op")
	}
	if _, ok := n.TxnNumber(); ok || n.LSID() != nil || n.O2() != nil {
		t.Error("txn fields of a no-op")
	}
	if _, ok := n.PrevOpTime(); ok {
		t.Error("PrevOpTime of a no-op")
	}
	if _, ok := n.WallTime(); ok {
		t.Error("WallTime of a no-op")
	}
	if n.Kind() != Noop || n.Command() != CmdNone {
		t.Errorf("no-op kind %v command %v", n.Kind(), n.Command())
	}
}

func TestParseKinds(t *testing.T) {
	applyOps := bson.D{{Key: "applyOps", Value: bson.A{insertOp("a.b", bson.D{{Key: "_id", Value: 1}})}}, {Key: "partialTxn", Value: true}}
	tests := []struct {
		name    string
		entry   bson.D
		kind    Kind
		cmd     CommandClass
		partial bool
		prepare bool
	}{
		{"insert", with(outer(1, "i", "a.b"), "o", bson.D{{Key: "_id", Value: 1}}), Insert, CmdNone, false, false},
		{"insert with o2", with(outer(1, "i", "a.b"), "o", bson.D{{Key: "_id", Value: 1}, {Key: "sk", Value: 2}}, "o2", bson.D{{Key: "sk", Value: 2}, {Key: "_id", Value: 1}}), Insert, CmdNone, false, false},
		{"update", with(outer(1, "u", "a.b"), "o", bson.D{{Key: "x", Value: 1}}, "o2", bson.D{{Key: "_id", Value: 1}}), Update, CmdNone, false, false},
		{"delete", with(outer(1, "d", "a.b"), "o", bson.D{{Key: "_id", Value: 1}}), Delete, CmdNone, false, false},
		{"noop", with(outer(1, "n", ""), "o", bson.D{{Key: "msg", Value: "x"}}), Noop, CmdNone, false, false},
		{"noop without ns", bson.D{{Key: "ts", Value: tsAt(1)}, {Key: "op", Value: "n"}, {Key: "o", Value: bson.D{}}}, Noop, CmdNone, false, false},
		{"create", with(outer(1, "c", "a.$cmd"), "o", bson.D{{Key: "create", Value: "b"}}), Command, CmdCreate, false, false},
		{"applyOps partial (in o)", with(outer(1, "c", "admin.$cmd"), "o", applyOps), Command, CmdApplyOps, true, false},
		{"applyOps prepare (top level)", with(outer(1, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{}}}, "prepare", true), Command, CmdApplyOps, false, true},
		{"commit", with(outer(1, "c", "admin.$cmd"), "o", bson.D{{Key: "commitTransaction", Value: 1}}), Command, CmdCommitTransaction, false, false},
		{"unknown command", with(outer(1, "c", "a.$cmd"), "o", bson.D{{Key: "frobnicate", Value: 1}}), Command, CmdUnknown, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := mustParse(t, tt.entry)
			if e.Kind() != tt.kind || e.Command() != tt.cmd || e.PartialTxn() != tt.partial || e.Prepare() != tt.prepare {
				t.Errorf("kind %v cmd %v partial %v prepare %v; want %v %v %v %v",
					e.Kind(), e.Command(), e.PartialTxn(), e.Prepare(), tt.kind, tt.cmd, tt.partial, tt.prepare)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	id := bson.D{{Key: "_id", Value: 1}}
	good := marshal(t, with(outer(1, "i", "a.b"), "o", id))
	tests := []struct {
		name string
		raw  []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"truncated", good[:len(good)-3], "length prefix"},
		{"trailing bytes", append(append([]byte{}, good...), 0), "length prefix"},
		{"no NUL", append(append([]byte{}, good[:len(good)-1]...), 1), "NUL"},
		{"missing ts", marshal(t, bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: "a.b"}, {Key: "o", Value: id}}), `"ts" is missing`},
		{"missing op", marshal(t, bson.D{{Key: "ts", Value: tsAt(1)}, {Key: "ns", Value: "a.b"}, {Key: "o", Value: id}}), `"op" is missing`},
		{"missing o", marshal(t, outer(1, "i", "a.b")), `"o" is missing`},
		{"missing ns", marshal(t, bson.D{{Key: "ts", Value: tsAt(1)}, {Key: "op", Value: "i"}, {Key: "o", Value: id}}), `"ns" is missing`},
		{"unknown op", marshal(t, with(outer(1, "x", "a.b"), "o", id)), `unknown op "x"`},
		{"ts not a timestamp", marshal(t, bson.D{{Key: "ts", Value: int64(5)}, {Key: "op", Value: "i"}, {Key: "ns", Value: "a.b"}, {Key: "o", Value: id}}), `"ts" must be a timestamp`},
		{"o not a document", marshal(t, with(outer(1, "i", "a.b"), "o", "x")), `"o" must be a document`},
		{"fromMigrate not a bool", marshal(t, with(outer(1, "i", "a.b"), "o", id, "fromMigrate", "yes")), `"fromMigrate" must be a boolean`},
		{"txnNumber not a number", marshal(t, with(outer(1, "i", "a.b"), "o", id, "txnNumber", "1")), `"txnNumber" must be an integer`},
		{"prevOpTime without ts", marshal(t, with(outer(1, "i", "a.b"), "o", id, "prevOpTime", bson.D{{Key: "t", Value: 1}})), "ts is missing"},
		{"duplicate field", marshal(t, with(outer(1, "i", "a.b"), "o", id, "ns", "c.d")), `"ns" appears twice`},
		{"insert without _id", marshal(t, with(outer(1, "i", "a.b"), "o", bson.D{{Key: "x", Value: 1}})), `"o" has no _id`},
		{"insert o2 without _id", marshal(t, with(outer(1, "i", "a.b"), "o", id, "o2", bson.D{{Key: "x", Value: 1}})), `"o2" has no _id`},
		{"insert bad ns", marshal(t, with(outer(1, "i", "nodot"), "o", id)), "not a db.collection"},
		{"update without o2", marshal(t, with(outer(1, "u", "a.b"), "o", bson.D{{Key: "x", Value: 1}})), `"o2" (the document key) is missing`},
		{"update o2 without _id", marshal(t, with(outer(1, "u", "a.b"), "o", bson.D{{Key: "x", Value: 1}}, "o2", bson.D{{Key: "x", Value: 1}})), `"o2" has no _id`},
		{"update empty o", marshal(t, with(outer(1, "u", "a.b"), "o", bson.D{}, "o2", id)), `"o" is empty`},
		{"delete without _id", marshal(t, with(outer(1, "d", "a.b"), "o", bson.D{})), `"o" has no _id`},
		{"command ns", marshal(t, with(outer(1, "c", "a.b"), "o", bson.D{{Key: "drop", Value: "b"}})), "is not db.$cmd"},
		{"command empty", marshal(t, with(outer(1, "c", "a.$cmd"), "o", bson.D{})), "of a command is empty"},
		{"applyOps not an array", marshal(t, with(outer(1, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: 1}})), "applyOps must be an array"},
		{"partialTxn not a bool", marshal(t, with(outer(1, "c", "admin.$cmd"), "o", bson.D{{Key: "applyOps", Value: bson.A{}}, {Key: "partialTxn", Value: 1}})), "o.partialTxn must be a boolean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.raw)
			if !errors.Is(err, ErrMalformedEntry) {
				t.Fatalf("err = %v, want ErrMalformedEntry", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestCommandClasses(t *testing.T) {
	tests := []struct {
		name            string
		class           CommandClass
		ddl, txn, skips bool
	}{
		{"create", CmdCreate, true, false, false},
		{"drop", CmdDrop, true, false, false},
		{"renameCollection", CmdRenameCollection, true, false, false},
		{"dropDatabase", CmdDropDatabase, true, false, false},
		{"createIndexes", CmdCreateIndexes, true, false, false},
		{"commitIndexBuild", CmdCommitIndexBuild, true, false, false},
		{"dropIndexes", CmdDropIndexes, true, false, false},
		{"deleteIndexes", CmdDropIndexes, true, false, false},
		{"collMod", CmdCollMod, true, false, false},
		{"startIndexBuild", CmdStartIndexBuild, false, false, true},
		{"abortIndexBuild", CmdAbortIndexBuild, false, false, true},
		{"dbCheck", CmdDBCheck, false, false, true},
		{"applyOps", CmdApplyOps, false, true, false},
		{"commitTransaction", CmdCommitTransaction, false, true, false},
		{"abortTransaction", CmdAbortTransaction, false, true, false},
		{"emptycapped", CmdEmptyCapped, true, false, false},
		{"convertToCapped", CmdUnknown, false, false, false},
	}
	for _, tt := range tests {
		c := classify(tt.name)
		if c != tt.class || c.IsDDL() != tt.ddl || c.IsTxn() != tt.txn || c.Skipped() != tt.skips {
			t.Errorf("%s: class %v ddl %v txn %v skipped %v", tt.name, c, c.IsDDL(), c.IsTxn(), c.Skipped())
		}
		if tt.class != CmdUnknown && tt.name != "deleteIndexes" && c.String() != tt.name {
			t.Errorf("%s: String() = %q", tt.name, c)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	raw := marshal(b, with(outer(7, "u", "shop.orders"),
		"ui", bson.Binary{Subtype: 4, Data: make([]byte, 16)},
		"o", bson.D{{Key: "$v", Value: 2}, {Key: "diff", Value: bson.D{{Key: "u", Value: bson.D{{Key: "status", Value: "shipped"}}}}}},
		"o2", bson.D{{Key: "_id", Value: bson.NewObjectID()}},
		"wall", bson.DateTime(1),
	))
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}
