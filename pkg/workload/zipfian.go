package workload

import (
	"math"
	"math/rand/v2"
)

// ZipfianConstant is YCSB's default skew (theta).
const ZipfianConstant = 0.99

// YCSB's ScrambledZipfianGenerator draws from a zipfian over ten billion
// items, whose zeta it precomputes, and hashes the result into the key
// space.
const (
	scrambledItems = 10_000_000_000
	scrambledZetaN = 26.46902820178302
)

// ZipfianGenerator draws integers in [0, n) with YCSB's ZipfianGenerator
// algorithm (Gray et al., "Quickly Generating Billion-Record Synthetic
// Databases"): item 0 is the most popular, then item 1, and so on, with
// P(k) proportional to 1/(k+1)^theta. It is not scrambled. It holds no
// mutable state, so goroutines may share one, each with its own rand.Rand;
// Next does not allocate.
type ZipfianGenerator struct {
	items       int64
	theta       float64
	alpha       float64
	zetaN       float64
	eta         float64
	secondBound float64 // 1 + 0.5^theta: below it, u*zetaN picks item 1
}

// NewZipfian returns a generator over [0, items) with skew theta (use
// ZipfianConstant for YCSB's). It computes zeta(items, theta) in O(items)
// time: about 10 ms per million items.
func NewZipfian(items int64, theta float64) *ZipfianGenerator {
	return newZipfian(items, theta, zeta(items, theta))
}

func newZipfian(items int64, theta, zetaN float64) *ZipfianGenerator {
	if items < 1 {
		items = 1
	}
	z := &ZipfianGenerator{items: items, theta: theta, zetaN: zetaN}
	z.alpha = 1 / (1 - theta)
	zeta2 := zeta(2, theta)
	z.eta = (1 - math.Pow(2/float64(items), 1-theta)) / (1 - zeta2/zetaN)
	z.secondBound = 1 + math.Pow(0.5, theta)
	return z
}

// zeta returns sum_{i=1..n} 1/i^theta.
func zeta(n int64, theta float64) float64 {
	var sum float64
	for i := int64(1); i <= n; i++ {
		sum += 1 / math.Pow(float64(i), theta)
	}
	return sum
}

// Items returns the size of the generator's range.
func (z *ZipfianGenerator) Items() int64 { return z.items }

// Next draws one value in [0, Items()).
func (z *ZipfianGenerator) Next(rng *rand.Rand) int64 {
	u := rng.Float64()
	uz := u * z.zetaN
	if uz < 1 {
		return 0
	}
	if uz < z.secondBound {
		return 1
	}
	v := int64(float64(z.items) * math.Pow(z.eta*u-z.eta+1, z.alpha))
	if v >= z.items { // rounding at u close to 1
		v = z.items - 1
	}
	return v
}

// ScrambledZipfian is YCSB's ScrambledZipfianGenerator with constant 0.99:
// a zipfian draw over ten billion items, hashed with 64-bit FNV into
// [0, n). The popularity skew is kept but the popular keys are spread over
// the key space, so a range-partitioned copy does not find them all in its
// first range. n is an argument of Next, so the key space may grow while a
// run inserts.
type ScrambledZipfian struct {
	z *ZipfianGenerator
}

// NewScrambledZipfian returns YCSB's scrambled zipfian generator.
func NewScrambledZipfian() *ScrambledZipfian {
	return &ScrambledZipfian{z: newZipfian(scrambledItems, ZipfianConstant, scrambledZetaN)}
}

// Next draws one value in [0, n); n must be positive.
func (s *ScrambledZipfian) Next(rng *rand.Rand, n int64) int64 {
	return int64(fnv64(uint64(s.z.Next(rng))) % uint64(n))
}

// fnv64 is YCSB's Utils.fnvhash64: FNV-1a over the eight bytes of v, low
// byte first, then the absolute value of the signed result, so a value
// hashes to the same key as in YCSB.
func fnv64(v uint64) uint64 {
	h := uint64(0xCBF29CE484222325)
	for range 8 {
		h ^= v & 0xff
		h *= 1099511628211
		v >>= 8
	}
	if int64(h) < 0 {
		h = -h // Math.abs; MinInt64 stays 1<<63, which is still a valid unsigned value
	}
	return h
}
