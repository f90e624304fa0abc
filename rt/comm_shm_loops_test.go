package rt

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The f32 reduction loops go through vecmath.Binary (AVX2 where it runs);
// these tests hold them to the scalar loops they replace, bit for bit,
// over special values (signed zeros, infinities, subnormals, NaNs with
// payloads) and lengths around the vector width, and to no allocation.

func specialF32(rng *rand.Rand, n int) []float32 {
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc00001), math.Float32frombits(0xffc12345), math.Float32frombits(1),
		math.Float32frombits(0x807fffff), math.MaxFloat32, -math.MaxFloat32, 1e-38}
	x := make([]float32, n)
	for i := range x {
		if rng.IntN(4) == 0 {
			x[i] = specials[rng.IntN(len(specials))]
		} else {
			x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(20)-10)))
		}
	}
	return x
}

func sameBits(t *testing.T, what string, n int, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s, n=%d: element %d is %#x, the scalar loop gives %#x", what, n, i, math.Float32bits(got[i]), math.Float32bits(want[i]))
		}
	}
}

func TestReductionLoopsF32MatchScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 63, 100, tile + 5} {
		in := make([][]float32, 5)
		for k := range in {
			in[k] = specialF32(rng, n)
		}
		start := specialF32(rng, n)
		acc := make([]float32, n)
		want := make([]float32, n)

		sum2(acc, in[0], in[1])
		for i := range want {
			want[i] = in[0][i] + in[1][i]
		}
		sameBits(t, "sum2", n, acc, want)

		sum3(acc, in[0], in[1], in[2])
		for i := range want {
			want[i] = in[0][i] + in[1][i] + in[2][i]
		}
		sameBits(t, "sum3", n, acc, want)

		copy(acc, start)
		addInto(acc, in[0])
		for i := range want {
			want[i] = in[0][i] + start[i]
		}
		sameBits(t, "addInto", n, acc, want)

		copy(acc, start)
		add2(acc, in[0], in[1])
		for i := range want {
			want[i] = start[i] + in[0][i] + in[1][i]
		}
		sameBits(t, "add2", n, acc, want)

		copy(acc, start)
		add4(acc, in[0], in[1], in[2], in[3])
		for i := range want {
			want[i] = start[i] + in[0][i] + in[1][i] + in[2][i] + in[3][i]
		}
		sameBits(t, "add4", n, acc, want)
	}
}

func TestReductionLoopsF32Allocate(t *testing.T) {
	a, b, c, d, acc := make([]float32, tile), make([]float32, tile), make([]float32, tile), make([]float32, tile), make([]float32, tile)
	if n := testing.AllocsPerRun(20, func() {
		sum2(acc, a, b)
		sum3(acc, a, b, c)
		addInto(acc, a)
		add2(acc, a, b)
		add4(acc, a, b, c, d)
	}); n != 0 {
		t.Fatalf("the f32 reduction loops allocate %v objects a round", n)
	}
}
