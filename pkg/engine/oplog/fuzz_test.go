package oplog

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// seedEntries are well-formed entries of every shape, the fuzzers' seeds.
func seedEntries(t testing.TB) []bson.D {
	id := D{kv("_id", 1)}
	return []bson.D{
		with(outer(1, "i", "a.b"), "o", D{kv("_id", 1), kv("x", A{1, "s", D{kv("y", nil)}})}, "ui", bson.Binary{Subtype: 4, Data: make([]byte, 16)}, "wall", bson.DateTime(5)),
		with(outer(1, "i", "a.b"), "o", D{kv("_id", 1), kv("sk", 2)}, "o2", D{kv("sk", 2), kv("_id", 1)}, "fromMigrate", true),
		with(outer(2, "u", "a.b"), "o", D{kv("$v", 2), kv("diff", D{kv("u", D{kv("x", 1)}), kv("sarr", D{kv("a", true), kv("l", 1), kv("u0", 2)})})}, "o2", id),
		with(outer(2, "u", "a.b"), "o", D{kv("$v", 1), kv("$set", D{kv("x", 1)})}, "o2", id),
		with(outer(2, "u", "a.b"), "o", D{kv("_id", 1), kv("diff", D{})}, "o2", id),
		with(outer(3, "d", "a.b"), "o", id),
		with(outer(4, "n", ""), "o", D{kv("msg", "periodic noop")}),
		with(outer(5, "c", "a.$cmd"), "o", D{kv("create", "b")}),
		with(outer(5, "c", "admin.$cmd"), "o", D{kv("renameCollection", "a.b"), kv("to", "a.c"), kv("dropTarget", true)}),
		with(outer(5, "c", "a.$cmd"), "o", D{kv("commitIndexBuild", "b"), kv("indexes", A{D{kv("key", D{kv("x", 1)}), kv("name", "x_1")}})}),
		with(outer(5, "c", "a.$cmd"), "o", D{kv("dropIndexes", "b"), kv("index", A{"x_1"})}),
		with(outer(5, "c", "admin.$cmd"), "o", D{kv("applyOps", A{insertOp("a.b", id), deleteOp("a.b", 1)})}),
		txnEntry(6, 0, 1, []bson.D{insertOp("a.b", id)}, "partialTxn"),
		txnEntry(7, 0, 1, []bson.D{insertOp("a.b", id)}, "prepare"),
		txnControl(8, 7, 1, "commitTransaction"),
		txnControl(8, 7, 1, "abortTransaction"),
	}
}

// FuzzParse feeds arbitrary bytes to Parse, and whatever parses through
// everything else that reads an entry: nothing may panic.
func FuzzParse(f *testing.F) {
	for _, d := range seedEntries(f) {
		raw := marshal(f, d)
		f.Add([]byte(raw))
		f.Add([]byte(raw[:len(raw)/2]))
	}
	f.Add([]byte{})
	f.Add([]byte{5, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedEntry) {
				t.Fatalf("Parse error does not wrap ErrMalformedEntry: %v", err)
			}
			return
		}
		_ = e.String()
		_, _ = e.Term()
		_, _ = e.UI()
		_ = e.LSID()
		_, _ = e.TxnNumber()
		_, _ = e.PrevOpTime()
		_, _ = e.WallTime()
		_, _ = (&Filter{}).Skip(e)
		if d, err := e.DDL(); err == nil {
			_, _ = d.Options()
			_, _ = d.Indexes()
			_, _ = d.DropIndexNames()
			_ = d.DropTarget()
		}
		if _, err := Translate(e); err != nil && !errors.Is(err, ErrNeedsAssembly) {
			_ = err.Error()
		}
		a := NewAssembler()
		u, ok, err := a.Add(e)
		if err == nil && ok {
			for _, op := range u.Ops {
				_, _ = (&Filter{}).Skip(op)
				_, _ = Translate(op)
			}
		}
		if err := NewAssembler().Recover(a.Checkpoint()); err != nil {
			t.Fatalf("Recover(Checkpoint()) failed: %v", err)
		}
	})
}

// FuzzTranslateDiff feeds arbitrary diff documents to the $v:2
// translation. It never panics; malformed input is an error; and what it
// returns are update documents of $set/$unset/$push in which no two paths
// conflict.
func FuzzTranslateDiff(f *testing.F) {
	seeds := []D{
		{},
		{kv("u", D{kv("x", 1)}), kv("d", D{kv("y", false)}), kv("i", D{kv("b", 1), kv("a", 2)})},
		{kv("sa", D{kv("sb", D{kv("u", D{kv("c", 1)})}), kv("i", D{kv("10", 1), kv("9", 1)})})},
		{kv("sarr", D{kv("a", true), kv("l", 3), kv("u1", 9), kv("s2", D{kv("a", true), kv("l", 0)})})},
		{kv("sarr", D{kv("a", true), kv("s0", D{kv("d", D{kv("k", false)}), kv("i", D{kv("k", 1)})})})},
		{kv("x", D{})},
		{kv("sarr", D{kv("a", false)})},
		{kv("u", D{kv("a.b", 1)})},
	}
	for _, d := range seeds {
		raw := marshal(f, d)
		f.Add([]byte(raw))
		f.Add([]byte(raw[:len(raw)-1]))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The bytes also pick a random document and a valid diff of it,
		// checked against the applier model (model_test.go): random BSON
		// rarely gets past the framing, this reaches the packing logic.
		if len(data) >= 16 {
			checkRoundTrip(t, binary.LittleEndian.Uint64(data), binary.LittleEndian.Uint64(data[8:]))
		}
		updates, err := translateDiff(data)
		if err != nil {
			if !errors.Is(err, ErrMalformedDiff) && !errors.Is(err, ErrUnknownDiffSection) && !errors.Is(err, ErrUnaddressablePath) {
				t.Fatalf("error without a sentinel: %v", err)
			}
			return
		}
		for _, u := range updates {
			checkUpdate(t, u)
		}
		// The same diff inside an update entry translates the same way.
		if bson.Raw(data).Validate() == nil {
			b := start(nil)
			b.value("$v", bsoncore.Value{Type: bsoncore.TypeInt32, Data: []byte{2, 0, 0, 0}})
			b.value("diff", bsoncore.Value{Type: bsoncore.TypeEmbeddedDocument, Data: data})
			e := mustParse(t, with(outer(1, "u", "a.b"), "o", bson.Raw(b.finish()), "o2", D{kv("_id", 1)}))
			ws, err := Translate(e)
			if err != nil || len(ws) != len(updates) {
				t.Fatalf("Translate: %d writes, %v; translateDiff: %d updates", len(ws), err, len(updates))
			}
		}
	})
}

// checkUpdate checks one update document made by translateDiff.
func checkUpdate(t *testing.T, u []byte) {
	t.Helper()
	var paths []string
	err := forEach(u, func(op []byte, v bsoncore.Value) error {
		switch string(op) {
		case "$set", "$unset", "$push":
		default:
			t.Fatalf("operator %q in %s", op, bson.Raw(u))
		}
		if v.Type != bsoncore.TypeEmbeddedDocument {
			t.Fatalf("%s is a %s", op, v.Type)
		}
		return forEach(v.Data, func(p []byte, _ bsoncore.Value) error {
			path := string(p)
			if path == "" || strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") || strings.Contains(path, "..") {
				t.Fatalf("bad path %q in %s", path, bson.Raw(u))
			}
			for _, q := range paths {
				if related(q, path) {
					t.Fatalf("paths %q and %q conflict in %s", q, path, bson.Raw(u))
				}
			}
			paths = append(paths, path)
			return nil
		})
	})
	if err != nil {
		t.Fatalf("update %x does not parse: %v", u, err)
	}
	if len(paths) == 0 {
		t.Fatalf("empty update %s", bson.Raw(u))
	}
}
