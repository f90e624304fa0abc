package rt

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/meshrun/meshrun/rt/vecmath"
)

// ulps is the distance between two f32 values in units in the last place,
// counted along the ordered bit patterns (−0 and +0 coincide); two NaNs are
// 0 apart and a NaN against a number is infinitely far.
func ulps(a, b float32) float64 {
	an, bn := a != a, b != b
	if an || bn {
		if an && bn {
			return 0
		}
		return math.Inf(1)
	}
	ord := func(f float32) int64 {
		b := int64(math.Float32bits(f))
		if b&0x80000000 != 0 {
			return -(b & 0x7fffffff)
		}
		return b
	}
	d := ord(a) - ord(b)
	return math.Abs(float64(d))
}

// sweepF32 visits every 2^10-th bit pattern (4M values spread over the
// whole range, both signs) plus the edges: zeros, subnormals, the smallest
// normal, ±MaxFloat32, ±Inf, NaN, and the overflow and underflow
// thresholds of exp.
func sweepF32(visit func(x float32)) {
	for b := uint64(0); b < 1<<32; b += 1 << 10 {
		visit(math.Float32frombits(uint32(b) | uint32(b>>10)&0x3ff)) // vary low bits too
	}
	edges := []float32{0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, 1e-40,
		0x1p-126, math.MaxFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		88.72283, 88.72284, 88.7229, -87.33654, -103.27893, -103.97207, -104, 0.25, 0.5, 1, 3.92, 10.5}
	for _, e := range edges {
		visit(e)
		visit(-e)
		visit(math.Nextafter32(e, 0))
		visit(math.Nextafter32(e, float32(math.Inf(1))))
	}
}

func TestF32MathULPs(t *testing.T) {
	if testing.Short() {
		t.Skip("4M points per function")
	}
	const invSqrt2Pi = 0.3989422804014327
	refGelu := func(x float64) float64 { return 0.5 * x * math.Erfc(-x/math.Sqrt2) }
	refGeluGrad := func(x float64) float64 {
		return 0.5*math.Erfc(-x/math.Sqrt2) + x*math.Exp(-0.5*x*x)*invSqrt2Pi
	}
	cases := []struct {
		name   string
		got    func(float32) float32
		want   func(float64) float64
		maxULP float64
		abs    float64 // an error within abs passes whatever its ULPs
	}{
		{"exp", exp32, math.Exp, 1, 0},
		{"erf", erf32, math.Erf, 1, 0},
		{"tanh", tanh32, math.Tanh, 1, 0},
		{"sigmoid", sigmoid32, func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }, 1, 0},
		{"gelu/vecmath", vecmath.Gelu1, refGelu, 5, 0},
		{"gelu_grad/vecmath", vecmath.GeluGrad1, refGeluGrad, 7, 0x1p-23},
		{"gelu/vecmath slice", lanes(vecmath.Gelu), refGelu, 5, 0},
		{"gelu_grad/vecmath slice", lanes(vecmath.GeluGrad), refGeluGrad, 7, 0x1p-23},
	}
	for _, c := range cases {
		worst, at := 0.0, float32(0)
		sweepF32(func(x float32) {
			got, want := c.got(x), float32(c.want(float64(x)))
			if c.abs > 0 && math.Abs(float64(got)-float64(want)) <= c.abs {
				return
			}
			if d := ulps(got, want); d > worst {
				worst, at = d, x
			}
		})
		t.Logf("%-9s max error %g ULP (at %g)", c.name, worst, at)
		if worst > c.maxULP {
			t.Errorf("%s: %g ULP at x = %g (%#x): got %g, want %g; bound %g", c.name, worst, at,
				math.Float32bits(at), c.got(at), float32(c.want(float64(at))), c.maxULP)
		}
	}
}

// lanes is f on a slice of 8 (a whole vector where the vector kernels
// run) holding x, read back from its last lane.
func lanes(f func(dst, src []float32)) func(float32) float32 {
	var in, out [8]float32
	return func(x float32) float32 {
		for i := range in {
			in[i] = x
		}
		f(out[:], in[:])
		return out[7]
	}
}

// The ULP helper itself: neighbours are 1 apart across zero and
// subnormals, NaN only matches NaN.
func TestULPs(t *testing.T) {
	tiny := float32(math.SmallestNonzeroFloat32)
	for _, c := range []struct {
		a, b float32
		want float64
	}{
		{1, math.Nextafter32(1, 2), 1},
		{tiny, -tiny, 2},
		{0, float32(math.Copysign(0, -1)), 0},
		{1, 2, 1 << 23},
		{float32(math.NaN()), float32(math.NaN()), 0},
		{float32(math.NaN()), 1, math.Inf(1)},
	} {
		if got := ulps(c.a, c.b); got != c.want {
			t.Errorf("ulps(%g, %g) = %g, want %g", c.a, c.b, got, c.want)
		}
	}
}

// BenchmarkF32Math times each f32 kernel against the float64 math it
// replaces, over 4096 inputs spread across gelu's working range, in a
// shuffled order (MESHRUN_SORTED=1: ascending): a layer's activations
// change sign at random, and a sorted sweep hides the cost of branches on
// the input, which the branch predictor then always guesses right.
func BenchmarkF32Math(b *testing.B) {
	in, out := make([]float32, 4096), make([]float32, 4096)
	for i := range in {
		in[i] = float32(i-2048) / 256 // [-8, 8)
	}
	if os.Getenv("MESHRUN_SORTED") != "1" {
		rand.New(rand.NewPCG(1, 2)).Shuffle(len(in), func(i, j int) { in[i], in[j] = in[j], in[i] })
	}
	const invSqrt2Pi = 0.3989422804014327
	for _, c := range []struct {
		name string
		f    func(float32) float32
	}{
		{"exp/f32", exp32},
		{"exp/math", func(x float32) float32 { return float32(math.Exp(float64(x))) }},
		{"tanh/f32", tanh32},
		{"tanh/math", func(x float32) float32 { return float32(math.Tanh(float64(x))) }},
		{"gelu/math", func(x float32) float32 {
			v := float64(x)
			return float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
		}},
		{"gelu_grad/math", func(x float32) float32 {
			v := float64(x)
			return float32(0.5*(1+math.Erf(v/math.Sqrt2)) + v*math.Exp(-0.5*v*v)*invSqrt2Pi)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for n := 0; n < b.N; n++ {
				for i, x := range in {
					out[i] = c.f(x)
				}
			}
			b.SetBytes(int64(4 * len(in)))
		})
	}
	// The slice kernels (eight lanes at a time where AVX2 runs).
	for _, c := range []struct {
		name string
		f    func(dst, src []float32)
	}{{"gelu/vecmath", vecmath.Gelu}, {"gelu_grad/vecmath", vecmath.GeluGrad}} {
		b.Run(c.name, func(b *testing.B) {
			for n := 0; n < b.N; n++ {
				c.f(out, in)
			}
			b.SetBytes(int64(4 * len(in)))
		})
	}
}
