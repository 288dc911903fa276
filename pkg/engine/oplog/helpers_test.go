package oplog

import (
	"bytes"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Helpers that build raw oplog entries with bson.Marshal, as a server
// writes them.

// marshal marshals v or fails the test.
func marshal(t testing.TB, v any) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	return b
}

// tsAt returns the timestamp {100, i}.
func tsAt(i uint32) bson.Timestamp { return bson.Timestamp{T: 100, I: i} }

// lsidOf returns a session id for transaction tests.
func lsidOf(n byte) bson.D {
	return bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{n}, 16)}}}
}

// outer returns the common fields of a top-level entry.
func outer(i uint32, op, ns string) bson.D {
	return bson.D{{Key: "ts", Value: tsAt(i)}, {Key: "t", Value: int64(1)}, {Key: "op", Value: op}, {Key: "ns", Value: ns}}
}

// with appends fields.
func with(d bson.D, kv ...any) bson.D {
	out := append(bson.D{}, d...)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return out
}

// insertOp is an applyOps inner insert.
func insertOp(ns string, doc bson.D) bson.D {
	return bson.D{{Key: "op", Value: "i"}, {Key: "ns", Value: ns}, {Key: "o", Value: doc}}
}

// deleteOp is an applyOps inner delete.
func deleteOp(ns string, id any) bson.D {
	return bson.D{{Key: "op", Value: "d"}, {Key: "ns", Value: ns}, {Key: "o", Value: bson.D{{Key: "_id", Value: id}}}}
}

// txnEntry is an applyOps entry of transaction (lsid n, txnNumber 1).
// prev is the ts index of the previous entry (0: the first).
func txnEntry(i, prev uint32, n byte, ops []bson.D, flags ...string) bson.D {
	o := bson.D{{Key: "applyOps", Value: ops}}
	for _, f := range flags {
		o = append(o, bson.E{Key: f, Value: true})
	}
	prevTS := bson.Timestamp{}
	if prev != 0 {
		prevTS = tsAt(prev)
	}
	return with(outer(i, "c", "admin.$cmd"), "o", o, "lsid", lsidOf(n), "txnNumber", int64(1),
		"prevOpTime", bson.D{{Key: "ts", Value: prevTS}, {Key: "t", Value: int64(-1)}})
}

// txnControl is a commitTransaction or abortTransaction entry.
func txnControl(i, prev uint32, n byte, cmd string) bson.D {
	o := bson.D{{Key: cmd, Value: 1}}
	if cmd == "commitTransaction" {
		o = append(o, bson.E{Key: "commitTimestamp", Value: tsAt(i)})
	}
	return with(outer(i, "c", "admin.$cmd"), "o", o, "lsid", lsidOf(n), "txnNumber", int64(1),
		"prevOpTime", bson.D{{Key: "ts", Value: tsAt(prev)}, {Key: "t", Value: int64(1)}})
}

// mustParse parses a marshalled entry or fails the test.
func mustParse(t testing.TB, d bson.D) Entry {
	t.Helper()
	e, err := Parse(marshal(t, d))
	if err != nil {
		t.Fatalf("parse %v: %v", d, err)
	}
	return e
}

// docs renders update documents as extended JSON, for comparisons.
func docs(raws ...[]byte) []string {
	out := make([]string, len(raws))
	for i, r := range raws {
		out[i] = bson.Raw(r).String()
	}
	return out
}

// jsonOf renders values as canonical-ish extended JSON via bson.Raw.
func jsonOf(t testing.TB, vs ...any) []string {
	t.Helper()
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = marshal(t, v).String()
	}
	return out
}

// describeOps lists a unit's operations as "op ns _id".
func describeOps(u Unit) []string {
	var out []string
	for _, e := range u.Ops {
		id := e.O().Lookup("_id")
		out = append(out, fmt.Sprintf("%s %s %s", e.Op(), e.NS(), id))
	}
	return out
}

// literalJS describes the pipeline update that replaces a document with
// doc as it is, [{$replaceWith: {$literal: doc}}], as model does.
func literalJS(t testing.TB, doc bson.D) string {
	return bson.RawArray(marshal(t, bson.D{{Key: "0", Value: bson.D{{Key: "$replaceWith", Value: bson.D{{Key: "$literal", Value: doc}}}}}})).String()
}
