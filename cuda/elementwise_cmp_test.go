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

// reference runs op on the CPU backend, the definition of every op.
func reference(t *testing.T, op string, dt ir.DType, outShape []int, shapes [][]int, in [][]float64) []float64 {
	t.Helper()
	k := &plan.Kernel{Op: op, DType: dt, Shape: outShape}
	var args []*rt.Tensor
	for i, x := range in {
		tt := rt.NewTensor(dt, shapes[i])
		for j, v := range x {
			if dt == ir.F32 {
				tt.Data.([]float32)[j] = float32(v)
			} else {
				tt.Data.([]float64)[j] = v
			}
		}
		k.ArgDTypes, k.ArgShapes = append(k.ArgDTypes, dt), append(k.ArgShapes, shapes[i])
		args = append(args, tt)
	}
	cpu := &rt.CPU{BLAS: rt.GonumBLAS{}}
	out, err := cpu.Compute(&rt.OpCall{Kernel: k, Args: args})
	require.NoError(t, err, op)
	return out.Float64s()
}

// inputs are normal values times 3, with the special ones first: signed
// zeros, ±1, infinities, NaN, tiny and huge values, ties.
func inputs(rng *rand.Rand, n int, dt ir.DType, special []float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		if i < len(special) {
			x[i] = special[i]
		} else {
			x[i] = 3 * rng.NormFloat64()
		}
		if dt == ir.F32 {
			x[i] = float64(float32(x[i]))
		}
	}
	return x
}

var (
	specialA = []float64{0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.NaN(), 1e-30, 1e30, 2, -0.75, 20, -20}
	specialB = []float64{math.Copysign(0, -1), 0, math.NaN(), 1, math.Inf(-1), 3, 5, -1e-30, 1e-30, 2, 0.5, -4, 7}
)

// ulpsApart measures |got − want| in units in the last place of want.
func ulpsApart(got, want float64, dt ir.DType) float64 {
	ulp := math.Nextafter(math.Abs(want), math.Inf(1)) - math.Abs(want)
	if dt == ir.F32 {
		w := float32(math.Abs(want))
		ulp = float64(math.Nextafter32(w, float32(math.Inf(1))) - w)
	}
	return math.Abs(got-want) / ulp
}

// exactOps are correctly rounded in IEEE arithmetic (and on the GPU, with
// NVRTC's defaults -prec-div=true -prec-sqrt=true) or do no arithmetic:
// they must agree bit for bit, signed zeros included.
var exactOps = map[string]bool{"add": true, "sub": true, "mul": true, "div": true, "minimum": true,
	"maximum": true, "neg": true, "sqrt": true, "relu": true, "relu_grad": true}

// cpuLooser are the f32 ops whose CPU kernel, the reference, is further
// from the exact result than the tolerance allows between two correctly
// computed ones: the CPU's gelu and gelu_grad are float32 polynomials
// within 5 ulp and 7 ulp or 2⁻²³ of it (spec.md), the GPU's kernels within
// 1 ulp, so they may differ by the sum.
var cpuLooser = map[string]struct{ ulps, atol float64 }{
	"gelu":      {6, 1e-7},
	"gelu_grad": {8, 0x1p-23},
}

// agree compares element by element and returns the largest error in ulps
// outside the absolute-tolerance band.
func agree(t *testing.T, op, what string, dt ir.DType, got, want []float64) float64 {
	t.Helper()
	require.Len(t, got, len(want), what)
	tol := tolerance[dt]
	if l, ok := cpuLooser[op]; ok && dt == ir.F32 {
		tol = l
	}
	worst := 0.0
	for i := range want {
		g, w := got[i], want[i]
		switch {
		case math.IsNaN(w):
			require.True(t, math.IsNaN(g), "%s[%d]: got %v, want NaN", what, i, g)
		case exactOps[op]:
			require.Equal(t, math.Float64bits(w), math.Float64bits(g), "%s[%d]: got %v, want %v", what, i, g, w)
		case math.IsInf(w, 0):
			require.Equal(t, w, g, "%s[%d]", what, i)
		case math.Abs(g-w) <= tol.atol:
		default:
			u := ulpsApart(g, w, dt)
			require.LessOrEqual(t, u, tol.ulps, "%s[%d]: got %v, want %v", what, i, g, w)
			worst = math.Max(worst, u)
		}
	}
	return worst
}

// grids cycles through launch shapes: one thread for everything, fewer
// threads than elements (the grid-stride loop), the backend's own
// LaunchDims, and more threads than elements.
func grids(i, n int) (int, int) {
	switch i % 4 {
	case 0:
		return 1, 1
	case 1:
		return 3, 4
	case 2:
		return LaunchDims(n)
	}
	return n/32 + 2, 32
}

var broadcastCases = [][2][]int{
	{{7}, {7}},
	{{3, 4}, {4}},
	{{3, 1}, {1, 5}},
	{{2, 3, 4}, {3, 1}},
	{{1}, {5, 6}},
	{{}, {3, 2}},
	{{2, 1, 3, 1, 2}, {4, 3, 1, 1}},
	{{4, 1, 1, 3}, {1, 5, 2, 1}},
	{{2, 1, 2, 1, 2, 1, 2, 1, 2, 3}, {2, 1, 2, 1, 2, 1, 2, 1, 2, 3}}, // 10 dims, merged into one
	{{33, 17}, {33, 1}},
}

func testElementwise(t *testing.T, compiler string) {
	e := buildEmulator(t, compiler)
	rng := rand.New(rand.NewPCG(9, 1))
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, op := range BinaryOps {
			worst := 0.0
			for ci, c := range broadcastCases {
				bc, out, err := BroadcastFor(c[0], c[1])
				require.NoError(t, err)
				a := inputs(rng, numel(c[0]), dt, specialA)
				b := inputs(rng, numel(c[1]), dt, specialB)
				want := reference(t, op, dt, out, [][]int{c[0], c[1]}, [][]float64{a, b})
				grid, block := grids(ci, len(want))
				got := e.run(t, op, dt, grid, block, len(want), &bc, a, b)
				what := fmt.Sprintf("%s %s %v·%v grid %d×%d", op, dt, c[0], c[1], grid, block)
				worst = math.Max(worst, agree(t, op, what, dt, got, want))
			}
			t.Logf("%-9s %s: worst %.2f ulp", op, dt, worst)
		}
		for _, op := range UnaryOps {
			worst := 0.0
			for ci, shape := range [][]int{{1}, {13}, {5, 40}, {3, 7, 11}} {
				x := inputs(rng, numel(shape), dt, specialA)
				want := reference(t, op, dt, shape, [][]int{shape}, [][]float64{x})
				grid, block := grids(ci, len(want))
				got := e.run(t, op, dt, grid, block, len(want), nil, x)
				worst = math.Max(worst, agree(t, op, fmt.Sprintf("%s %s %v grid %d×%d", op, dt, shape, grid, block), dt, got, want))
			}
			t.Logf("%-9s %s: worst %.2f ulp", op, dt, worst)
		}
	}
}

func TestElementwiseKernelsAsC(t *testing.T)   { testElementwise(t, "cc") }
func TestElementwiseKernelsAsCxx(t *testing.T) { testElementwise(t, "c++") }
