package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

// TestBackendMatmulTransposedOperands: a matmul whose operands lower's
// gemm fusion left stored transposed (plan.Kernel.TransA, TransB) gives,
// within the rounding of a k-term dot product, the plain matmul of the
// logical operands on the CPU backend, for f32 and f64, 2-D, batched, and
// B's batch broadcast.
func TestBackendMatmulTransposedOperands(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(7, 8))
	cases := [][2][]int{{{5, 7}, {7, 3}}, {{3, 5, 7}, {3, 7, 4}}, {{2, 3, 5, 7}, {7, 4}}, {{65, 130}, {130, 33}}}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		eps := math.Pow(2, -24)
		if dt == ir.F64 {
			eps = math.Pow(2, -53)
		}
		for _, c := range cases {
			a, b := randTensor(rng, dt, c[0]), randTensor(rng, dt, c[1])
			plain := &plan.Kernel{Op: "matmul", DType: dt}
			want := cpuCompute(t, plain, a, b)
			bound := cpuCompute(t, plain, absTensor(a), absTensor(b)).Float64s()
			for _, tr := range [][2]bool{{true, false}, {false, true}, {true, true}} {
				sa, sb := a, b
				if tr[0] {
					sa = cpuTranspose(t, a)
				}
				if tr[1] {
					sb = cpuTranspose(t, b)
				}
				k := &plan.Kernel{Op: "matmul", DType: dt, Shape: want.Shape, TransA: tr[0], TransB: tr[1]}
				got := launch(t, be, k, sa, sb)
				label := fmt.Sprintf("%s %v@%v trans %v", dt, c[0], c[1], tr)
				require.Equal(t, want.Shape, got.Shape, label)
				kk := c[0][len(c[0])-1]
				w, g := want.Float64s(), got.Float64s()
				for i := range w {
					require.InDelta(t, w[i], g[i], 2*float64(kk+1)*eps*bound[i], "%s [%d]", label, i)
				}
			}
		}
	}
	require.Empty(t, be.Fallbacks())
}

// cpuTranspose swaps x's last two dims on the CPU backend.
func cpuTranspose(t *testing.T, x *rt.Tensor) *rt.Tensor {
	r := len(x.Shape)
	perm := make([]int, r)
	for i := range perm {
		perm[i] = i
	}
	perm[r-2], perm[r-1] = r-1, r-2
	return cpuCompute(t, &plan.Kernel{Op: "transpose", DType: x.DType, Attrs: ir.Attrs{Perm: perm}}, x)
}
