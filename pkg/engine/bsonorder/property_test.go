package bsonorder

import (
	"cmp"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// edgeNumbers are numbers near the places where a lossy comparison breaks.
func edgeNumbers(tb testing.TB) []any {
	out := []any{
		int32(0), int32(1), int32(-1), int32(math.MaxInt32), int32(math.MinInt32),
		int64(0), int64(1 << 53), int64(1<<53 + 1), int64(-1<<53 - 1),
		int64(1<<62 - 1), int64(1 << 62), int64(1<<62 + 1),
		int64(math.MaxInt64), int64(math.MaxInt64 - 1), int64(math.MinInt64), int64(math.MinInt64 + 1),
		0.0, math.Copysign(0, -1), 0.1, -0.1, 0.5, 1.0, 1.5, 0x1p53, 0x1p53 + 2, 0x1p62, 0x1p63, -0x1p63,
		float64(math.MaxInt64), math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64,
		math.Inf(1), math.Inf(-1), math.NaN(), math.Float64frombits(0xfff8000000000001),
		// Doubles around the limits of the 128-bit decimal fast path.
		0x1p64, 0x1p64 + 0x1p12, 0x1p75 * 3, 0x1p127, 0x1p128, 1e30, 1e300, -1e300,
		0x1p-15, 0x1p-27 * 3, 0x1p-28, -0x1p-28, 0.25, -0.75, 1e-300,
	}
	for _, s := range []string{
		"0", "-0", "0E+100", "0E-100", "0.1", "0.5", "1", "1.0", "1.5", "-1.5",
		"9223372036854775807", "9223372036854775807.5", "9223372036854775808",
		"-9223372036854775808", "-9223372036854775808.5", "9007199254740993",
		"1E+6000", "-1E+6000", "1E-6000", "-1E-6000", "1E+309", "-1E+309",
		"9.999999999999999999999999999999999E+6144", "NaN", "-NaN", "Inf", "-Inf",
		"0.1000000000000000055511151231257827", "0.1000000000000000055511151231257828",
		"18446744073709551616", "1.8446744073709551616E+19", "18446744073709551617",
		"1.267650600228229401496703205376E+30", "1E+30", "1E+300", "-1E+300",
		"0.000030517578125", "0.000030517578124", "3.7252902984619140625E-9", "-3.7252902984619140625E-9",
		"2.2351741790771484375E-8", "0.25", "-0.75", "1E-300", "1E-6176", "9999999999999999999999999999999999",
	} {
		out = append(out, dec(tb, s))
	}
	return out
}

// randomNumber returns a number of a random numeric type.
func randomNumber(tb testing.TB, r *rand.Rand) any {
	switch r.IntN(6) {
	case 0:
		return int32(r.Uint32())
	case 1:
		return int64(r.Uint64())
	case 2:
		// Near 2^53 and 2^63, where doubles lose integers.
		base := []int64{1 << 53, 1 << 62, math.MaxInt64, math.MinInt64}[r.IntN(4)]
		return base - r.Int64N(8)*int64(r.IntN(3)-1)
	case 3:
		return math.Float64frombits(r.Uint64())
	case 4:
		// Short binary fractions and large integers, exact in decimal.
		return float64(r.Int64N(1<<20)-1<<19) * math.Ldexp(1, r.IntN(140)-40)
	}
	s := strconv.FormatInt(r.Int64N(2000)-1000, 10) + "E" + strconv.Itoa(r.IntN(9)-4)
	switch r.IntN(4) {
	case 0:
		s = strconv.FormatInt(int64(r.Uint64()), 10) + "E" + strconv.Itoa(r.IntN(80)-40)
	case 1:
		// The exact decimal form of a short binary fraction, or a neighbour.
		f := math.Ldexp(float64(r.Int64N(1<<20)-1<<19), r.IntN(30)-20)
		s = new(big.Rat).SetFloat64(f).FloatString(24) // at most 34 digits
		if r.IntN(2) == 0 {
			s += "1"
		}
	}
	return dec(tb, s)
}

// randomValue returns a value of a random bracket; depth bounds nesting.
func randomValue(tb testing.TB, r *rand.Rand, depth int) any {
	str := func() string {
		const alphabet = "\x00ab\xff"
		b := make([]byte, r.IntN(4))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	kind := r.IntN(20)
	if depth <= 0 && (kind == 5 || kind == 6 || kind == 16) {
		kind = 0
	}
	switch kind {
	case 0, 1, 2:
		return randomNumber(tb, r)
	case 3:
		return str()
	case 4:
		return bson.Symbol(str())
	case 5, 6:
		n := r.IntN(3)
		if kind == 6 {
			a := bson.A{}
			for range n {
				a = append(a, randomValue(tb, r, depth-1))
			}
			return a
		}
		d := bson.D{}
		for range n {
			d = append(d, bson.E{Key: []string{"a", "b", "ab"}[r.IntN(3)], Value: randomValue(tb, r, depth-1)})
		}
		return d
	case 7:
		b := make([]byte, r.IntN(3))
		for i := range b {
			b[i] = byte(r.IntN(3)) * 0x7f
		}
		return bson.Binary{Subtype: []byte{0, 2, 4, 0x80}[r.IntN(4)], Data: b}
	case 8:
		return oid(byte(r.IntN(4)))
	case 9:
		return r.IntN(2) == 0
	case 10:
		return bson.DateTime(r.Int64N(5) - 2)
	case 11:
		return bson.Timestamp{T: r.Uint32() >> r.IntN(32), I: r.Uint32() >> r.IntN(32)}
	case 12:
		// Regular expressions are C strings: no NUL.
		return bson.Regex{Pattern: strings.ReplaceAll(str(), "\x00", "c"), Options: []string{"", "i", "im"}[r.IntN(3)]}
	case 13:
		return bson.DBPointer{DB: str(), Pointer: oid(byte(r.IntN(3)))}
	case 14:
		return bson.JavaScript(str())
	case 15:
		return []any{bson.MinKey{}, bson.MaxKey{}, bson.Null{}, bson.Undefined{}}[r.IntN(4)]
	case 16:
		return bson.CodeWithScope{Code: bson.JavaScript(str()), Scope: bson.D{{Key: "x", Value: randomValue(tb, r, depth-1)}}}
	}
	return randomNumber(tb, r)
}

// TestCompareTotalOrder checks that Compare is reflexive, antisymmetric and
// transitive on edge cases plus generated values of every bracket.
func TestCompareTotalOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var xs []any
	xs = append(xs, edgeNumbers(t)...)
	for range 400 {
		xs = append(xs, randomValue(t, r, 2))
	}
	vs := make([]bson.RawValue, len(xs))
	for i, x := range xs {
		vs[i] = val(t, x)
	}
	n := len(vs)
	m := make([][]int8, n)
	for i := range vs {
		m[i] = make([]int8, n)
		for j := range vs {
			c := Compare(vs[i], vs[j])
			if c < -1 || c > 1 {
				t.Fatalf("Compare(%v, %v) = %d, want -1, 0 or 1", vs[i], vs[j], c)
			}
			m[i][j] = int8(c)
		}
	}
	for i := range n {
		if m[i][i] != 0 {
			t.Errorf("Compare(%v, itself) = %d", vs[i], m[i][i])
		}
		for j := range n {
			if m[i][j] != -m[j][i] {
				t.Errorf("not antisymmetric: Compare(%v, %v) = %d, reversed %d", vs[i], vs[j], m[i][j], m[j][i])
			}
		}
	}
	if t.Failed() {
		return
	}
	for i := range n {
		for j := range n {
			if m[i][j] > 0 {
				continue
			}
			for k := range n {
				if m[j][k] > 0 {
					continue
				}
				// i <= j <= k: i <= k, and i < k if either step is strict.
				want := min(m[i][j], m[j][k])
				if m[i][k] > want || want < 0 && m[i][k] == 0 {
					t.Fatalf("not transitive: %v <= %v <= %v but Compare(first, last) = %d", vs[i], vs[j], vs[k], m[i][k])
				}
			}
		}
	}
}

// maxCoefficient is 10^34-1, the largest canonical decimal128 coefficient.
var maxCoefficient = new(big.Int).Sub(new(big.Int).Exp(big.NewInt(10), big.NewInt(34), nil), big.NewInt(1))

// refNumber is an independent, slow reading of a number as (class, value).
func refNumber(tb testing.TB, v bson.RawValue) (int, *big.Rat) {
	var f float64
	switch v.Type {
	case bson.TypeInt32:
		return classFinite, new(big.Rat).SetInt64(int64(v.Int32()))
	case bson.TypeInt64:
		return classFinite, new(big.Rat).SetInt64(v.Int64())
	case bson.TypeDouble:
		f = v.Double()
	case bson.TypeDecimal128:
		d := v.Decimal128()
		switch {
		case d.IsNaN():
			return classNaN, nil
		case d.IsInf() > 0:
			return classPosInf, nil
		case d.IsInf() < 0:
			return classNegInf, nil
		}
		// The driver's own decoding, plus IEEE 754's rule (which the
		// server's decimal library follows and the driver's String does
		// not) that a coefficient above 10^34-1 is non-canonical and
		// reads as zero.
		coef, exp, err := d.BigInt()
		if err != nil {
			tb.Fatalf("decimal %s: %v", d, err)
		}
		if new(big.Int).Abs(coef).Cmp(maxCoefficient) > 0 {
			return classFinite, new(big.Rat)
		}
		pow := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(exp, -exp))), nil)
		if exp < 0 {
			return classFinite, new(big.Rat).SetFrac(coef, pow)
		}
		return classFinite, new(big.Rat).SetInt(coef.Mul(coef, pow))
	default:
		tb.Fatalf("not a number: %v", v.Type)
	}
	switch {
	case math.IsNaN(f):
		return classNaN, nil
	case math.IsInf(f, 1):
		return classPosInf, nil
	case math.IsInf(f, -1):
		return classNegInf, nil
	}
	return classFinite, new(big.Rat).SetFloat64(f)
}

func refCompareNumbers(tb testing.TB, a, b bson.RawValue) int {
	ca, ra := refNumber(tb, a)
	cb, rb := refNumber(tb, b)
	if ca != cb || ca != classFinite {
		return cmp.Compare(ca, cb)
	}
	return ra.Cmp(rb)
}

// TestCompareNumbersExact checks the number comparison against exact
// rational arithmetic on every pair of edge and random numbers.
func TestCompareNumbersExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	xs := edgeNumbers(t)
	for range 300 {
		xs = append(xs, randomNumber(t, r))
	}
	vs := make([]bson.RawValue, len(xs))
	for i, x := range xs {
		vs[i] = val(t, x)
	}
	for _, a := range vs {
		for _, b := range vs {
			if got, want := Compare(a, b), refCompareNumbers(t, a, b); got != want {
				t.Errorf("Compare(%v %v, %v %v) = %d, want %d", a.Type, a, b.Type, b, got, want)
			}
		}
	}
}

func FuzzCompare(f *testing.F) {
	pairs := [][2]any{
		{int32(1), 1.0},
		{int64(math.MaxInt64), 0x1p63},
		{int64(1<<53 + 1), 0x1p53},
		{math.NaN(), math.Inf(-1)},
		{dec(f, "0.1"), 0.1},
		{dec(f, "-1E+6000"), int64(math.MinInt64)},
		{"ab", bson.Symbol("abc")},
		{bson.D{{Key: "a", Value: bson.D{{Key: "b", Value: 1}}}}, bson.D{{Key: "a", Value: bson.A{1, "x"}}}},
		{bson.A{1, 2}, bson.A{1}},
		{bson.Binary{Subtype: 2, Data: []byte{1}}, bson.Binary{Data: []byte{1, 2, 3, 4}}},
		{oid(1), true},
		{bson.Timestamp{T: 1, I: 2}, bson.DateTime(-1)},
		{bson.Regex{Pattern: "a", Options: "i"}, bson.Regex{Pattern: "a"}},
		{bson.DBPointer{DB: "a.b", Pointer: oid(2)}, bson.JavaScript("x")},
		{bson.CodeWithScope{Code: "c", Scope: bson.D{{Key: "v", Value: 1}}}, bson.MaxKey{}},
		{bson.MinKey{}, bson.Undefined{}},
		{bson.Null{}, bson.Null{}},
	}
	for _, p := range pairs {
		doc, err := bson.Marshal(bson.D{{Key: "a", Value: p[0]}, {Key: "b", Value: p[1]}, {Key: "c", Value: p[0]}})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(doc)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Arbitrary bytes as values of any type must not panic.
		if len(data) > 0 {
			x := bson.RawValue{Type: bson.Type(data[0]), Value: data[1:]}
			y := bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: data}
			Compare(x, y)
			Compare(y, x)
			Compare(x, x)
		}
		raw := bson.Raw(data)
		if raw.Validate() != nil {
			return
		}
		elems, err := raw.Elements()
		if err != nil || len(elems) < 2 {
			return
		}
		vs := make([]bson.RawValue, 0, 3)
		for _, e := range elems[:min(3, len(elems))] {
			vs = append(vs, e.Value())
		}
		for _, a := range vs {
			if c := Compare(a, a); c != 0 {
				t.Fatalf("Compare(%v, itself) = %d", a, c)
			}
			for _, b := range vs {
				ab, ba := Compare(a, b), Compare(b, a)
				if ab < -1 || ab > 1 || ab != -ba {
					t.Fatalf("Compare(%v, %v) = %d, reversed %d", a, b, ab, ba)
				}
				if a.IsNumber() && b.IsNumber() {
					if want := refCompareNumbers(t, a, b); ab != want {
						t.Fatalf("Compare(%v %v, %v %v) = %d, want %d", a.Type, a, b.Type, b, ab, want)
					}
				}
			}
		}
		if len(vs) == 3 {
			for _, p := range [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
				a, b, c := vs[p[0]], vs[p[1]], vs[p[2]]
				if Compare(a, b) <= 0 && Compare(b, c) <= 0 && Compare(a, c) > 0 {
					t.Fatalf("not transitive: %v <= %v <= %v", a, b, c)
				}
			}
		}
	})
}
