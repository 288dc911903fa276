package bsonorder

import (
	"cmp"
	"encoding/binary"
	"math"
	"math/big"
	"math/bits"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// number is one value of the numbers bracket, read without allocating.
type number struct {
	t bson.Type
	i int64   // int32, int64
	f float64 // double
	d decimal // decimal128
}

// readNumber reads a value of numeric type t; ok is false when b is short.
func readNumber(t bson.Type, b []byte) (number, bool) {
	n := number{t: t}
	switch t {
	case bson.TypeInt32:
		v, ok := int32At(b)
		n.i = int64(v)
		return n, ok
	case bson.TypeInt64:
		v, ok := int64At(b)
		n.i = v
		return n, ok
	case bson.TypeDouble:
		if len(b) < 8 {
			return n, false
		}
		n.f = math.Float64frombits(binary.LittleEndian.Uint64(b))
		return n, true
	case bson.TypeDecimal128:
		if len(b) < 16 {
			return n, false
		}
		n.d = decodeDecimal(binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b))
		return n, true
	}
	return n, false
}

func isInt(t bson.Type) bool { return t == bson.TypeInt32 || t == bson.TypeInt64 }

// compareNumbers compares two values of the numbers bracket by value.
func compareNumbers(ta bson.Type, a []byte, tb bson.Type, b []byte) int {
	na, okA := readNumber(ta, a)
	nb, okB := readNumber(tb, b)
	if !okA || !okB {
		return malformed(a, b, okA, okB)
	}
	switch {
	case isInt(ta) && isInt(tb):
		return cmp.Compare(na.i, nb.i)
	case ta == bson.TypeDouble && tb == bson.TypeDouble:
		return compareDoubles(na.f, nb.f)
	case isInt(ta) && tb == bson.TypeDouble:
		return compareIntToDouble(na.i, nb.f)
	case ta == bson.TypeDouble && isInt(tb):
		return -compareIntToDouble(nb.i, na.f)
	}
	return compareDecimals(na.exact(), nb.exact())
}

// compareDoubles orders doubles with NaN below everything and -0 == 0.
// cmp.Compare does the same.
func compareDoubles(a, b float64) int {
	return cmp.Compare(a, b)
}

// compareIntToDouble compares an integer to a double without converting
// the integer to a double when that would round it (|i| > 2^53), after the
// server's compareLongToDouble.
func compareIntToDouble(i int64, f float64) int {
	if math.IsNaN(f) {
		return 1
	}
	const precise = 1 << 53
	if -precise <= i && i <= precise {
		return compareDoubles(float64(i), f)
	}
	// From here |i| > 2^53, so a double with a fraction (|f| < 2^52)
	// compares with i as its truncation does.
	switch {
	case f >= 0x1p63: // beyond every int64, +Inf included
		return -1
	case f < -0x1p63: // -2^63 itself is an int64
		return 1
	}
	return cmp.Compare(i, int64(f))
}

// Decimal classes in numeric order.
const (
	classNaN = iota
	classNegInf
	classFinite
	classPosInf
)

// decimal is a decoded decimal128: (-1)^neg * (hi<<64 | lo) * 10^exp when
// class is classFinite.
type decimal struct {
	class  int8
	neg    bool
	hi, lo uint64
	exp    int32
}

// maxCoefHi and maxCoefLo are 10^34-1, the largest canonical coefficient.
const (
	maxCoefHi = 0x0001ed09bead87c0
	maxCoefLo = 0x378d8e63ffffffff
)

// decodeDecimal decodes the IEEE 754-2008 BID encoding the BSON spec uses.
// Coefficients above 10^34-1 are non-canonical and read as zero, as the
// server's decimal library does.
func decodeDecimal(hi, lo uint64) decimal {
	d := decimal{class: classFinite, neg: hi>>63 == 1}
	switch hi >> 58 & 0x1f {
	case 0x1f:
		return decimal{class: classNaN}
	case 0x1e:
		if d.neg {
			return decimal{class: classNegInf}
		}
		return decimal{class: classPosInf}
	}
	if hi>>61&3 == 3 {
		// The coefficient has an implicit 0b100 prefix: at least 2^113,
		// always non-canonical.
		d.exp = int32(hi>>47&0x3fff) - 6176
		return d
	}
	d.exp = int32(hi>>49&0x3fff) - 6176
	d.hi, d.lo = hi&(1<<49-1), lo
	if d.hi > maxCoefHi || d.hi == maxCoefHi && d.lo > maxCoefLo {
		d.hi, d.lo = 0, 0
	}
	return d
}

// exact returns n ready for an exact comparison with a decimal: its class
// (NaN, infinite, finite) and, when finite, sign, coefficient magnitude and
// decimal exponent. Integers and most doubles met in practice (integral
// ones below 2^128, and those with a short binary fraction such as 0.5 or
// 1.25) fit; other doubles are compared through big.Rat.
func (n number) exact() numeric {
	switch n.t {
	case bson.TypeDecimal128:
		d := n.d
		return numeric{class: d.class, neg: d.neg, hi: d.hi, lo: d.lo, exp: d.exp}
	case bson.TypeDouble:
		switch {
		case math.IsNaN(n.f):
			return numeric{class: classNaN}
		case math.IsInf(n.f, 1):
			return numeric{class: classPosInf}
		case math.IsInf(n.f, -1):
			return numeric{class: classNegInf}
		}
		x := numeric{class: classFinite, neg: n.f < 0}
		var ok bool
		x.hi, x.lo, x.exp, ok = floatParts(math.Abs(n.f))
		if !ok {
			x.useFloat, x.f = true, n.f
		}
		return x
	}
	x := numeric{class: classFinite, neg: n.i < 0, lo: uint64(n.i)}
	if x.neg {
		x.lo = -x.lo // two's complement: also right for MinInt64
	}
	return x
}

// pow5 holds 5^k for k <= 27, the powers below 2^64.
var pow5 = func() (p [28]uint64) {
	p[0] = 1
	for k := 1; k < len(p); k++ {
		p[k] = p[k-1] * 5
	}
	return p
}()

// floatParts writes a finite, non-negative double as coef * 10^exp with a
// 128-bit coef, when that fits.
func floatParts(f float64) (hi, lo uint64, exp int32, ok bool) {
	if f < 0x1p64 && f == math.Trunc(f) {
		return 0, uint64(f), 0, true
	}
	frac, e := math.Frexp(f) // f = frac * 2^e, frac in [0.5, 1)
	m := uint64(frac * (1 << 53))
	e -= 53 // f = m * 2^e exactly
	if e >= 0 {
		// Integral and at least 2^64: m << e, if it fits in 128 bits.
		if e > 128-53 {
			return 0, 0, 0, false
		}
		if e >= 64 {
			return m << (e - 64), 0, 0, true
		}
		return m >> (64 - e), m << e, 0, true
	}
	// m / 2^k = m * 5^k / 10^k, after dropping common factors of two.
	k := -e
	shift := min(bits.TrailingZeros64(m), k)
	m >>= shift
	k -= shift
	if k >= len(pow5) {
		return 0, 0, 0, false
	}
	hi, lo = bits.Mul64(m, pow5[k])
	return hi, lo, int32(-k), true
}

// numeric is a number on its way to an exact comparison with a decimal:
// (-1)^neg * (hi<<64 | lo) * 10^exp, or the double f when useFloat.
type numeric struct {
	class    int8
	neg      bool
	hi, lo   uint64
	exp      int32
	useFloat bool
	f        float64
}

// sign returns -1, 0 or +1 for a finite n.
func (n numeric) sign() int {
	switch {
	case n.useFloat:
		return cmp.Compare(n.f, 0)
	case n.hi == 0 && n.lo == 0:
		return 0
	case n.neg:
		return -1
	}
	return 1
}

// rat returns the exact value of a finite n.
func (n numeric) rat() *big.Rat {
	if n.useFloat {
		return new(big.Rat).SetFloat64(n.f)
	}
	coef := new(big.Int).SetUint64(n.hi)
	coef.Lsh(coef, 64).Or(coef, new(big.Int).SetUint64(n.lo))
	if n.neg {
		coef.Neg(coef)
	}
	e := int64(n.exp)
	pow := new(big.Int).Exp(big.NewInt(10), big.NewInt(max(e, -e)), nil)
	if e >= 0 {
		return new(big.Rat).SetInt(coef.Mul(coef, pow))
	}
	return new(big.Rat).SetFrac(coef, pow)
}

// compareDecimals compares two numbers of which at least one is a decimal,
// exactly: NaN < -Inf < finite < +Inf, NaN == NaN.
func compareDecimals(a, b numeric) int {
	if a.class != b.class || a.class != classFinite {
		return cmp.Compare(a.class, b.class)
	}
	sa, sb := a.sign(), b.sign()
	if sa != sb || sa == 0 {
		return cmp.Compare(sa, sb)
	}
	if a.useFloat || b.useFloat {
		return a.rat().Cmp(b.rat())
	}
	return sa * compareMagnitudes(a.hi, a.lo, a.exp, b.hi, b.lo, b.exp)
}

// compareMagnitudes compares two non-zero coef * 10^exp by scaling the one
// with the larger exponent down to the other's; a coefficient that
// overflows 128 bits on the way is larger than any 128-bit one.
func compareMagnitudes(ahi, alo uint64, aexp int32, bhi, blo uint64, bexp int32) int {
	if aexp < bexp {
		return -compareMagnitudes(bhi, blo, bexp, ahi, alo, aexp)
	}
	for ; aexp > bexp; aexp-- {
		var carry, over uint64
		over, ahi = bits.Mul64(ahi, 10)
		carry, alo = bits.Mul64(alo, 10)
		var c uint64
		ahi, c = bits.Add64(ahi, carry, 0)
		if over != 0 || c != 0 {
			return 1
		}
	}
	if c := cmp.Compare(ahi, bhi); c != 0 {
		return c
	}
	return cmp.Compare(alo, blo)
}
