package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// The backend op by op against the CPU backend, through the whole path: Go
// → the C shim → the driver (fake or real) → the kernels.

func hostTensor(dt ir.DType, shape []int, x []float64) *rt.Tensor {
	t := rt.NewTensor(dt, shape)
	for j, v := range x {
		switch d := t.Data.(type) {
		case []float32:
			d[j] = float32(v)
		case []float64:
			d[j] = v
		}
	}
	return t
}

// launch runs k on the backend with host arguments copied in, and copies
// the result out.
func launch(t *testing.T, be *Backend, k *plan.Kernel, args ...*rt.Tensor) *rt.Tensor {
	t.Helper()
	var bufs []rt.Buffer
	var in []sbp.Block
	for _, a := range args {
		b, err := be.CopyIn(a)
		require.NoError(t, err)
		bufs = append(bufs, b)
		in = append(in, sbp.Block{Off: make([]int, len(a.Shape)), Len: a.Shape})
		k.ArgDTypes, k.ArgShapes = append(k.ArgDTypes, a.DType), append(k.ArgShapes, a.Shape)
	}
	out, err := be.Launch(context.Background(), k, bufs, in, sbp.Block{Off: make([]int, len(k.Shape)), Len: k.Shape})
	require.NoError(t, err, k.Op)
	require.NoError(t, be.Sync(context.Background()))
	host, err := be.CopyOut(out)
	require.NoError(t, err)
	for _, b := range append(bufs, out) {
		be.Free(b)
	}
	return host
}

func TestBackendElementwise(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(9, 2))
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, op := range BinaryOps {
			worst := 0.0
			for _, c := range broadcastCases {
				_, shape, err := BroadcastFor(c[0], c[1])
				require.NoError(t, err)
				a := inputs(rng, numel(c[0]), dt, specialA)
				b := inputs(rng, numel(c[1]), dt, specialB)
				want := reference(t, op, dt, shape, [][]int{c[0], c[1]}, [][]float64{a, b})
				k := &plan.Kernel{Op: op, DType: dt, Shape: shape}
				require.True(t, Native(&plan.Kernel{Op: op, DType: dt, ArgDTypes: []ir.DType{dt, dt}}))
				got := launch(t, be, k, hostTensor(dt, c[0], a), hostTensor(dt, c[1], b))
				require.Equal(t, shape, got.Shape)
				worst = math.Max(worst, agree(t, op, fmt.Sprintf("%s %s %v·%v", op, dt, c[0], c[1]), dt, got.Float64s(), want))
			}
			t.Logf("%-9s %s: worst %.2f ulp", op, dt, worst)
		}
		for _, op := range UnaryOps {
			worst := 0.0
			for _, shape := range [][]int{{1}, {13}, {5, 40}, {3, 7, 11}, {70000}} {
				x := inputs(rng, numel(shape), dt, specialA)
				want := reference(t, op, dt, shape, [][]int{shape}, [][]float64{x})
				got := launch(t, be, &plan.Kernel{Op: op, DType: dt, Shape: shape}, hostTensor(dt, shape, x))
				worst = math.Max(worst, agree(t, op, fmt.Sprintf("%s %s %v", op, dt, shape), dt, got.Float64s(), want))
			}
			t.Logf("%-9s %s: worst %.2f ulp", op, dt, worst)
		}
	}
	require.Empty(t, be.Fallbacks(), "every elementwise op ran as a CUDA kernel")
}

// TestBackendGeluTailRelative: f32 gelu and gelu_grad keep their relative
// accuracy where the values are small (x from −14 to −1, and 1 to 14),
// against x·Φ(x) and Φ(x) + x·φ(x) in float64 worked out here, within
// 2 ulp. The elementwise tests' absolute band (1e-7) passes any error
// there; with erfcf and expf of an argument rounded to f32 the kernels were
// 10 ulp off at x = −3 and 195 ulp at x = −13.
func TestBackendGeluTailRelative(t *testing.T) {
	be := newTestBackend(t)
	var x []float64
	for v := float32(1); v <= 14; v = math.Nextafter32(v, 100) + 1.0/1024 {
		x = append(x, float64(v), -float64(v))
	}
	refs := map[string]func(float64) float64{
		"gelu": func(v float64) float64 { return 0.5 * v * math.Erfc(-v/math.Sqrt2) },
		"gelu_grad": func(v float64) float64 {
			return 0.5*math.Erfc(-v/math.Sqrt2) + v*math.Exp(-0.5*v*v)/math.Sqrt(2*math.Pi)
		},
	}
	for op, ref := range refs {
		shape := []int{len(x)}
		got := launch(t, be, &plan.Kernel{Op: op, DType: ir.F32, Shape: shape}, hostTensor(ir.F32, shape, x))
		worst := 0.0
		for i, g := range got.Data.([]float32) {
			want := float32(ref(x[i]))
			if want == 0 {
				require.Zero(t, g, "%s(%g)", op, x[i])
				continue
			}
			u := ulpsApart(float64(g), float64(want), ir.F32)
			require.LessOrEqual(t, u, 2.0, "%s(%g): got %g, want %g", op, x[i], g, want)
			worst = math.Max(worst, u)
		}
		t.Logf("%s f32 for 1 ≤ |x| ≤ 14: worst %.2f ulp", op, worst)
	}
}
