package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// threeKernels is the backend without its ResultsLauncher: rt.LaunchResults
// then runs adam_fused as adam_moment, adam_moment2 and adam_update, the
// three kernels the fused one must equal.
type threeKernels struct{ rt.Backend }

// adamFusedArgs are adam_fused's ten arguments for a parameter of shape:
// p, m, v (v ≥ 0, with zeros: the denominator is then ε alone), g (with
// zeros, a NaN and both infinities where the shape has room), and the
// scalars β1, β2, step, root_bc2, ε, decay.
func adamFusedArgs(rng *rand.Rand, dt ir.DType, shape []int) []*rt.Tensor {
	p, m, g := randTensor(rng, dt, shape), randTensor(rng, dt, shape), randTensor(rng, dt, shape)
	v := absTensor(randTensor(rng, dt, shape))
	gs, vs := g.Float64s(), v.Float64s()
	for i, s := range []float64{0, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if 2*i+1 < len(gs) {
			gs[2*i+1] = s
			vs[2*i] = 0
		}
	}
	g, v = hostTensor(dt, shape, gs), hostTensor(dt, shape, vs)
	scalar := func(x float64) *rt.Tensor { return hostTensor(dt, nil, []float64{x}) }
	return []*rt.Tensor{p, m, v, g, scalar(0.9), scalar(0.999), scalar(1e-3), scalar(0.31), scalar(1e-8), scalar(0.9999)}
}

// launchResults runs adam_fused on a backend: the tensors as device
// buffers, the scalars as host tensors (what a collective returns), and
// copies the three results out.
func launchResults(t *testing.T, be rt.Backend, dev *Backend, k *plan.Kernel, args []*rt.Tensor) []*rt.Tensor {
	t.Helper()
	var bufs []rt.Buffer
	var in []sbp.Block
	for i, a := range args {
		var b rt.Buffer = a
		if i < 4 {
			var err error
			b, err = dev.CopyIn(a)
			require.NoError(t, err)
			defer dev.Free(b)
		}
		bufs = append(bufs, b)
		in = append(in, sbp.Block{Off: make([]int, len(a.Shape)), Len: a.Shape})
	}
	res, err := rt.LaunchResults(context.Background(), be, k, bufs, in, sbp.Block{Off: make([]int, len(k.Shape)), Len: k.Shape}, 3)
	require.NoError(t, err)
	require.NoError(t, dev.Sync(context.Background()))
	var out []*rt.Tensor
	for _, r := range res {
		h, err := dev.CopyOut(r)
		require.NoError(t, err)
		dev.Free(r)
		out = append(out, h)
	}
	return out
}

// TestBackendAdamFused: the one-pass adam_fused kernel (optim.cu) bit for
// bit against the CPU's fused kernel and against the backend's own three
// kernels, in f32 and f64, over one element, a matrix and several blocks
// of threads, with zeros, NaN and infinities among the gradients.
func TestBackendAdamFused(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(41, 42))
	cpu := &rt.CPU{BLAS: rt.GonumBLAS{}}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, shape := range [][]int{{1}, {7, 5}, {3, 331}} {
			args := adamFusedArgs(rng, dt, shape)
			k := &plan.Kernel{Op: "adam_fused", DType: dt, Shape: shape}
			for _, a := range args {
				k.ArgDTypes, k.ArgShapes = append(k.ArgDTypes, a.DType), append(k.ArgShapes, a.Shape)
			}
			var want []*rt.Tensor
			bufs := make([]rt.Buffer, len(args))
			for i, a := range args {
				bufs[i] = a
			}
			res, err := cpu.LaunchResults(context.Background(), k, bufs, nil, sbp.Block{Len: shape}, 3)
			require.NoError(t, err)
			for _, r := range res {
				want = append(want, r.(*rt.Tensor))
			}
			fused := launchResults(t, be, be, k, args)
			three := launchResults(t, threeKernels{be}, be, k, args)
			for i, what := range []string{"p'", "m'", "v'"} {
				require.Equal(t, shape, fused[i].Shape)
				// a NaN's payload is the hardware's (a GPU's is 0x7fffffff)
				require.Equal(t, nanAsOne(want[i]), nanAsOne(fused[i]), "%s %s %v: fused vs the CPU", what, dt, shape)
				require.Equal(t, three[i].Bits(), fused[i].Bits(), "%s %s %v: fused vs the three kernels", what, dt, shape)
			}
		}
	}
	require.Empty(t, be.Fallbacks())
}

// TestBackendAdamFusedRejects: what lowering never makes is an error
// naming it, not a wrong result: another dtype, an argument of the wrong
// size or dtype, another several-result kernel.
func TestBackendAdamFusedRejects(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(43, 44))
	args := adamFusedArgs(rng, ir.F32, []int{4})
	bufs := make([]rt.Buffer, len(args))
	for i, a := range args {
		bufs[i] = a
	}
	out := sbp.Block{Off: []int{0}, Len: []int{4}}
	k := &plan.Kernel{Op: "adam_fused", DType: ir.BF16, Shape: []int{4}}
	_, err := be.LaunchResults(context.Background(), k, bufs, nil, out, 3)
	require.ErrorContains(t, err, "lower fuses no other dtype")
	k.DType = ir.F32
	_, err = be.LaunchResults(context.Background(), k, bufs, nil, sbp.Block{Off: []int{0}, Len: []int{5}}, 3)
	require.ErrorContains(t, err, "adam_fused: argument 1 is f32[4], want f32 with 5 elements")
	wrong := append([]rt.Buffer(nil), bufs...)
	wrong[5] = hostTensor(ir.F64, nil, []float64{0.999})
	_, err = be.LaunchResults(context.Background(), k, wrong, nil, out, 3)
	require.ErrorContains(t, err, "argument 6 is f64[], want f32 with 1 elements")
	_, err = be.LaunchResults(context.Background(), &plan.Kernel{Op: "adam_other", DType: ir.F32}, bufs, nil, out, 3)
	require.ErrorContains(t, err, "no kernel for adam_other with 3 results")
	require.Empty(t, be.Fallbacks())
}

// nanAsOne is Bits with every NaN as one value: the elements' bits, but
// for the payload of NaNs, which no op here defines.
func nanAsOne(t *rt.Tensor) []uint64 {
	bits := t.Bits()
	for i, b := range bits {
		if t.DType == ir.F32 && math.IsNaN(float64(math.Float32frombits(uint32(b)))) ||
			t.DType == ir.F64 && math.IsNaN(math.Float64frombits(b)) {
			bits[i] = math.MaxUint64
		}
	}
	return bits
}

// TestBackendAdamFusedInPlace: written over p, m and v (buffer donation,
// plan.Instr.Donate), adam_fused gives the bits it gives into fresh
// buffers, and hands back the donated buffers themselves; an argument
// that is a host tensor (uploaded for the launch) is not written over,
// its result is a fresh buffer, and the tensor keeps its values.
func TestBackendAdamFusedInPlace(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(45, 46))
	ctx := context.Background()
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, shape := range [][]int{{1}, {3, 331}} {
			args := adamFusedArgs(rng, dt, shape)
			k := &plan.Kernel{Op: "adam_fused", DType: dt, Shape: shape}
			want := launchResults(t, be, be, k, args)
			mBefore := args[1].Bits()
			bufs := make([]rt.Buffer, len(args))
			for i, a := range args {
				bufs[i] = a
				if i == 0 || i == 2 || i == 3 { // p, v, g on the device; m stays a host tensor
					b, err := be.CopyIn(a.Clone())
					require.NoError(t, err)
					bufs[i] = b
				}
			}
			out := sbp.Block{Off: make([]int, len(shape)), Len: shape}
			res, err := be.LaunchDonated(ctx, k, bufs, nil, out, 3, []int{0, 1, 2})
			require.NoError(t, err)
			require.NoError(t, be.Sync(ctx))
			require.Same(t, bufs[0], res[0], "p' over p")
			require.NotSame(t, bufs[1], res[1], "m' over a host tensor")
			require.Same(t, bufs[2], res[2], "v' over v")
			require.Equal(t, mBefore, args[1].Bits(), "the host tensor m is not written")
			for i, what := range []string{"p'", "m'", "v'"} {
				got, err := be.CopyOut(res[i])
				require.NoError(t, err)
				require.Equal(t, want[i].Bits(), got.Bits(), "%s %s %v: in place vs fresh", what, dt, shape)
			}
			_, err = be.LaunchDonated(ctx, k, bufs, nil, out, 3, []int{3, -1, -1})
			require.ErrorContains(t, err, "result 1 written over argument 4, not its own")
			for _, b := range []rt.Buffer{res[0], res[1], res[2], bufs[3]} {
				be.Free(b)
			}
		}
	}
}
