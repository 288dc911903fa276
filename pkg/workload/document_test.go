package workload

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func newTestRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed)) }

func TestKey(t *testing.T) {
	tests := []struct {
		t    KeyType
		n    int64
		want any
	}{
		{KeyString, 0, "user0000000000"},
		{KeyString, 42, "user0000000042"},
		{KeyString, 9999999999, "user9999999999"},
		{KeyString, 12345678901, "user12345678901"},
		{KeyInt, 42, int64(42)},
		{"", 7, "user0000000007"},
	}
	for _, tc := range tests {
		got := tc.t.Key(tc.n)
		if got != tc.want {
			t.Errorf("KeyType(%q).Key(%d) = %#v, want %#v", tc.t, tc.n, got, tc.want)
		}
		_, v, err := bson.MarshalValue(got)
		if err != nil {
			t.Fatal(err)
		}
		typ := bson.TypeString
		if tc.t == KeyInt {
			typ = bson.TypeInt64
		}
		n, ok := parseKey(bson.RawValue{Type: typ, Value: v})
		if !ok || n != tc.n {
			t.Errorf("parseKey(Key(%d)) = %d, %v", tc.n, n, ok)
		}
	}
	for _, v := range []any{"customer1", "user", "userabc0000000", int64(-1), 1.5} {
		typ, b, _ := bson.MarshalValue(v)
		if n, ok := parseKey(bson.RawValue{Type: typ, Value: b}); ok {
			t.Errorf("parseKey(%#v) = %d, want not ok", v, n)
		}
	}
}

func TestGenerateDocument(t *testing.T) {
	tests := []struct {
		key         any
		fields, len int
	}{
		{"user0000000001", 10, 100},
		{int64(5), 3, 1},
		{7, 1, 0},
		{int32(9), 2, 17},
		{bson.NewObjectID(), 4, 8},
		{bson.D{{Key: "a", Value: 1}}, 1, 3},
	}
	for _, tc := range tests {
		doc := GenerateDocument(newTestRand(1), tc.key, tc.fields, tc.len)
		if err := doc.Validate(); err != nil {
			t.Fatalf("key %#v: invalid BSON: %v", tc.key, err)
		}
		elems, _ := doc.Elements()
		if len(elems) != tc.fields+1 || elems[0].Key() != "_id" {
			t.Fatalf("key %#v: document %s has wrong fields", tc.key, doc)
		}
		want, _ := bson.Marshal(bson.D{{Key: "_id", Value: normaliseKey(tc.key)}})
		var got bson.D
		if err := bson.Unmarshal(doc, &got); err != nil {
			t.Fatal(err)
		}
		gotID, _ := bson.Marshal(got[:1])
		if !bytes.Equal(gotID, want) {
			t.Errorf("key %#v: _id is %s, want %s", tc.key, bson.Raw(gotID), bson.Raw(want))
		}
		for i, e := range elems[1:] {
			if e.Key() != fieldNames[i] {
				t.Errorf("field %d is %q", i, e.Key())
			}
			s, ok := e.Value().StringValueOK()
			if !ok || len(s) != tc.len || strings.Trim(s, alphabet) != "" {
				t.Errorf("field %s = %q, want %d characters of the alphabet", e.Key(), s, tc.len)
			}
		}
	}
	if a, b := GenerateDocument(newTestRand(1), "k", 5, 50), GenerateDocument(newTestRand(1), "k", 5, 50); !bytes.Equal(a, b) {
		t.Error("same seed gave different documents")
	}
	if a, b := GenerateDocument(newTestRand(1), "k", 5, 50), GenerateDocument(newTestRand(2), "k", 5, 50); bytes.Equal(a, b) {
		t.Error("different seeds gave the same document")
	}
}

// normaliseKey is the _id GenerateDocument writes for a Go value.
func normaliseKey(k any) any {
	if i, ok := k.(int); ok {
		return int64(i)
	}
	return k
}

func TestOptionsDocument(t *testing.T) {
	for _, kt := range []KeyType{KeyString, KeyInt} {
		o := Options{KeyType: kt, FieldCount: 4, FieldLength: 20, Seed: 3}
		doc := o.Document(17)
		if !bytes.Equal(doc, o.Document(17)) {
			t.Fatalf("%s: Document is not repeatable", kt)
		}
		// The same as GenerateDocument with the documented generator.
		pcg := rand.NewPCG(0, 0)
		recordRNG(pcg, 3, 17)
		if want := GenerateDocument(rand.New(pcg), kt.Key(17), 4, 20); !bytes.Equal(doc, want) {
			t.Errorf("%s: Document(17) = %s, GenerateDocument gives %s", kt, doc, want)
		}
		if len(doc) != o.DocumentSize() {
			t.Errorf("%s: DocumentSize() = %d, document has %d bytes", kt, o.DocumentSize(), len(doc))
		}
		if bytes.Equal(doc, o.Document(18)) {
			t.Errorf("%s: records 17 and 18 are equal", kt)
		}
		other := o
		other.Seed = 4
		if bytes.Equal(doc, other.Document(17)) {
			t.Errorf("%s: seeds 3 and 4 give the same record", kt)
		}
	}
}

func TestFiltersAndUpdates(t *testing.T) {
	for _, tc := range []struct {
		t KeyType
		n int64
	}{{KeyString, 0}, {KeyString, 123}, {KeyString, 12345678901}, {KeyInt, 99}} {
		got := appendKeyFilter(nil, tc.t, tc.n)
		want, _ := bson.Marshal(bson.D{{Key: "_id", Value: tc.t.Key(tc.n)}})
		if !bytes.Equal(got, want) {
			t.Errorf("appendKeyFilter(%s, %d) = %s, want %s", tc.t, tc.n, bson.Raw(got), bson.Raw(want))
		}
	}
	up := bson.Raw(appendSetField(nil, newTestRand(1), 7, 12))
	if err := up.Validate(); err != nil {
		t.Fatal(err)
	}
	v, err := up.LookupErr("$set", "field7")
	if s, ok := v.StringValueOK(); err != nil || !ok || len(s) != 12 {
		t.Errorf("appendSetField = %s", up)
	}
}

func TestAppendAllocations(t *testing.T) {
	o := Options{}.WithDefaults()
	pcg := rand.NewPCG(0, 0)
	rng := rand.New(pcg)
	buf := make([]byte, 0, 4*o.DocumentSize())
	var n int64
	allocs := testing.AllocsPerRun(1000, func() {
		recordRNG(pcg, 1, n)
		buf = appendRecord(buf[:0], rng, KeyString, n, o.FieldCount, o.FieldLength)
		buf = appendKeyFilter(buf, KeyString, n)
		buf = appendSetField(buf, rng, 3, o.FieldLength)
		n++
	})
	if allocs != 0 {
		t.Errorf("generating a record, filter and update allocates %.1f times, want 0", allocs)
	}
}

func BenchmarkAppendRecord(b *testing.B) {
	o := Options{}.WithDefaults()
	pcg := rand.NewPCG(0, 0)
	rng := rand.New(pcg)
	buf := make([]byte, 0, o.DocumentSize())
	b.SetBytes(int64(o.DocumentSize()))
	b.ReportAllocs()
	for i := range b.N {
		recordRNG(pcg, 1, int64(i))
		buf = appendRecord(buf[:0], rng, o.KeyType, int64(i), o.FieldCount, o.FieldLength)
	}
}
