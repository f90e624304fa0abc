package vecmath

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestExpShiftedMatchesExp64: the vector lanes give Exp64's bits for every
// length from 0 to 40 (vector body and scalar tail at every split), on
// softmax-like rows (masked entries at −1e9) and on the special values:
// NaN, ±Inf, the flush and overflow thresholds. Exp64 itself is checked
// against math.Exp (relative error below 2e-13 over [−707, 708]).
func TestExpShiftedMatchesExp64(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), -1e9, 0,
		-708, -707.99, 709, 709.01, 88.7, -103.9, 1e-30, -3}
	for n := 0; n <= 40; n++ {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 3)
			if rng.IntN(3) == 0 {
				x[i] = special[rng.IntN(len(special))]
			}
		}
		for _, shift := range []float64{0, 2.5, -1, math.Inf(1)} {
			e := make([]float64, n+1)
			e[n] = 42
			ExpShifted(e[:n], x, shift)
			for i, v := range x {
				want := Exp64(float64(v) - shift)
				if math.Float64bits(e[i]) != math.Float64bits(want) && !(e[i] != e[i] && want != want) {
					t.Fatalf("n=%d shift %g: ExpShifted at %d (x=%g) = %g, Exp64 = %g", n, shift, i, v, e[i], want)
				}
			}
			if e[n] != 42 {
				t.Fatalf("n=%d: wrote past the slice", n)
			}
		}
	}
	for i := 0; i <= 100000; i++ {
		x := -707 + float64(i)*(1415.0/100000)
		if d := math.Abs(Exp64(x)/math.Exp(x) - 1); d > 2e-13 {
			t.Fatalf("Exp64(%g) off by %g relative", x, d)
		}
	}
}

// BenchmarkExpShifted: softmax rows of 16 (the tiny GPT's attention) and
// 1024, vector kernel against Exp64 one element at a time.
func BenchmarkExpShifted(b *testing.B) {
	for _, n := range []int{16, 1024} {
		x, e := make([]float32, n), make([]float64, n)
		for i := range x {
			x[i] = float32(i%7) - 3
			if i%3 == 0 {
				x[i] = -1e9
			}
		}
		b.Run("vector/"+strconv.Itoa(n), func(b *testing.B) {
			for range b.N {
				ExpShifted(e, x, 3)
			}
		})
		b.Run("scalar/"+strconv.Itoa(n), func(b *testing.B) {
			for range b.N {
				for i, v := range x {
					e[i] = Exp64(float64(v) - 3)
				}
			}
		})
	}
}
