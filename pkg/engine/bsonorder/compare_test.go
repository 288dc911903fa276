package bsonorder

import (
	"cmp"
	"math"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// val marshals x into a RawValue.
func val(tb testing.TB, x any) bson.RawValue {
	tb.Helper()
	t, b, err := bson.MarshalValue(x)
	if err != nil {
		tb.Fatalf("marshal %#v: %v", x, err)
	}
	return bson.RawValue{Type: t, Value: b}
}

func dec(tb testing.TB, s string) bson.Decimal128 {
	tb.Helper()
	d, err := bson.ParseDecimal128(s)
	if err != nil {
		tb.Fatalf("parse decimal %q: %v", s, err)
	}
	return d
}

func oid(last byte) bson.ObjectID {
	var o bson.ObjectID
	o[11] = last
	return o
}

// sign normalises a comparison result.
func sign(c int) int { return cmp.Compare(c, 0) }

func TestBracketOrder(t *testing.T) {
	// One value per bracket, lowest first.
	ordered := []any{
		bson.MinKey{},
		bson.Undefined{},
		bson.Null{},
		int32(1),
		"a",
		bson.D{{Key: "a", Value: 1}},
		bson.A{1},
		bson.Binary{Data: []byte{1}},
		oid(1),
		false,
		bson.DateTime(0),
		bson.Timestamp{T: 1, I: 1},
		bson.Regex{Pattern: "a"},
		bson.DBPointer{DB: "db.c", Pointer: oid(1)},
		bson.JavaScript("f()"),
		bson.CodeWithScope{Code: "f()", Scope: bson.D{}},
		bson.MaxKey{},
	}
	if got, want := len(Brackets()), len(ordered); got != want {
		t.Fatalf("len(Brackets()) = %d, want %d", got, want)
	}
	for i, x := range ordered {
		v := val(t, x)
		if got := Bracket(v.Type); got != i {
			t.Errorf("Bracket(%v) = %d, want %d", v.Type, got, i)
		}
		if got := Bracket(Brackets()[i]); got != i {
			t.Errorf("Bracket(Brackets()[%d]) = %d", i, got)
		}
		for j, y := range ordered {
			w := val(t, y)
			if got, want := sign(Compare(v, w)), cmp.Compare(i, j); got != want {
				t.Errorf("Compare(%v, %v) = %d, want %d", v, w, got, want)
			}
		}
	}
	// The extremes of a bracket still sort by bracket.
	extremes := [][2]any{
		{math.Inf(1), ""},
		{"\xff\xff", bson.D{}},
		{bson.D{{Key: "\xff", Value: bson.MaxKey{}}}, bson.A{}},
		{bson.A{bson.MaxKey{}}, bson.Binary{}},
		{bson.Binary{Subtype: 0xff, Data: make([]byte, 64)}, bson.ObjectID{}},
		{bson.ObjectID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false},
		{true, bson.DateTime(math.MinInt64)},
		{bson.DateTime(math.MaxInt64), bson.Timestamp{}},
		{bson.Timestamp{T: math.MaxUint32, I: math.MaxUint32}, bson.Regex{}},
		{bson.Null{}, math.NaN()},
		{bson.Null{}, dec(t, "NaN")},
	}
	for _, e := range extremes {
		a, b := val(t, e[0]), val(t, e[1])
		if got := Compare(a, b); got != -1 {
			t.Errorf("Compare(%v, %v) = %d, want -1", a, b, got)
		}
	}
}

func TestBracket(t *testing.T) {
	same := [][]bson.Type{
		{bson.TypeInt32, bson.TypeInt64, bson.TypeDouble, bson.TypeDecimal128},
		{bson.TypeString, bson.TypeSymbol},
	}
	for _, group := range same {
		for _, ty := range group {
			if Bracket(ty) != Bracket(group[0]) {
				t.Errorf("Bracket(%v) = %d, want %d as %v", ty, Bracket(ty), Bracket(group[0]), group[0])
			}
		}
	}
	for _, ty := range []bson.Type{0x00, 0x14, 0x7e, 0x80, 0xfe} {
		if got := Bracket(ty); got != -1 {
			t.Errorf("Bracket(%#x) = %d, want -1", byte(ty), got)
		}
		if got := TypeAliases(ty); got != nil {
			t.Errorf("TypeAliases(%#x) = %v, want nil", byte(ty), got)
		}
	}
	// Brackets returns a copy.
	b := Brackets()
	b[0] = bson.TypeMaxKey
	if Brackets()[0] != bson.TypeMinKey {
		t.Error("Brackets() shares its backing array")
	}
}

func TestTypeAliases(t *testing.T) {
	tests := []struct {
		t    bson.Type
		want []string
	}{
		{bson.TypeMinKey, []string{"minKey"}},
		{bson.TypeUndefined, []string{"undefined"}},
		{bson.TypeNull, []string{"null"}},
		{bson.TypeInt32, []string{"int", "long", "double", "decimal"}},
		{bson.TypeDecimal128, []string{"int", "long", "double", "decimal"}},
		{bson.TypeSymbol, []string{"string", "symbol"}},
		{bson.TypeString, []string{"string", "symbol"}},
		{bson.TypeEmbeddedDocument, []string{"object"}},
		{bson.TypeArray, []string{"array"}},
		{bson.TypeBinary, []string{"binData"}},
		{bson.TypeObjectID, []string{"objectId"}},
		{bson.TypeBoolean, []string{"bool"}},
		{bson.TypeDateTime, []string{"date"}},
		{bson.TypeTimestamp, []string{"timestamp"}},
		{bson.TypeRegex, []string{"regex"}},
		{bson.TypeDBPointer, []string{"dbPointer"}},
		{bson.TypeJavaScript, []string{"javascript"}},
		{bson.TypeCodeWithScope, []string{"javascriptWithScope"}},
		{bson.TypeMaxKey, []string{"maxKey"}},
	}
	for _, tt := range tests {
		if got := TypeAliases(tt.t); !slices.Equal(got, tt.want) {
			t.Errorf("TypeAliases(%v) = %v, want %v", tt.t, got, tt.want)
		}
	}
	// Every bracket has aliases, and every type is in its bracket's list.
	for _, r := range Brackets() {
		if len(TypeAliases(r)) == 0 {
			t.Errorf("TypeAliases(%v) is empty", r)
		}
	}
	a := TypeAliases(bson.TypeInt32)
	a[0] = "x"
	if TypeAliases(bson.TypeInt32)[0] != "int" {
		t.Error("TypeAliases shares its backing array")
	}
}

func TestCompareWithinBracket(t *testing.T) {
	const big = int64(1) << 62
	tests := []struct {
		name string
		a, b any
		want int
	}{
		// Numbers.
		{"int32 = int64", int32(5), int64(5), 0},
		{"int32 = double", int32(5), 5.0, 0},
		{"int64 = double", int64(5), 5.0, 0},
		{"int32 = decimal", int32(5), dec(t, "5.000"), 0},
		{"double = decimal", 5.0, dec(t, "5"), 0},
		{"int32 < int64", int32(-1), int64(0), -1},
		{"negative int64 < int32", int64(math.MinInt64), int32(math.MinInt32), -1},
		{"int64 < double fraction", int64(5), 5.5, -1},
		{"double fraction < int32", -5.5, int32(-5), -1},
		{"-0.0 = 0.0", math.Copysign(0, -1), 0.0, 0},
		{"-0.0 = int32 0", math.Copysign(0, -1), int32(0), 0},
		{"-0 decimal = 0", dec(t, "-0"), int32(0), 0},
		{"0E-10 decimal = 0E+10", dec(t, "0E-10"), dec(t, "0E+10"), 0},
		{"NaN = NaN", math.NaN(), math.NaN(), 0},
		{"NaN < -Inf", math.NaN(), math.Inf(-1), -1},
		{"NaN < MinInt64", math.NaN(), int64(math.MinInt64), -1},
		{"NaN < int32", math.NaN(), int32(math.MinInt32), -1},
		{"decimal NaN = double NaN", dec(t, "NaN"), math.NaN(), 0},
		{"decimal NaN < -Inf", dec(t, "NaN"), dec(t, "-Inf"), -1},
		{"-Inf < MinInt64", math.Inf(-1), int64(math.MinInt64), -1},
		{"MaxInt64 < +Inf", int64(math.MaxInt64), math.Inf(1), -1},
		{"decimal Inf = double Inf", dec(t, "Inf"), math.Inf(1), 0},
		{"decimal -Inf = double -Inf", dec(t, "-Inf"), math.Inf(-1), 0},
		{"huge decimal < Inf", dec(t, "1E+6000"), math.Inf(1), -1},
		{"MaxFloat64 < huge decimal", math.MaxFloat64, dec(t, "1E+309"), -1},
		// float64(MaxInt64) rounds up to 2^63.
		{"MaxInt64 < 2^63 double", int64(math.MaxInt64), 0x1p63, -1},
		{"MaxInt64-1 < MaxInt64 as double rounded", int64(math.MaxInt64 - 1), float64(math.MaxInt64), -1},
		{"MinInt64 = -2^63 double", int64(math.MinInt64), -0x1p63, 0},
		{"-2^63 double < MinInt64+1", -0x1p63, int64(math.MinInt64 + 1), -1},
		{"2^53+1 > 2^53 double", int64(1<<53 + 1), 0x1p53, 1},
		{"2^62+1 > 2^62 double", big + 1, 0x1p62, 1},
		{"2^62 = 2^62 double", big, 0x1p62, 0},
		{"2^62-1 < 2^62 double", big - 1, 0x1p62, -1},
		{"-2^62-1 < -2^62 double", -big - 1, -0x1p62, -1},
		{"MaxInt64 = decimal", int64(math.MaxInt64), dec(t, "9223372036854775807"), 0},
		{"MaxInt64 < decimal+0.1", int64(math.MaxInt64), dec(t, "9223372036854775807.1"), -1},
		{"decimal 0.1 > double 0.1", dec(t, "0.1"), 0.1, -1}, // double 0.1 is 0.1000000000000000055...
		{"decimal 0.5 = double 0.5", dec(t, "0.5"), 0.5, 0},
		{"decimal 1.10 = 1.1", dec(t, "1.10"), dec(t, "1.1"), 0},
		{"decimal 1.09 < 1.1", dec(t, "1.09"), dec(t, "1.1"), -1},
		{"decimal -2 < -1.5", dec(t, "-2"), dec(t, "-1.5"), -1},
		{"decimal -20E-1 < -1.99", dec(t, "-20E-1"), dec(t, "-1.99"), -1},
		{"decimal same exp", dec(t, "123"), dec(t, "124"), -1},
		{"decimal same exp negative", dec(t, "-123"), dec(t, "-124"), 1},
		// Strings.
		{"string = symbol", "abc", bson.Symbol("abc"), 0},
		{"symbol < string", bson.Symbol("abc"), "abd", -1},
		{"prefix first", "ab", "abc", -1},
		{"bytes, not case", "B", "a", -1},
		{"bytes, not collation", "é", "f", 1},
		{"embedded NUL", "a\x00b", "a", 1},
		{"empty first", "", "\x00", -1},
		// Documents.
		{"doc equal", bson.D{{Key: "a", Value: int32(1)}}, bson.D{{Key: "a", Value: 1.0}}, 0},
		{"empty doc first", bson.D{}, bson.D{{Key: "a", Value: bson.MinKey{}}}, -1},
		{"prefix doc first", bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 1}}, -1},
		{"element bracket before name", bson.D{{Key: "z", Value: 1}}, bson.D{{Key: "a", Value: "x"}}, -1},
		{"name before value", bson.D{{Key: "a", Value: 9}}, bson.D{{Key: "b", Value: 1}}, -1},
		{"value decides", bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 2}}, bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 1}}, 1},
		{"field order matters", bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 1}}, bson.D{{Key: "b", Value: 1}, {Key: "a", Value: 1}}, -1},
		{"nested", bson.D{{Key: "a", Value: bson.D{{Key: "x", Value: bson.D{{Key: "y", Value: 1}}}}}}, bson.D{{Key: "a", Value: bson.D{{Key: "x", Value: bson.D{{Key: "y", Value: 2}}}}}}, -1},
		{"nested equal across numbers", bson.D{{Key: "a", Value: bson.D{{Key: "x", Value: int64(2)}}}}, bson.D{{Key: "a", Value: bson.D{{Key: "x", Value: 2.0}}}}, 0},
		{"nested bracket", bson.D{{Key: "a", Value: bson.D{{Key: "x", Value: bson.MaxKey{}}}}}, bson.D{{Key: "a", Value: bson.D{{Key: "x", Value: nil}}}}, 1},
		// Arrays.
		{"array lexicographic", bson.A{1, 2}, bson.A{1, 3}, -1},
		{"array prefix first", bson.A{1}, bson.A{1, 0}, -1},
		{"array first element decides", bson.A{2}, bson.A{1, 9}, 1},
		{"array element bracket", bson.A{"a"}, bson.A{9}, 1},
		{"array numbers equal", bson.A{int32(1), 2.0}, bson.A{1.0, int64(2)}, 0},
		{"empty array first", bson.A{}, bson.A{bson.MinKey{}}, -1},
		// Binary: length, then subtype, then bytes.
		{"binary shorter first", bson.Binary{Data: []byte{0xff}}, bson.Binary{Data: []byte{0, 0}}, -1},
		{"binary length before subtype", bson.Binary{Subtype: 0x80, Data: []byte{1}}, bson.Binary{Subtype: 0, Data: []byte{1, 1}}, -1},
		{"binary subtype before bytes", bson.Binary{Subtype: 0, Data: []byte{0xff}}, bson.Binary{Subtype: 4, Data: []byte{0}}, -1},
		{"binary bytes", bson.Binary{Data: []byte{1, 2}}, bson.Binary{Data: []byte{1, 3}}, -1},
		{"binary equal", bson.Binary{Subtype: 4, Data: []byte{1, 2}}, bson.Binary{Subtype: 4, Data: []byte{1, 2}}, 0},
		{"binary empty first", bson.Binary{Subtype: 0xff}, bson.Binary{Data: []byte{0}}, -1},
		// ObjectID.
		{"oid bytes", oid(1), oid(2), -1},
		{"oid first byte", bson.ObjectID{1}, oid(0xff), 1},
		// Boolean.
		{"false < true", false, true, -1},
		{"true = true", true, true, 0},
		// DateTime is signed.
		{"date before epoch first", bson.DateTime(-1), bson.DateTime(0), -1},
		{"date min", bson.DateTime(math.MinInt64), bson.DateTime(math.MaxInt64), -1},
		// Timestamp is unsigned (T, I).
		{"ts T first", bson.Timestamp{T: 1, I: math.MaxUint32}, bson.Timestamp{T: 2, I: 0}, -1},
		{"ts I", bson.Timestamp{T: 1, I: 1}, bson.Timestamp{T: 1, I: 2}, -1},
		{"ts unsigned T", bson.Timestamp{T: 1}, bson.Timestamp{T: 1 << 31}, -1},
		{"ts unsigned I", bson.Timestamp{T: 1, I: 1}, bson.Timestamp{T: 1, I: 1 << 31}, -1},
		// Regex: pattern, then options.
		{"regex pattern first", bson.Regex{Pattern: "a", Options: "z"}, bson.Regex{Pattern: "b", Options: "a"}, -1},
		{"regex options", bson.Regex{Pattern: "a", Options: "i"}, bson.Regex{Pattern: "a", Options: "m"}, -1},
		{"regex prefix pattern", bson.Regex{Pattern: "a", Options: "x"}, bson.Regex{Pattern: "ab"}, -1},
		{"regex equal", bson.Regex{Pattern: "a", Options: "i"}, bson.Regex{Pattern: "a", Options: "i"}, 0},
		// DBPointer: length, then bytes.
		{"dbpointer shorter first", bson.DBPointer{DB: "z", Pointer: oid(9)}, bson.DBPointer{DB: "aa", Pointer: oid(0)}, -1},
		{"dbpointer ns", bson.DBPointer{DB: "a", Pointer: oid(9)}, bson.DBPointer{DB: "b", Pointer: oid(0)}, -1},
		{"dbpointer oid", bson.DBPointer{DB: "a", Pointer: oid(1)}, bson.DBPointer{DB: "a", Pointer: oid(2)}, -1},
		// JavaScript.
		{"javascript", bson.JavaScript("a"), bson.JavaScript("b"), -1},
		{"javascript prefix", bson.JavaScript("a"), bson.JavaScript("a "), -1},
		{"code with scope code first", bson.CodeWithScope{Code: "a", Scope: bson.D{{Key: "x", Value: 9}}}, bson.CodeWithScope{Code: "b", Scope: bson.D{}}, -1},
		{"code with scope scope", bson.CodeWithScope{Code: "a", Scope: bson.D{{Key: "x", Value: 1}}}, bson.CodeWithScope{Code: "a", Scope: bson.D{{Key: "x", Value: 2}}}, -1},
		{"code with scope equal", bson.CodeWithScope{Code: "a", Scope: bson.D{{Key: "x", Value: int32(1)}}}, bson.CodeWithScope{Code: "a", Scope: bson.D{{Key: "x", Value: 1.0}}}, 0},
		// Valueless.
		{"minKey = minKey", bson.MinKey{}, bson.MinKey{}, 0},
		{"maxKey = maxKey", bson.MaxKey{}, bson.MaxKey{}, 0},
		{"null = null", bson.Null{}, bson.Null{}, 0},
		{"undefined = undefined", bson.Undefined{}, bson.Undefined{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := val(t, tt.a), val(t, tt.b)
			if got := Compare(a, b); got != tt.want {
				t.Errorf("Compare(%v, %v) = %d, want %d", a, b, got, tt.want)
			}
			if got := Compare(b, a); got != -tt.want {
				t.Errorf("Compare(%v, %v) = %d, want %d", b, a, got, -tt.want)
			}
		})
	}
}

func TestCompareOldBinary(t *testing.T) {
	// Subtype 2 carries an inner length; the order uses the outer length,
	// which counts the inner length as data, as the server does: one byte
	// of subtype 2 is five bytes long.
	a := val(t, bson.Binary{Subtype: 2, Data: []byte{9}})
	b := val(t, bson.Binary{Subtype: 3, Data: []byte{1, 2, 3, 4}})
	if got := Compare(a, b); got != 1 {
		t.Errorf("Compare(%x, %x) = %d, want 1 (outer length 5 > 4)", a.Value, b.Value, got)
	}
}

func TestCompareNonCanonicalDecimal(t *testing.T) {
	// A coefficient above 10^34-1 reads as zero.
	hi := uint64(0x3040)<<48 | 0x0001ffffffffffff // exponent 0, coefficient 2^113-1
	v := bson.RawValue{Type: bson.TypeDecimal128, Value: make([]byte, 16)}
	for i := range 8 {
		v.Value[i] = 0xff
		v.Value[8+i] = byte(hi >> (8 * i))
	}
	if got := Compare(v, val(t, int32(0))); got != 0 {
		t.Errorf("Compare(non-canonical decimal, 0) = %d, want 0", got)
	}
}

func TestCompareMalformed(t *testing.T) {
	good := val(t, bson.D{{Key: "a", Value: "x"}})
	bad := []bson.RawValue{
		{Type: bson.TypeEmbeddedDocument, Value: []byte{0xff, 0, 0, 0, 2, 'a', 0}},
		{Type: bson.TypeEmbeddedDocument, Value: []byte{12, 0, 0, 0, 2, 'a', 0, 0xff, 0xff, 0xff, 0x7f, 0}},
		{Type: bson.TypeEmbeddedDocument, Value: []byte{8, 0, 0, 0, 2, 'a', 0, 0}},
		{Type: bson.TypeEmbeddedDocument, Value: []byte{5, 0}},
		{Type: bson.TypeString, Value: []byte{0, 0, 0, 0}},
		{Type: bson.TypeString, Value: []byte{0x80, 0, 0, 0x80}},
		{Type: bson.TypeDouble, Value: []byte{1}},
		{Type: bson.TypeDecimal128, Value: []byte{1}},
		{Type: bson.TypeBinary, Value: []byte{0xff, 0xff, 0xff, 0xff, 0}},
		{Type: bson.TypeRegex, Value: []byte{'a'}},
		{Type: bson.TypeDBPointer, Value: []byte{2, 0, 0, 0, 'a', 0}},
		{Type: bson.TypeCodeWithScope, Value: []byte{14, 0, 0, 0, 0xff, 0, 0, 0, 0, 5, 0, 0, 0, 0}},
		{Type: 0x42, Value: []byte{1, 2}},
		{},
	}
	for _, b := range bad {
		for _, other := range append([]bson.RawValue{good}, bad...) {
			x, y := Compare(b, other), Compare(other, b)
			if x != -y {
				t.Errorf("Compare(%x, %x) = %d but reversed %d", b.Value, other.Value, x, y)
			}
		}
		if b.Type == good.Type {
			if got := Compare(b, good); got != -1 {
				t.Errorf("malformed %x vs good = %d, want -1", b.Value, got)
			}
		}
	}
}

func BenchmarkCompare(b *testing.B) {
	cases := []struct {
		name string
		x, y any
	}{
		{"objectid", oid(1), oid(2)},
		{"int64-double", int64(1<<60 + 1), 0x1p60},
		{"string", "customer-000123", "customer-000124"},
		{"document", bson.D{{Key: "tenant", Value: "acme"}, {Key: "n", Value: int64(7)}}, bson.D{{Key: "tenant", Value: "acme"}, {Key: "n", Value: 8.0}}},
		{"decimal-double", dec(b, "1.5"), 1.25},
	}
	for _, c := range cases {
		x, y := val(b, c.x), val(b, c.y)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Compare(x, y)
			}
		})
	}
}
