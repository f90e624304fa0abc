package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
)

// TestHalfConversions: the widening kernels on every bf16 and f16 bit
// pattern, and the rounding kernels on special, halfway and random f32
// patterns, against rt's conversions bit for bit.
func TestHalfConversions(t *testing.T) {
	be := newTestBackend(t)
	all := rt.NewTensor(ir.BF16, []int{1 << 16})
	for i := range all.Data.([]uint16) {
		all.Data.([]uint16)[i] = uint16(i)
	}
	rng := rand.New(rand.NewPCG(25, 26))
	var bits []uint32
	for _, f := range []float32{0, float32(math.Copysign(0, -1)), 1, -1, 65504, 65520, 1e-8, 6e-8, 3e-8, 1e30,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
		bits = append(bits, math.Float32bits(f))
	}
	for _, b := range []uint32{0x7f800001, 0xffc00000, 0x00000001, 0x3f808000, 0x3f818000, 0x3f801000, 0x3f803000, 0x38800000, 0x33000000} {
		bits = append(bits, b) // NaN payloads, subnormals, ties to even for both halves
	}
	for range 100000 {
		bits = append(bits, rng.Uint32())
	}
	f32 := rt.NewTensor(ir.F32, []int{len(bits)})
	for i, b := range bits {
		f32.Data.([]float32)[i] = math.Float32frombits(b)
	}
	for _, dt := range []ir.DType{ir.BF16, ir.F16} {
		all.DType = dt
		d, err := be.upload(all)
		require.NoError(t, err)
		w, err := be.convert(d, ir.F32)
		require.NoError(t, err)
		got, err := w.ReadHost()
		require.NoError(t, err)
		for i, h := range all.Data.([]uint16) {
			want := rt.BF16ToF32(h)
			if dt == ir.F16 {
				want = rt.F16ToF32(h)
			}
			require.Equal(t, math.Float32bits(want), math.Float32bits(got.Data.([]float32)[i]), "widen %s %#04x", dt, h)
		}

		d, err = be.upload(f32)
		require.NoError(t, err)
		nb, err := be.convert(d, dt)
		require.NoError(t, err)
		got, err = nb.ReadHost()
		require.NoError(t, err)
		for i, f := range f32.Data.([]float32) {
			want := rt.F32ToBF16(f)
			if dt == ir.F16 {
				want = rt.F32ToF16(f)
			}
			require.Equal(t, want, got.Data.([]uint16)[i], "narrow %#08x to %s", math.Float32bits(f), dt)
		}
	}
}

// halfTensor rounds x to dt through rt's own conversion.
func halfTensor(dt ir.DType, shape []int, x []float64) *rt.Tensor {
	t := rt.NewTensor(dt, shape)
	for i, v := range x {
		if dt == ir.BF16 {
			t.Data.([]uint16)[i] = rt.F32ToBF16(float32(v))
		} else {
			t.Data.([]uint16)[i] = rt.F32ToF16(float32(v))
		}
	}
	return t
}

// TestHalfOps: ops in bf16 and f16 (widened, the f32 kernel, narrowed;
// matmul as a cuBLAS GEMM of half operands with f32 compute, in each of its
// batch mappings) run natively and agree with the CPU within one unit of
// the half type (their f32 stage may differ in its last bits: the device's
// exp, the GEMM's order).
func TestHalfOps(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(27, 28))
	randHalf := func(dt ir.DType, shape []int) *rt.Tensor {
		x := make([]float64, numel(shape))
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		return halfTensor(dt, shape, x)
	}
	for _, dt := range []ir.DType{ir.BF16, ir.F16} {
		a, b, c := randHalf(dt, []int{4, 6}), randHalf(dt, []int{6}), randHalf(dt, []int{6, 5})
		cases := []struct {
			k    *plan.Kernel
			args []*rt.Tensor
		}{
			{&plan.Kernel{Op: "add", DType: dt}, []*rt.Tensor{a, b}},
			{&plan.Kernel{Op: "gelu", DType: dt}, []*rt.Tensor{a}},
			{&plan.Kernel{Op: "matmul", DType: dt}, []*rt.Tensor{a, c}},
			{&plan.Kernel{Op: "softmax", DType: dt, Attrs: ir.Attrs{Axis: 1}}, []*rt.Tensor{a}},
			{&plan.Kernel{Op: "sum", DType: dt, Attrs: ir.Attrs{Axis: 0}}, []*rt.Tensor{a}},
			{&plan.Kernel{Op: "cast", DType: ir.F32}, []*rt.Tensor{a}},
			{&plan.Kernel{Op: "cast", DType: dt}, []*rt.Tensor{randTensor(rng, ir.F32, []int{4, 6})}},
			{&plan.Kernel{Op: "const", DType: dt, Attrs: ir.Attrs{Scalar: 0.1}}, nil},
		}
		for _, sh := range [][2][]int{{{2, 3, 5, 7}, {7, 4}}, {{3, 5, 7}, {3, 7, 4}}, {{5, 7}, {3, 7, 4}}, {{2, 1, 5, 7}, {1, 3, 7, 4}}} {
			cases = append(cases, struct {
				k    *plan.Kernel
				args []*rt.Tensor
			}{&plan.Kernel{Op: "matmul", DType: dt}, []*rt.Tensor{randHalf(dt, sh[0]), randHalf(dt, sh[1])}})
		}
		for _, c := range cases {
			want := cpuCompute(t, c.k, c.args...)
			c.k.Shape = want.Shape
			got := launch(t, be, c.k, c.args...)
			require.Equal(t, want.DType, got.DType, c.k.Op)
			require.Equal(t, want.Shape, got.Shape, c.k.Op)
			what := fmt.Sprintf("%s %s", c.k.Op, dt)
			if got.DType == ir.F32 {
				require.Equal(t, want.Data, got.Data, what)
				continue
			}
			w, g := want.Data.([]uint16), got.Data.([]uint16)
			for i := range w {
				d := int(w[i]) - int(g[i])
				require.True(t, d >= -1 && d <= 1 && (w[i]^g[i])&0x8000 == 0 || w[i] == g[i], "%s [%d]: cpu %#04x, cuda %#04x", what, i, w[i], g[i])
			}
		}
	}
	require.Empty(t, be.Fallbacks(), "half ops run as their f32 kernels")
}
