package vecmath

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBinaryMatchesScalarOps: Binary gives, bit for bit, Go's f32
// operation written out element by element, for each op, every length
// 0..40 (vector body and scalar tail at every split), both operands
// tensors or either a scalar, with zeros, signed zeros, subnormals,
// infinities and huge values among the operands (a NaN result need only
// be a NaN: lanes and scalar code may keep either operand's payload). It
// leaves elements past len(out) alone and refuses other ops.
func TestBinaryMatchesScalarOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-40, -3e-39, float32(math.Inf(1)), float32(math.Inf(-1)), 3e38, -1}
	pick := func() float32 {
		if rng.IntN(4) == 0 {
			return special[rng.IntN(len(special))]
		}
		return float32(rng.NormFloat64() * 10)
	}
	for _, op := range []byte{'+', '-', '*', '/'} {
		for n := 0; n <= 40; n++ {
			for _, mode := range [][2]bool{{false, false}, {true, false}, {false, true}} {
				x, y := make([]float32, max(n, 1)), make([]float32, max(n, 1))
				for i := range x {
					x[i], y[i] = pick(), pick()
				}
				out := make([]float32, n+1)
				out[n] = 7
				if !Binary(op, out[:n], x, y, mode[0], mode[1]) {
					t.Fatalf("op %c refused", op)
				}
				for i := range n {
					a, b := x[i], y[i]
					if mode[0] {
						a = x[0]
					}
					if mode[1] {
						b = y[0]
					}
					var want float32
					switch op {
					case '+':
						want = a + b
					case '-':
						want = a - b
					case '*':
						want = a * b
					case '/':
						want = a / b
					}
					g := out[i]
					if math.IsNaN(float64(want)) && math.IsNaN(float64(g)) {
						continue
					}
					if math.Float32bits(g) != math.Float32bits(want) {
						t.Fatalf("%c n=%d mode %v [%d]: %g %c %g = %g, want %g", op, n, mode, i, a, op, b, g, want)
					}
				}
				if out[n] != 7 {
					t.Fatalf("%c n=%d: wrote past the slice", op, n)
				}
			}
		}
	}
	if Binary('^', make([]float32, 8), make([]float32, 8), make([]float32, 8), false, false) {
		t.Fatal("op ^ accepted")
	}
}

// BenchmarkBinary: the tensor-times-tensor multiply of 256×1024 f32 (the
// MLP's gelu backward) and a tensor times a scalar, as fastBinary runs
// them, and the plain Go loop it replaced (go-mul) for reference.
func BenchmarkBinary(b *testing.B) {
	const n = 256 * 1024
	x, y, out := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i%7), float32(i%5+1)
	}
	b.Run("mul", func(b *testing.B) {
		b.SetBytes(3 * n * 4)
		for b.Loop() {
			Binary('*', out, x, y, false, false)
		}
	})
	b.Run("go-mul", func(b *testing.B) {
		b.SetBytes(3 * n * 4)
		for b.Loop() {
			x, y := x[:len(out)], y[:len(out)]
			for i := range out {
				out[i] = x[i] * y[i]
			}
		}
	})
	b.Run("scale", func(b *testing.B) {
		b.SetBytes(2 * n * 4)
		for b.Loop() {
			Binary('*', out, x, y, false, true)
		}
	})
}
