package vecmath

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The whole-range ULP sweep of Gelu and GeluGrad (vector and scalar path,
// every 1024th f32) is rt's TestF32MathULPs, beside the other f32 kernels.
// Here: slices of every length from 0 to 40 (vector body plus scalar tail
// at every split), mixed-sign inputs in one vector, the special values,
// and that nothing past len(src) is written.

func refGelu(x float64) float64 { return 0.5 * x * math.Erfc(-x/math.Sqrt2) }

func refGeluGrad(x float64) float64 {
	return 0.5*math.Erfc(-x/math.Sqrt2) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
}

// ulpDist is |a − b| in f32 units in the last place along the ordered bit
// patterns (±0 coincide); NaN is 0 from NaN and infinitely far from a number.
func ulpDist(a, b float32) float64 {
	if a != a || b != b {
		if a != a && b != b {
			return 0
		}
		return math.Inf(1)
	}
	ord := func(f float32) int64 {
		u := int64(math.Float32bits(f))
		if u&(1<<31) != 0 {
			return -(u & 0x7fffffff)
		}
		return u
	}
	return math.Abs(float64(ord(a) - ord(b)))
}

func checkSlice(t *testing.T, name string, f func(dst, src []float32), ref func(float64) float64, maxULP, abs float64, src []float32) {
	t.Helper()
	dst := make([]float32, len(src)+3)
	for i := range dst {
		dst[i] = 12345
	}
	f(dst, src)
	for i, x := range src {
		want := float32(ref(float64(x)))
		got := dst[i]
		if abs > 0 && math.Abs(float64(got)-float64(want)) <= abs {
			continue
		}
		if d := ulpDist(got, want); d > maxULP {
			t.Errorf("%s(%g) at %d of %d = %g, want %g (%g ULP)", name, x, i, len(src), got, want, d)
		}
	}
	for i := len(src); i < len(dst); i++ {
		if dst[i] != 12345 {
			t.Fatalf("%s wrote dst[%d] past len(src) = %d", name, i, len(src))
		}
	}
}

func TestGeluSlices(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), 16, -16, 16.5, -16.5, 1e30, -1e30, 1e-40, -1e-40, -0.75, -13.5, -14.2, 5.9, -5.9}
	for n := 0; n <= 40; n++ {
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(rng.NormFloat64() * 4)
			if rng.IntN(4) == 0 {
				src[i] = special[rng.IntN(len(special))]
			}
		}
		checkSlice(t, "Gelu", Gelu, refGelu, 5, 0, src)
		checkSlice(t, "GeluGrad", GeluGrad, refGeluGrad, 7, 0x1p-23, src)
	}
	checkSlice(t, "Gelu", Gelu, refGelu, 5, 0, special)
	checkSlice(t, "GeluGrad", GeluGrad, refGeluGrad, 7, 0x1p-23, special)
}

// The single-element twin is the slice path's tail: the two agree within
// the bounds on a vector's worth of inputs (the vector runs FMA in
// hardware, the twin emulates it, so they may differ in the last bit).
func TestGelu1MatchesSlice(t *testing.T) {
	src := []float32{-3, -0.5, 0.25, 2, -9, 7, -1e-3, 0.75, 1}
	got := make([]float32, len(src))
	Gelu(got, src)
	for i, x := range src {
		if d := ulpDist(got[i], Gelu1(x)); d > 1 {
			t.Errorf("Gelu(%g): slice %g, Gelu1 %g (%g ULP apart)", x, got[i], Gelu1(x), d)
		}
	}
	GeluGrad(got, src)
	for i, x := range src {
		if d := ulpDist(got[i], GeluGrad1(x)); d > 1 {
			t.Errorf("GeluGrad(%g): slice %g, GeluGrad1 %g (%g ULP apart)", x, got[i], GeluGrad1(x), d)
		}
	}
}
