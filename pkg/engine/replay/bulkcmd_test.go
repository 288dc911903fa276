package replay

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

// readBulkWrite reads a bulkWrite command as a server does (ops and
// nsInfo in the body) back into the writes it carries, and checks the
// options replay relies on: ordered, errorsOnly, bypassing validation.
func readBulkWrite(cmd bson.Raw) ([]mongo.ClientBulkWrite, error) {
	if err := cmd.Validate(); err != nil {
		return nil, fmt.Errorf("command is not valid BSON: %w", err)
	}
	if first, err := cmd.IndexErr(0); err != nil || first.Key() != "bulkWrite" {
		return nil, fmt.Errorf("command %s does not start with bulkWrite", cmd)
	}
	for _, k := range []string{"ordered", "errorsOnly", "bypassDocumentValidation"} {
		if b, ok := cmd.Lookup(k).BooleanOK(); !ok || !b {
			return nil, fmt.Errorf("command %s: %s is not true", cmd, k)
		}
	}
	nsVals, err := cmd.Lookup("nsInfo").Array().Values()
	if err != nil {
		return nil, fmt.Errorf("nsInfo: %w", err)
	}
	var nss []catalog.Namespace
	for _, v := range nsVals {
		nss = append(nss, catalog.ParseNamespace(v.Document().Lookup("ns").StringValue()))
	}
	ops, err := cmd.Lookup("ops").Array().Values()
	if err != nil {
		return nil, fmt.Errorf("ops: %w", err)
	}
	out := make([]mongo.ClientBulkWrite, 0, len(ops))
	for i, v := range ops {
		op := v.Document()
		first := op.Index(0)
		at := first.Value().Int32()
		if at < 0 || int(at) >= len(nss) {
			return nil, fmt.Errorf("ops.%d names namespace %d of %d", i, at, len(nss))
		}
		filter, _ := op.Lookup("filter").DocumentOK()
		var m mongo.ClientWriteModel
		switch first.Key() {
		case "insert":
			m = &mongo.ClientInsertOneModel{Document: op.Lookup("document").Document()}
		case "delete":
			if op.Lookup("multi").Boolean() {
				return nil, fmt.Errorf("ops.%d: a delete of many documents", i)
			}
			m = &mongo.ClientDeleteOneModel{Filter: filter}
		case "update":
			if op.Lookup("multi").Boolean() {
				return nil, fmt.Errorf("ops.%d: an update of many documents", i)
			}
			var upsert *bool
			if b, ok := op.Lookup("upsert").BooleanOK(); ok {
				upsert = &b
			}
			u := op.Lookup("updateMods").Document()
			if strings.HasPrefix(u.Index(0).Key(), "$") {
				m = &mongo.ClientUpdateOneModel{Filter: filter, Update: u, Upsert: upsert}
			} else {
				m = &mongo.ClientReplaceOneModel{Filter: filter, Replacement: u, Upsert: upsert}
			}
		default:
			return nil, fmt.Errorf("ops.%d: unknown operation %q", i, first.Key())
		}
		out = append(out, mongo.ClientBulkWrite{Database: nss[at].DB, Collection: nss[at].Coll, Model: m})
	}
	return out, nil
}

// bulkWriteResult is a server's reply to an ordered, errorsOnly
// bulkWrite that ended with err (a mongo.ClientBulkWriteException naming
// the write that failed, or nil).
func bulkWriteResult(err error) (bson.Raw, error) {
	batch := bson.A{}
	if err != nil {
		var cbe mongo.ClientBulkWriteException
		if !errors.As(err, &cbe) {
			return nil, err
		}
		for i, we := range cbe.WriteErrors {
			batch = append(batch, bson.D{{Key: "ok", Value: 0.0}, {Key: "idx", Value: int32(i)}, {Key: "code", Value: int32(we.Code)}, {Key: "errmsg", Value: we.Message}})
		}
	}
	return bson.Marshal(bson.D{
		{Key: "cursor", Value: bson.D{{Key: "id", Value: int64(0)}, {Key: "firstBatch", Value: batch}, {Key: "ns", Value: "admin.$cmd.bulkWrite"}}},
		{Key: "nErrors", Value: int32(len(batch))}, {Key: "ok", Value: 1.0},
	})
}

func raw(t *testing.T, v any) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBulkWriteCommand builds commands from raw documents and reads them
// back as a server would: the same writes in the same order, in the
// namespaces they were bound for; and models the builder does not cover
// are left to the driver.
func TestBulkWriteCommand(t *testing.T) {
	doc := raw(t, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: "x"}, {Key: "$v", Value: 2}})
	key := raw(t, bson.D{{Key: "_id", Value: 1}})
	set := raw(t, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: "y"}}}})
	yes := true
	a, b := catalog.Namespace{DB: "db", Coll: "a"}, catalog.Namespace{DB: "other", Coll: "b.c"}
	items := func(ms ...mongo.WriteModel) []item {
		out := make([]item, len(ms))
		for i, m := range ms {
			out[i] = item{model: m}
		}
		return out
	}
	cases := []struct {
		name    string
		runs    []run
		wc      *writeconcern.WriteConcern
		covered bool
	}{
		{"every kind over two namespaces", []run{
			{ns: a, cmd: cmdInsert, items: items(&mongo.InsertOneModel{Document: doc})},
			{ns: b, cmd: cmdUpdate, items: items(&mongo.UpdateOneModel{Filter: key, Update: set}, &mongo.ReplaceOneModel{Filter: key, Replacement: doc, Upsert: &yes})},
			{ns: a, cmd: cmdDelete, items: items(&mongo.DeleteOneModel{Filter: key})},
		}, nil, true},
		{"write concern majority, journaled", []run{{ns: a, cmd: cmdDelete, items: items(&mongo.DeleteOneModel{Filter: key})}},
			&writeconcern.WriteConcern{W: "majority", Journal: &yes}, true},
		{"unacknowledged write concern", []run{{ns: a, cmd: cmdDelete, items: items(&mongo.DeleteOneModel{Filter: key})}},
			&writeconcern.WriteConcern{W: 0}, false},
		{"a document that is not raw BSON", []run{{ns: a, cmd: cmdInsert, items: items(&mongo.InsertOneModel{Document: bson.D{{Key: "_id", Value: 1}}})}}, nil, false},
		{"an insert without _id", []run{{ns: a, cmd: cmdInsert, items: items(&mongo.InsertOneModel{Document: raw(t, bson.D{{Key: "a", Value: 1}})})}}, nil, false},
		{"a truncated document", []run{{ns: a, cmd: cmdDelete, items: items(&mongo.DeleteOneModel{Filter: key[:len(key)-1]})}}, nil, false},
		{"a collation", []run{{ns: a, cmd: cmdDelete, items: items(&mongo.DeleteOneModel{Filter: key, Collation: &options.Collation{Locale: "fr"}})}}, nil, false},
		{"a delete of many", []run{{ns: a, cmd: cmdDelete, items: items(&mongo.DeleteManyModel{Filter: key})}}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			buf := &bulkBuf{idx: map[catalog.Namespace]int32{}}
			cmd, ok := appendBulkWrite([]byte("prefix"), buf, c.runs, c.wc)
			if ok != c.covered {
				t.Fatalf("covered = %v, want %v", ok, c.covered)
			}
			if !ok {
				if string(cmd) != "prefix" {
					t.Errorf("a declined command left %q in the buffer", cmd)
				}
				return
			}
			cmd = cmd[len("prefix"):]
			got, err := readBulkWrite(cmd)
			if err != nil {
				t.Fatal(err)
			}
			var want []mongo.ClientBulkWrite
			for _, rn := range c.runs {
				for _, it := range rn.items {
					m, _ := clientModel(it.model)
					want = append(want, mongo.ClientBulkWrite{Database: rn.ns.DB, Collection: rn.ns.Coll, Model: m})
				}
			}
			if g, w := fmt.Sprint(describeBulk(t, got)), fmt.Sprint(describeBulk(t, want)); g != w {
				t.Errorf("command carries\n%s\nwant\n%s", g, w)
			}
			wc, err := bson.Raw(cmd).LookupErr("writeConcern")
			switch {
			case c.wc == nil && err == nil:
				t.Errorf("writeConcern %s, want none", wc)
			case c.wc != nil && wc.String() != `{"w": "majority","j": true}`:
				t.Errorf("writeConcern %s", wc)
			}
		})
	}
}

// describeBulk renders writes as namespace, kind and raw documents.
func describeBulk(t *testing.T, writes []mongo.ClientBulkWrite) []string {
	t.Helper()
	doc := func(v any) string {
		if v == nil {
			return "-"
		}
		return bson.Raw(raw(t, v)).String()
	}
	var out []string
	for _, w := range writes {
		s := w.Database + "." + w.Collection + " "
		switch m := w.Model.(type) {
		case *mongo.ClientInsertOneModel:
			s += "insert " + doc(m.Document)
		case *mongo.ClientUpdateOneModel:
			s += fmt.Sprintf("update %s %s upsert=%v", doc(m.Filter), doc(m.Update), m.Upsert != nil && *m.Upsert)
		case *mongo.ClientReplaceOneModel:
			s += fmt.Sprintf("replace %s %s upsert=%v", doc(m.Filter), doc(m.Replacement), m.Upsert != nil && *m.Upsert)
		case *mongo.ClientDeleteOneModel:
			s += "delete " + doc(m.Filter)
		}
		out = append(out, s)
	}
	return out
}

// TestBulkWriteReply reads replies as MongoDB 8.0 writes them for an
// ordered, errorsOnly bulkWrite: how many writes were applied before the
// one that failed, and whether the command failed.
func TestBulkWriteReply(t *testing.T) {
	cursor := func(batch ...bson.D) bson.D {
		a := bson.A{}
		for _, d := range batch {
			a = append(a, d)
		}
		return bson.D{{Key: "id", Value: int64(0)}, {Key: "firstBatch", Value: a}, {Key: "ns", Value: "admin.$cmd.bulkWrite"}}
	}
	cases := []struct {
		name    string
		reply   bson.D
		applied int
		err     string
	}{
		{"all applied", bson.D{{Key: "ok", Value: 1.0}, {Key: "cursor", Value: cursor()}, {Key: "nErrors", Value: int32(0)}, {Key: "nInserted", Value: int32(10)}}, 10, ""},
		{"duplicate key at 4", bson.D{{Key: "ok", Value: 1.0}, {Key: "cursor", Value: cursor(bson.D{{Key: "ok", Value: 0.0}, {Key: "idx", Value: int32(4)}, {Key: "code", Value: int32(11000)}, {Key: "errmsg", Value: "E11000 duplicate key"}})}, {Key: "nErrors", Value: int32(1)}},
			4, "write 4: (11000) E11000 duplicate key"},
		{"write concern error", bson.D{{Key: "ok", Value: 1.0}, {Key: "cursor", Value: cursor()}, {Key: "nErrors", Value: int32(0)}, {Key: "writeConcernError", Value: bson.D{{Key: "code", Value: int32(64)}, {Key: "errmsg", Value: "waiting for replication timed out"}}}},
			0, "write concern error"},
		{"an error outside the first batch", bson.D{{Key: "ok", Value: 1.0}, {Key: "cursor", Value: cursor()}, {Key: "nErrors", Value: int32(1)}}, 0, "none named"},
		{"an index past the command", bson.D{{Key: "ok", Value: 1.0}, {Key: "cursor", Value: cursor(bson.D{{Key: "ok", Value: 0.0}, {Key: "idx", Value: int32(10)}, {Key: "code", Value: int32(2)}})}, {Key: "nErrors", Value: int32(1)}},
			0, "none named"},
		{"no nErrors", bson.D{{Key: "ok", Value: 1.0}}, 0, "without nErrors"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			applied, err := bulkWriteReply(raw(t, c.reply), 10)
			if applied != c.applied {
				t.Errorf("applied %d, want %d", applied, c.applied)
			}
			switch {
			case c.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Errorf("error %v, want one containing %q", err, c.err)
			}
		})
	}
}

// BenchmarkBulkWriteCommand builds a bulkWrite of 1000 writes of the
// ddt shape's mix from raw documents.
func BenchmarkBulkWriteCommand(b *testing.B) {
	var runs []run
	for i := range 1000 {
		key := bsoncore.NewDocumentBuilder().AppendInt32("_id", int32(i)).Build()
		ns := catalog.Namespace{DB: "db", Coll: fmt.Sprintf("c%d", i%10)}
		var m mongo.WriteModel
		switch i % 10 {
		case 0, 1, 2, 3, 4, 5:
			m = &mongo.InsertOneModel{Document: bson.Raw(bsoncore.NewDocumentBuilder().AppendInt32("_id", int32(i)).AppendString("name", strings.Repeat("x", 100)).Build())}
		case 6, 7, 8:
			m = &mongo.UpdateOneModel{Filter: bson.Raw(key), Update: bson.Raw(bsoncore.NewDocumentBuilder().AppendDocument("$set", bsoncore.NewDocumentBuilder().AppendInt32("n", 1).Build()).Build())}
		default:
			m = &mongo.DeleteOneModel{Filter: bson.Raw(key)}
		}
		runs = append(runs, run{ns: ns, items: []item{{model: m}}})
	}
	buf := &bulkBuf{idx: map[catalog.Namespace]int32{}}
	var cmd []byte
	b.ReportAllocs()
	for b.Loop() {
		var ok bool
		if cmd, ok = appendBulkWrite(cmd[:0], buf, runs, nil); !ok {
			b.Fatal("not covered")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(runs)), "ns/write")
}
