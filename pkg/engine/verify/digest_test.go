package verify

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongoferry/mongoferry/pkg/config"
	"github.com/mongoferry/mongoferry/pkg/engine/catalog"
)

func raw(t *testing.T, d bson.D) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func digestOf(docs ...bson.Raw) Digest {
	var d Digest
	for _, doc := range docs {
		d.Add(doc)
	}
	return d
}

func TestDigest(t *testing.T) {
	a := raw(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "x", Value: "a"}})
	b := raw(t, bson.D{{Key: "_id", Value: int32(2)}, {Key: "x", Value: "b"}})
	c := raw(t, bson.D{{Key: "_id", Value: int32(3)}, {Key: "x", Value: "c"}})
	aReordered := raw(t, bson.D{{Key: "x", Value: "a"}, {Key: "_id", Value: int32(1)}})
	aInt64 := raw(t, bson.D{{Key: "_id", Value: int64(1)}, {Key: "x", Value: "a"}})
	aDouble := raw(t, bson.D{{Key: "_id", Value: 1.0}, {Key: "x", Value: "a"}})

	tests := []struct {
		name  string
		x, y  []bson.Raw
		equal bool
	}{
		{"empty", nil, nil, true},
		{"same documents", []bson.Raw{a, b, c}, []bson.Raw{a, b, c}, true},
		{"order does not matter", []bson.Raw{a, b, c}, []bson.Raw{c, a, b}, true},
		{"missing document", []bson.Raw{a, b, c}, []bson.Raw{a, b}, false},
		{"duplicates do not cancel out", []bson.Raw{a, a}, nil, false},
		{"a pair of duplicates is not another pair", []bson.Raw{a, a}, []bson.Raw{b, b}, false},
		{"duplicate counts", []bson.Raw{a, a, b}, []bson.Raw{a, b, b}, false},
		{"field order matters", []bson.Raw{a}, []bson.Raw{aReordered}, false},
		{"int32 is not int64", []bson.Raw{a}, []bson.Raw{aInt64}, false},
		{"int32 is not double", []bson.Raw{a}, []bson.Raw{aDouble}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dx, dy := digestOf(tt.x...), digestOf(tt.y...)
			if got := dx == dy; got != tt.equal {
				t.Errorf("digests equal = %v, want %v (%s/%d vs %s/%d)", got, tt.equal, dx.Hex(), dx.Count, dy.Hex(), dy.Count)
			}
			if got := dx.Hex() == dy.Hex(); got != tt.equal && dx.Count == dy.Count {
				t.Errorf("hex equal = %v, want %v", got, tt.equal)
			}
		})
	}
}

func TestDigestArithmetic(t *testing.T) {
	hi := docHash{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}
	one := docHash{0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	tests := []struct {
		name  string
		add   []docHash
		lanes [2]uint64
		hex   string
	}{
		{"zero", nil, [2]uint64{0, 0}, strings.Repeat("0", 32)},
		{"one document", []docHash{hi}, [2]uint64{math.MaxUint64, 1}, "ffffffffffffffff0000000000000001"},
		{"lanes wrap independently", []docHash{hi, one}, [2]uint64{0, 0}, strings.Repeat("0", 32)},
		{"duplicates add", []docHash{hi, hi}, [2]uint64{math.MaxUint64 - 1, 2}, "fffffffffffffffe0000000000000002"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Digest
			for _, h := range tt.add {
				d.add(h)
			}
			if d.Lanes != tt.lanes || d.Count != int64(len(tt.add)) || d.Hex() != tt.hex {
				t.Errorf("got lanes %x count %d hex %s, want %x %d %s", d.Lanes, d.Count, d.Hex(), tt.lanes, len(tt.add), tt.hex)
			}
		})
	}
}

func TestDigestMerge(t *testing.T) {
	var docs []bson.Raw
	for i := range 20 {
		docs = append(docs, raw(t, bson.D{{Key: "_id", Value: int32(i)}, {Key: "v", Value: i * i}}))
	}
	whole := digestOf(docs...)
	for split := range len(docs) + 1 {
		left, right := digestOf(docs[:split]...), digestOf(docs[split:]...)
		left.Merge(right)
		if left != whole {
			t.Fatalf("split at %d: merged %s/%d, whole %s/%d", split, left.Hex(), left.Count, whole.Hex(), whole.Count)
		}
	}
}

func TestHashDocIsSHA256Prefix(t *testing.T) {
	doc := raw(t, bson.D{{Key: "_id", Value: "a"}})
	h1, h2 := hashDoc(doc), hashDoc(slices.Clone(doc))
	if h1 != h2 {
		t.Fatal("hash of equal bytes differs")
	}
	// Known SHA-256 of the empty input: e3b0c442 98fc1c14 9afbf4c8 996fb924 ...
	if got := hashDoc(nil); got != (docHash{0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24}) {
		t.Errorf("hashDoc(nil) = %x", got)
	}
}

func TestIDKey(t *testing.T) {
	oid, _ := bson.ObjectIDFromHex("64b7f0c2a1b2c3d4e5f60718")
	dec, _ := bson.ParseDecimal128("1.50")
	tests := []struct {
		name string
		doc  bson.D
		// key is the expected key: type byte, then the value's bytes.
		key    []byte
		render string
	}{
		{"int32", bson.D{{Key: "_id", Value: int32(1)}}, []byte{0x10, 1, 0, 0, 0}, `{"$numberInt":"1"}`},
		{"int64", bson.D{{Key: "_id", Value: int64(1)}}, []byte{0x12, 1, 0, 0, 0, 0, 0, 0, 0}, `{"$numberLong":"1"}`},
		{"double", bson.D{{Key: "_id", Value: 1.0}}, []byte{0x01, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, `{"$numberDouble":"1.0"}`},
		{"string", bson.D{{Key: "_id", Value: "ab"}}, []byte{0x02, 3, 0, 0, 0, 'a', 'b', 0}, `"ab"`},
		{"objectid", bson.D{{Key: "_id", Value: oid}}, append([]byte{0x07}, oid[:]...), `{"$oid":"64b7f0c2a1b2c3d4e5f60718"}`},
		{"embedded document", bson.D{{Key: "_id", Value: bson.D{{Key: "k", Value: int32(2)}}}},
			[]byte{0x03, 12, 0, 0, 0, 0x10, 'k', 0, 2, 0, 0, 0, 0}, `{"k":{"$numberInt":"2"}}`},
		{"_id not first", bson.D{{Key: "a", Value: true}, {Key: "_id", Value: int32(1)}}, []byte{0x10, 1, 0, 0, 0}, `{"$numberInt":"1"}`},
		{"decimal128", bson.D{{Key: "_id", Value: dec}}, nil, `{"$numberDecimal":"1.50"}`},
		{"minkey", bson.D{{Key: "_id", Value: bson.MinKey{}}}, []byte{0xff}, `{"$minKey":1}`},
		{"maxkey", bson.D{{Key: "_id", Value: bson.MaxKey{}}}, []byte{0x7f}, `{"$maxKey":1}`},
		{"binary uuid", bson.D{{Key: "_id", Value: bson.Binary{Subtype: 4, Data: bytes.Repeat([]byte{0xab}, 16)}}}, nil,
			`{"$binary":{"base64":"q6urq6urq6urq6urq6urqw==","subType":"04"}}`},
		{"date", bson.D{{Key: "_id", Value: bson.NewDateTimeFromTime(time.UnixMilli(-1))}}, nil, `{"$date":{"$numberLong":"-1"}}`},
		{"no _id", bson.D{{Key: "a", Value: int32(1)}}, nil, `(no _id) {"a": {"$numberInt":"1"}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := raw(t, tt.doc)
			k, err := keyOf(doc)
			if err != nil {
				t.Fatal(err)
			}
			if tt.key != nil && string(k) != string(tt.key) {
				t.Errorf("key = %x, want %x", string(k), tt.key)
			}
			if got := k.String(); got != tt.render {
				t.Errorf("String() = %s, want %s", got, tt.render)
			}
			b, err := appendKey([]byte("prefix"), doc)
			if err != nil || string(b) != "prefix"+string(k) {
				t.Errorf("appendKey = %x, %v", b, err)
			}
		})
	}
}

func TestIDKeysOfEqualNumbersDiffer(t *testing.T) {
	keys := map[idKey]string{}
	for _, v := range []any{int32(1), int64(1), 1.0, "1", bson.D{{Key: "a", Value: int32(1)}}, bson.A{int32(1)}} {
		k, err := keyOf(raw(t, bson.D{{Key: "_id", Value: v}}))
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := keys[k]; dup {
			t.Errorf("%v and %s have the same key", v, prev)
		}
		keys[k] = k.String()
	}
}

func TestIDKeyMalformed(t *testing.T) {
	doc := raw(t, bson.D{{Key: "x", Value: "abc"}, {Key: "_id", Value: int32(1)}})
	doc[9] = 0x7e // corrupt the length of "abc"
	if _, err := keyOf(doc); err == nil {
		t.Fatal("keyOf accepted a malformed document")
	}
}

func TestIDKeyLongRender(t *testing.T) {
	k, err := keyOf(raw(t, bson.D{{Key: "_id", Value: strings.Repeat("é", 300)}}))
	if err != nil {
		t.Fatal(err)
	}
	s := k.String()
	if !strings.HasSuffix(s, "...") || len(s) > maxIDChars+3 || !strings.HasPrefix(s, `"éé`) {
		t.Errorf("long _id rendered as %q", s)
	}
}

func TestKeepSmallest(t *testing.T) {
	tests := []struct {
		in    []idKey
		limit int
		want  []idKey
	}{
		{[]idKey{"d", "b", "a", "c", "e"}, 3, []idKey{"a", "b", "c"}},
		{[]idKey{"b", "a"}, 3, []idKey{"a", "b"}},
		{[]idKey{"b", "a"}, 0, nil},
		{[]idKey{"a", "a", "b"}, 2, []idKey{"a", "a"}},
	}
	for _, tt := range tests {
		var got []idKey
		for _, k := range tt.in {
			got = keepSmallest(got, k, tt.limit)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("keepSmallest(%v, %d) = %v, want %v", tt.in, tt.limit, got, tt.want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	rep := &Report{Mode: config.VerifyHash, Namespaces: []NamespaceResult{
		{Source: catalog.Namespace{DB: "app", Coll: "a"}, Target: catalog.Namespace{DB: "app", Coll: "a"},
			SourceCount: 3, TargetCount: 3, SourceHash: "h", TargetHash: "h", OK: true},
		{Source: catalog.Namespace{DB: "app", Coll: "b"}, Target: catalog.Namespace{DB: "bak", Coll: "b"},
			SourceCount: 12, TargetCount: 11, SourceHash: "h1", TargetHash: "h2",
			Missing: []string{`{"$numberInt":"1"}`}, MissingCount: 2, Changed: []string{`"x"`}, ChangedCount: 1},
		{Source: catalog.Namespace{DB: "app", Coll: "v"}, Target: catalog.Namespace{DB: "app", Coll: "v"},
			Skipped: true, OK: true, Note: "skipped: view (no documents of its own)"},
	}}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"NAMESPACE", "HASH", "RESULT",
		"app.a ", " match ", " ok\n",
		"app.b -> bak.b", "12", "11", "differs", "DIFFERS",
		"app.v", "skipped: view",
		"Differences:",
		"source has 12 documents, target 11",
		"2 missing on target", "1 changed",
		`missing  _id {"$numberInt":"1"}`, "... and 1 more missing", `changed  _id "x"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "app.a:") {
		t.Errorf("matching namespace listed under differences:\n%s", out)
	}
	if rep.OK() || rep.Differing() != 1 {
		t.Errorf("OK = %v, Differing = %d; want false, 1", rep.OK(), rep.Differing())
	}
}
