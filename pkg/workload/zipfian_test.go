package workload

import (
	"math"
	"slices"
	"testing"
)

// TestZipfianSkew compares the unscrambled generator's frequencies with
// P(k) = 1/((k+1)^0.99 zeta(n)). YCSB's algorithm is exact for the two
// most popular items and approximate (within ~15%) for the next few, so
// those are checked on the whole head instead.
func TestZipfianSkew(t *testing.T) {
	const n, draws = 1000, 1_000_000
	z := NewZipfian(n, ZipfianConstant)
	rng := newTestRand(7)
	counts := make([]int, n)
	for range draws {
		v := z.Next(rng)
		if v < 0 || v >= n {
			t.Fatalf("Next() = %d, outside [0, %d)", v, n)
		}
		counts[v]++
	}
	zn := zeta(n, ZipfianConstant)
	p := func(k int) float64 { return 1 / math.Pow(float64(k+1), ZipfianConstant) / zn }
	share := func(k int) float64 { return float64(counts[k]) / draws }
	for _, k := range []int{0, 1, 9} {
		if rel := math.Abs(share(k)-p(k)) / p(k); rel > 0.05 {
			t.Errorf("item %d: frequency %.4f, want %.4f (%.0f%% off)", k, share(k), p(k), 100*rel)
		}
	}
	var head, headWant float64
	for k := range n / 10 {
		head += share(k)
		headWant += p(k)
	}
	if math.Abs(head-headWant) > 0.03 {
		t.Errorf("the 10%% most popular items got %.3f of the draws, want %.3f", head, headWant)
	}
	if counts[0] <= counts[1] || counts[1] <= counts[9] || counts[9] <= counts[99] || counts[99] <= counts[999] {
		t.Errorf("popularity does not fall with rank: %d %d %d %d %d", counts[0], counts[1], counts[9], counts[99], counts[999])
	}
}

// TestScrambledZipfianSkew checks that the scrambled generator keeps a
// skew (the hottest key gets about 1/zeta(10^10) = 3.8% of the draws, the
// hottest 10% of keys far more than 10%) while using the whole range.
func TestScrambledZipfianSkew(t *testing.T) {
	const n, draws = 1000, 1_000_000
	s := NewScrambledZipfian()
	rng := newTestRand(7)
	counts := make([]int, n)
	for range draws {
		v := s.Next(rng, n)
		if v < 0 || v >= n {
			t.Fatalf("Next() = %d, outside [0, %d)", v, n)
		}
		counts[v]++
	}
	if counts[0] > counts[1]*3 {
		t.Errorf("key 0 is hottest by far (%d vs %d): not scrambled", counts[0], counts[1])
	}
	slices.SortFunc(counts, func(a, b int) int { return b - a })
	if hot := float64(counts[0]) / draws; hot < 0.03 || hot > 0.06 {
		t.Errorf("hottest key got %.4f of the draws, want about 0.038", hot)
	}
	var head int
	for _, c := range counts[:n/10] {
		head += c
	}
	if share := float64(head) / draws; share < 0.2 {
		t.Errorf("hottest 10%% of keys got %.3f of the draws, want > 0.2 (uniform gives 0.1)", share)
	}
	if counts[n-1] == 0 {
		t.Error("some key was never drawn")
	}
	for range 100 {
		if v := s.Next(rng, 1); v != 0 {
			t.Fatalf("Next(rng, 1) = %d", v)
		}
	}
}

func TestFNV64(t *testing.T) {
	// Values of YCSB's Utils.fnvhash64 arithmetic (signed 64-bit, then
	// Math.abs), worked out independently of this implementation.
	for _, tc := range []struct{ in, want uint64 }{
		{0, 6284781860667377211},
		{1, 8517097267634966620},
	} {
		if got := fnv64(tc.in); got != tc.want {
			t.Errorf("fnv64(%d) = %d, want %d", tc.in, got, tc.want)
		}
	}
	for i := range uint64(10000) {
		if fnv64(i) >= 1<<63 && fnv64(i) != 1<<63 {
			t.Fatalf("fnv64(%d) = %d is negative as a Java long", i, fnv64(i))
		}
	}
}

func TestZipfianAllocations(t *testing.T) {
	z := NewZipfian(100, ZipfianConstant)
	s := NewScrambledZipfian()
	rng := newTestRand(1)
	if a := testing.AllocsPerRun(1000, func() { z.Next(rng); s.Next(rng, 1000) }); a != 0 {
		t.Errorf("Next allocates %.1f times", a)
	}
}

func BenchmarkScrambledZipfian(b *testing.B) {
	s := NewScrambledZipfian()
	rng := newTestRand(1)
	b.ReportAllocs()
	for range b.N {
		s.Next(rng, 1_000_000)
	}
}
