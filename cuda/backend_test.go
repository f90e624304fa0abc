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
