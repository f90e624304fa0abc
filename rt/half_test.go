package rt

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// The rounding of f32 to f16 and bf16 is bit-exact with NumPy's float16
// and PyTorch's bfloat16 on random, tiny, huge, subnormal, tie, infinite
// and NaN values (testdata/golden/half, written by gen.py).
func TestHalfRoundingMatchesNumPyAndPyTorch(t *testing.T) {
	x := loadNpy(t, "../testdata/golden/half/f32.npy").Data.([]float32)
	f16 := loadNpy(t, "../testdata/golden/half/f16_bits.npy").Data.([]int32)
	bf16 := loadNpy(t, "../testdata/golden/half/bf16_bits.npy").Data.([]int32)
	for i, f := range x {
		if math.IsNaN(float64(f)) {
			require.True(t, math.IsNaN(float64(F16ToF32(F32ToF16(f)))))
			require.True(t, math.IsNaN(float64(BF16ToF32(F32ToBF16(f)))))
			continue
		}
		require.Equal(t, uint16(f16[i]), F32ToF16(f), "f16 of %g (#%d)", f, i)
		require.Equal(t, uint16(bf16[i]), F32ToBF16(f), "bf16 of %g (#%d)", f, i)
		// widening is exact, and rounding a widened half gives it back
		require.Equal(t, uint16(f16[i]), F32ToF16(F16ToF32(uint16(f16[i]))))
		require.Equal(t, uint16(bf16[i]), F32ToBF16(BF16ToF32(uint16(bf16[i]))))
	}
}

func TestHalfTensorsComputeAndCount(t *testing.T) {
	cpu := &CPU{BLAS: GonumBLAS{}}
	p := compile(t, `mesh M = [a=2]
input x : bf16[4, 4] {S(0)} = normal(0, 1)
input w : bf16[4, 4] = normal(0, 1)
y = x @ w
output x
output w
output y
`)
	res, err := Run(t.Context(), p, Options{Backend: cpu})
	require.NoError(t, err)
	y := res.Output("y")
	require.Equal(t, "bf16", y.DType.String())
	require.Equal(t, int64(32), y.Bytes(), "bf16 holds 2 bytes per element")
	// the product of the bf16 inputs, computed in f32 and rounded once
	want := make([]float32, 16)
	xs, ws := widen(res.Output("x")).Data.([]float32), widen(res.Output("w")).Data.([]float32)
	GonumBLAS{}.Sgemm(4, 4, 4, xs, 4, ws, 4, want, 4)
	for i, h := range y.Data.([]uint16) {
		require.Equal(t, F32ToBF16(want[i]), h, "element %d", i)
	}
	for _, d := range res.Devices {
		require.Equal(t, p.Peak[d.Device], d.Peak)
	}
}
