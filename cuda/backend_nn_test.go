package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// The model ops' kernels (optim.cu, reduce.cu, nn.cu, gather.cu and the
// box copies behind transpose, slice and pad) against the CPU backend.

// TestBackendTransposeConst: transpose (a box copy with permuted strides)
// and const, bit for bit against the CPU.
func TestBackendTransposeConst(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(11, 12))
	cases := []struct {
		shape, perm []int
	}{
		{[]int{3, 5}, []int{1, 0}},
		{[]int{2, 3, 4}, []int{0, 2, 1}},
		{[]int{2, 3, 4, 5}, []int{3, 1, 0, 2}},
		{[]int{1, 4, 1, 3}, []int{2, 3, 0, 1}},
		{[]int{2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, []int{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}}, // 10 uneven dims: on the host
	}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, c := range cases {
			x := randTensor(rng, dt, c.shape)
			k := &plan.Kernel{Op: "transpose", DType: dt, Attrs: ir.Attrs{Perm: c.perm}}
			want := cpuCompute(t, k, x)
			k.Shape = want.Shape
			require.True(t, Native(&plan.Kernel{Op: "transpose", DType: dt, ArgDTypes: []ir.DType{dt}}))
			got := launch(t, be, k, x)
			require.Equal(t, want.Shape, got.Shape)
			require.Equal(t, want.Data, got.Data, "%s %v by %v", dt, c.shape, c.perm)
		}
		for _, v := range []float64{0, -2.5, 1e-40, math.Pi} {
			k := &plan.Kernel{Op: "const", DType: dt, Attrs: ir.Attrs{Scalar: v}}
			want := cpuCompute(t, k)
			got := launch(t, be, k)
			require.Equal(t, want.Data, got.Data, "const %v %s", v, dt)
			require.Empty(t, got.Shape)
		}
	}
	require.Empty(t, be.Fallbacks())
}

// TestBackendAdam: Adam's fused ops bit for bit against the CPU (the same
// operations in the same order; --fmad=false keeps the GPU from fusing).
func TestBackendAdam(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(13, 14))
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, shape := range [][]int{{1}, {7, 5}, {300}} {
			scalar := func(v float64) *rt.Tensor { return hostTensor(dt, nil, []float64{v}) }
			m, g, p := randTensor(rng, dt, shape), randTensor(rng, dt, shape), randTensor(rng, dt, shape)
			v := absTensor(randTensor(rng, dt, shape))
			for _, c := range []struct {
				op   string
				args []*rt.Tensor
			}{
				{"adam_moment", []*rt.Tensor{m, g, scalar(0.9)}},
				{"adam_moment2", []*rt.Tensor{v, g, scalar(0.999)}},
				{"adam_update", []*rt.Tensor{p, m, v, scalar(1e-3), scalar(0.31), scalar(1e-8), scalar(0.9999)}},
			} {
				k := &plan.Kernel{Op: c.op, DType: dt, Shape: shape}
				want := cpuCompute(t, k, c.args...)
				got := launch(t, be, k, c.args...)
				require.Equal(t, want.Data, got.Data, "%s %s %v", c.op, dt, shape)
			}
		}
	}
	require.Empty(t, be.Fallbacks())
}

// TestBackendReductions: sum, mean, max and mse bit for bit against the
// CPU (double accumulation in the same order), over every axis and all,
// with NaN, -0 and infinities among the inputs, and a mean of a shard
// (divided by the global length).
func TestBackendReductions(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(15, 16))
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, shape := range [][]int{{7}, {3, 5}, {2, 3, 4}, {1, 200}} {
			x := randTensor(rng, dt, shape)
			y := randTensor(rng, dt, shape)
			for _, op := range []string{"sum", "mean", "max"} {
				for axis := -1; axis < len(shape); axis++ {
					k := &plan.Kernel{Op: op, DType: dt, Attrs: ir.Attrs{Axis: axis}}
					want := cpuCompute(t, k, x)
					k.Shape = want.Shape
					got := launch(t, be, k, x)
					require.Equal(t, want.Shape, got.Shape)
					require.Equal(t, want.Data, got.Data, "%s %s %v axis %d", op, dt, shape, axis)
				}
			}
			k := &plan.Kernel{Op: "mse", DType: dt}
			want := cpuCompute(t, k, x, y)
			k.Shape = want.Shape
			require.Equal(t, want.Data, launch(t, be, k, x, y).Data, "mse %s %v", dt, shape)
		}
		// specials: max sees NaN and signed zeros; sum sees infinities
		x := hostTensor(dt, []int{2, 4}, []float64{math.Copysign(0, -1), 0, 1, math.NaN(), math.Inf(1), -3, math.Inf(-1), 2})
		for _, op := range []string{"sum", "max"} {
			for axis := -1; axis < 2; axis++ {
				k := &plan.Kernel{Op: op, DType: dt, Attrs: ir.Attrs{Axis: axis}}
				want := cpuCompute(t, k, x)
				k.Shape = want.Shape
				got := launch(t, be, k, x)
				require.Equal(t, fmt.Sprint(want.Data), fmt.Sprint(got.Data), "%s %s specials axis %d", op, dt, axis)
			}
		}
		// a shard's mean divides by the global length
		shard := randTensor(rng, dt, []int{4, 3})
		k := &plan.Kernel{Op: "mean", DType: dt, Shape: []int{3}, Attrs: ir.Attrs{Axis: 0},
			ArgDTypes: []ir.DType{dt}, ArgShapes: [][]int{{16, 3}}}
		cpu := &rt.CPU{BLAS: rt.GonumBLAS{}}
		want, err := cpu.Compute(&rt.OpCall{Kernel: k, Args: []*rt.Tensor{shard}})
		require.NoError(t, err)
		d, err := be.CopyIn(shard)
		require.NoError(t, err)
		out, err := be.Launch(context.Background(), k, []rt.Buffer{d}, nil, sbp.Block{})
		require.NoError(t, err)
		got, err := be.CopyOut(out)
		require.NoError(t, err)
		require.Equal(t, want.Data, got.Data)
	}
	require.Empty(t, be.Fallbacks())
}

// TestBackendSoftmaxLayernorm: layernorm bit for bit against the CPU (the
// same double arithmetic); softmax and log_softmax within the elementwise
// tolerances (their exp and log are the device's), on every axis, with
// -inf (a masked logit) in a row.
func TestBackendSoftmaxLayernorm(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(17, 18))
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		worst := 0.0
		for _, shape := range [][]int{{7}, {3, 5}, {2, 3, 40}} {
			x := randTensor(rng, dt, shape)
			switch d := x.Data.(type) { // a masked logit
			case []float32:
				d[0] = float32(math.Inf(-1))
			case []float64:
				d[0] = math.Inf(-1)
			}
			for _, op := range []string{"softmax", "log_softmax"} {
				for axis := 0; axis < len(shape); axis++ {
					k := &plan.Kernel{Op: op, DType: dt, Shape: shape, Attrs: ir.Attrs{Axis: axis}}
					want := cpuCompute(t, k, x)
					got := launch(t, be, k, x)
					w := agree(t, op, fmt.Sprintf("%s %s %v axis %d", op, dt, shape, axis), dt, got.Float64s(), want.Float64s())
					worst = math.Max(worst, w)
				}
			}
			h := shape[len(shape)-1]
			g, b := randTensor(rng, dt, []int{h}), randTensor(rng, dt, []int{h})
			k := &plan.Kernel{Op: "layernorm", DType: dt, Shape: shape, Attrs: ir.Attrs{Eps: 1e-5}}
			y := randTensor(rng, dt, shape)
			want := cpuCompute(t, k, y, g, b)
			require.Equal(t, want.Data, launch(t, be, k, y, g, b).Data, "layernorm %s %v", dt, shape)
		}
		t.Logf("softmax, log_softmax %s: worst %.2f ulp", dt, worst)
	}
	require.Empty(t, be.Fallbacks())
}

// TestBackendGradHelpersSlicePad: softmax_grad, normalize and
// normalize_grad bit for bit against the CPU (double, the same order);
// the slice and pad ops bit for bit in three dtypes.
func TestBackendGradHelpersSlicePad(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(19, 20))
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, shape := range [][]int{{7}, {3, 5}, {2, 3, 40}} {
			y, g := randTensor(rng, dt, shape), randTensor(rng, dt, shape)
			for axis := 0; axis < len(shape); axis++ {
				k := &plan.Kernel{Op: "softmax_grad", DType: dt, Shape: shape, Attrs: ir.Attrs{Axis: axis}}
				require.Equal(t, cpuCompute(t, k, y, g).Data, launch(t, be, k, y, g).Data, "softmax_grad %s %v axis %d", dt, shape, axis)
			}
			k := &plan.Kernel{Op: "normalize", DType: dt, Shape: shape, Attrs: ir.Attrs{Eps: 1e-5}}
			require.Equal(t, cpuCompute(t, k, y).Data, launch(t, be, k, y).Data, "normalize %s %v", dt, shape)
			k = &plan.Kernel{Op: "normalize_grad", DType: dt, Shape: shape, Attrs: ir.Attrs{Eps: 1e-5}}
			require.Equal(t, cpuCompute(t, k, y, g).Data, launch(t, be, k, y, g).Data, "normalize_grad %s %v", dt, shape)
		}
	}
	for _, dt := range []ir.DType{ir.F32, ir.F64, ir.I64} {
		x := rt.NewTensor(dt, []int{4, 6, 3})
		fillRandom(rng, x)
		for axis := 0; axis < 3; axis++ {
			k := &plan.Kernel{Op: "slice", DType: dt, Attrs: ir.Attrs{Axis: axis, Start: 1, End: 3}}
			want := cpuCompute(t, k, x)
			k.Shape = want.Shape
			got := launch(t, be, k, x)
			require.Equal(t, want.Shape, got.Shape)
			require.Equal(t, want.Data, got.Data, "slice %s axis %d", dt, axis)

			// pad 5 more along axis, x at 2
			shape := slices.Clone(x.Shape)
			shape[axis] += 5
			k = &plan.Kernel{Op: "pad", DType: dt, Shape: shape, Attrs: ir.Attrs{Axis: axis, Start: 2}}
			want = cpuCompute(t, k, x)
			got = launch(t, be, k, x)
			require.Equal(t, want.Shape, got.Shape)
			require.Equal(t, want.Data, got.Data, "pad %s axis %d", dt, axis)
		}
	}
	require.Empty(t, be.Fallbacks())
}

func indexTensor(dt ir.DType, shape []int, v []int64) *rt.Tensor {
	t := rt.NewTensor(dt, shape)
	for i, x := range v {
		if dt == ir.I32 {
			t.Data.([]int32)[i] = int32(x)
		} else {
			t.Data.([]int64)[i] = x
		}
	}
	return t
}

// gatherCase runs k on the backend and the CPU with the same blocks (a
// shard of the table at off) and returns both results or errors.
func gatherCase(t *testing.T, be *Backend, k *plan.Kernel, in []sbp.Block, out sbp.Block, args ...*rt.Tensor) (*rt.Tensor, *rt.Tensor, error, error) {
	t.Helper()
	cpu := &rt.CPU{BLAS: rt.GonumBLAS{}}
	want, werr := cpu.Compute(&rt.OpCall{Kernel: k, Args: args, In: in, Out: out})
	var bufs []rt.Buffer
	for _, a := range args {
		b, err := be.CopyIn(a)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	res, gerr := be.Launch(context.Background(), k, bufs, in, out)
	if gerr != nil {
		return want, nil, werr, gerr
	}
	got, err := be.CopyOut(res)
	require.NoError(t, err)
	return want, got, werr, nil
}

// TestBackendEmbeddingCrossEntropy: embedding (a shard of the table: rows
// outside it give zeros) and embedding_grad bit for bit against the CPU,
// cross_entropy and its gradient within the elementwise tolerances (their
// exp and log are the device's), i32 and i64 indices, and an index out of
// range is the CPU's error.
func TestBackendEmbeddingCrossEntropy(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(21, 22))
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, it := range []ir.DType{ir.I32, ir.I64} {
			// a [10, 3] table split in two; this device holds rows 4..8
			w := randTensor(rng, dt, []int{5, 3})
			idx := indexTensor(it, []int{2, 3}, []int64{0, 4, 8, 9, 5, 4})
			k := &plan.Kernel{Op: "embedding", DType: dt, Shape: []int{2, 3, 3}, ArgDTypes: []ir.DType{dt, it}, ArgShapes: [][]int{{10, 3}, {2, 3}}}
			require.True(t, Native(k))
			in := []sbp.Block{{Off: []int{4, 0}, Len: []int{5, 3}}, {Off: []int{0, 0}, Len: []int{2, 3}}}
			want, got, werr, gerr := gatherCase(t, be, k, in, sbp.Block{Off: []int{0, 0, 0}, Len: []int{2, 3, 3}}, w, idx)
			require.NoError(t, werr)
			require.NoError(t, gerr)
			require.Equal(t, want.Data, got.Data, "embedding %s %s", dt, it)

			bad := indexTensor(it, []int{2, 3}, []int64{0, 4, 10, 9, 5, 4})
			_, _, werr, gerr = gatherCase(t, be, k, in, sbp.Block{Off: []int{0, 0, 0}, Len: []int{2, 3, 3}}, w, bad)
			require.EqualError(t, werr, "embedding index 10 out of range [0, 10)")
			require.EqualError(t, gerr, werr.Error())

			// its gradient into this device's rows 4..8
			g := randTensor(rng, dt, []int{2, 3, 3})
			kg := &plan.Kernel{Op: "embedding_grad", DType: dt, Shape: []int{10, 3}, ArgDTypes: []ir.DType{it, dt}, ArgShapes: [][]int{{2, 3}, {2, 3, 3}}}
			want, got, werr, gerr = gatherCase(t, be, kg, nil, sbp.Block{Off: []int{4, 0}, Len: []int{5, 3}}, idx, g)
			require.NoError(t, werr)
			require.NoError(t, gerr)
			require.Equal(t, want.Data, got.Data, "embedding_grad %s %s", dt, it)

			// cross entropy of 6 rows of this device, of a global batch of 12
			logits := randTensor(rng, dt, []int{6, 5})
			lab := indexTensor(it, []int{6}, []int64{0, 4, 2, 2, 1, 3})
			kc := &plan.Kernel{Op: "cross_entropy", DType: dt, ArgDTypes: []ir.DType{dt, it}, ArgShapes: [][]int{{12, 5}, {12}}}
			want, got, werr, gerr = gatherCase(t, be, kc, nil, sbp.Block{}, logits, lab)
			require.NoError(t, werr)
			require.NoError(t, gerr)
			agree(t, "cross_entropy", "cross_entropy", dt, got.Float64s(), want.Float64s())
			scale := hostTensor(dt, nil, []float64{0.5})
			kcg := &plan.Kernel{Op: "cross_entropy_grad", DType: dt, Shape: []int{12, 5}, ArgDTypes: []ir.DType{dt, it, dt},
				ArgShapes: [][]int{{12, 5}, {12}, nil}}
			want, got, werr, gerr = gatherCase(t, be, kcg, nil, sbp.Block{}, logits, lab, scale)
			require.NoError(t, werr)
			require.NoError(t, gerr)
			agree(t, "cross_entropy_grad", "cross_entropy_grad", dt, got.Float64s(), want.Float64s())

			badLab := indexTensor(it, []int{6}, []int64{0, 4, 5, 2, 1, 3})
			for _, kk := range []*plan.Kernel{kc, kcg} {
				args := []*rt.Tensor{logits, badLab, scale}[:len(kk.ArgDTypes)]
				_, _, werr, gerr = gatherCase(t, be, kk, nil, sbp.Block{}, args...)
				require.EqualError(t, werr, "cross_entropy label 5 out of range [0, 5)")
				require.EqualError(t, gerr, werr.Error(), kk.Op)
			}
		}
	}
	require.Empty(t, be.Fallbacks())
}

// TestBackendMiscOps: concat, broadcast_to, arange, axis_index and cast
// bit for bit against the CPU.
func TestBackendMiscOps(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(23, 24))
	for _, dt := range []ir.DType{ir.F32, ir.I64} {
		a, b, c := rt.NewTensor(dt, []int{2, 3, 4}), rt.NewTensor(dt, []int{2, 1, 4}), rt.NewTensor(dt, []int{2, 5, 4})
		for _, x := range []*rt.Tensor{a, b, c} {
			fillRandom(rng, x)
		}
		k := &plan.Kernel{Op: "concat", DType: dt, Attrs: ir.Attrs{Axis: 1}}
		want := cpuCompute(t, k, a, b, c)
		k.Shape = want.Shape
		got := launch(t, be, k, a, b, c)
		require.Equal(t, want.Shape, got.Shape)
		require.Equal(t, want.Data, got.Data, "concat %s", dt)
	}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		x := randTensor(rng, dt, []int{3, 1})
		shape := []int{2, 3, 4}
		k := &plan.Kernel{Op: "broadcast_to", DType: dt, Shape: shape}
		cpu := &rt.CPU{}
		want, err := cpu.Compute(&rt.OpCall{Kernel: &plan.Kernel{Op: "broadcast_to", DType: dt, Shape: shape,
			ArgDTypes: []ir.DType{dt}, ArgShapes: [][]int{{3, 1}}}, Args: []*rt.Tensor{x}, Out: sbp.Block{Off: []int{0, 0, 0}, Len: shape}})
		require.NoError(t, err)
		got := launch(t, be, k, x)
		require.Equal(t, want.Data, got.Data, "broadcast_to %s", dt)

		other := ir.F64
		if dt == ir.F64 {
			other = ir.F32
		}
		y := randTensor(rng, dt, []int{4, 5})
		for _, to := range []ir.DType{dt, other} {
			k := &plan.Kernel{Op: "cast", DType: to, Shape: []int{4, 5}}
			require.Equal(t, cpuCompute(t, k, y).Data, launch(t, be, k, y).Data, "cast %s to %s", dt, to)
		}
	}
	k := &plan.Kernel{Op: "arange", DType: ir.F32, Shape: []int{3, 7}}
	require.Equal(t, cpuCompute(t, k).Data, launch(t, be, k).Data)
	ka := &plan.Kernel{Op: "axis_index", DType: ir.F32, Shape: []int{1}}
	cpu := &rt.CPU{}
	want, err := cpu.Compute(&rt.OpCall{Kernel: ka, Out: sbp.Block{Off: []int{3}, Len: []int{1}}})
	require.NoError(t, err)
	out, err := be.Launch(context.Background(), ka, nil, nil, sbp.Block{Off: []int{3}, Len: []int{1}})
	require.NoError(t, err)
	got, err := be.CopyOut(out)
	require.NoError(t, err)
	require.Equal(t, want.Data, got.Data)
	require.Empty(t, be.Fallbacks())
}

// TestBackendWhereMaxGradNonfinite: where (broadcasting its three
// operands, NaN conditions), max_grad (ties share the gradient), nonfinite
// and the local view's to_local/from_local, bit for bit against the CPU.
func TestBackendWhereMaxGradNonfinite(t *testing.T) {
	be := newTestBackend(t)
	rng := rand.New(rand.NewPCG(29, 30))
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		cond := hostTensor(dt, []int{3, 1}, []float64{0, 1, math.NaN()})
		a, b := randTensor(rng, dt, []int{3, 4}), randTensor(rng, dt, []int{4})
		k := &plan.Kernel{Op: "where", DType: dt}
		want := cpuCompute(t, k, cond, a, b)
		k.Shape = want.Shape
		require.Equal(t, want.Data, launch(t, be, k, cond, a, b).Data, "where %s", dt)

		x := hostTensor(dt, []int{2, 4}, []float64{1, 3, 3, 2, -1, -1, -5, -1})
		for axis := -1; axis < 2; axis++ {
			km := &plan.Kernel{Op: "max", DType: dt, Attrs: ir.Attrs{Axis: axis}}
			y := cpuCompute(t, km, x)
			g := randTensor(rng, dt, y.Shape)
			kg := &plan.Kernel{Op: "max_grad", DType: dt, Shape: x.Shape, Attrs: ir.Attrs{Axis: axis}}
			require.Equal(t, cpuCompute(t, kg, x, y, g).Data, launch(t, be, kg, x, y, g).Data, "max_grad %s axis %d", dt, axis)
		}

		for _, v := range []float64{1, math.Inf(-1), math.NaN()} {
			kn := &plan.Kernel{Op: "nonfinite", DType: dt}
			z := randTensor(rng, dt, []int{5})
			zs := hostTensor(dt, []int{5}, append(z.Float64s()[:4], v))
			require.Equal(t, cpuCompute(t, kn, zs).Data, launch(t, be, kn, zs).Data, "nonfinite %s with %v", dt, v)
		}

		blk := randTensor(rng, dt, []int{3, 2})
		for _, c := range []struct {
			op  string
			out []int
			arg *rt.Tensor
		}{{"to_local", []int{4, 3}, blk}, {"from_local", []int{2, 1}, blk}} {
			k := &plan.Kernel{Op: c.op, DType: dt, Shape: c.out, ArgDTypes: []ir.DType{dt}, ArgShapes: [][]int{c.arg.Shape}}
			outBlk := sbp.Block{Off: []int{0, 0}, Len: c.out}
			cpu := &rt.CPU{}
			want, err := cpu.Compute(&rt.OpCall{Kernel: k, Args: []*rt.Tensor{c.arg}, Out: outBlk})
			require.NoError(t, err)
			d, err := be.CopyIn(c.arg)
			require.NoError(t, err)
			res, err := be.Launch(context.Background(), k, []rt.Buffer{d}, nil, outBlk)
			require.NoError(t, err)
			got, err := be.CopyOut(res)
			require.NoError(t, err)
			require.Equal(t, want.Shape, got.Shape)
			require.Equal(t, want.Data, got.Data, "%s %s", c.op, dt)
		}
	}
	require.Empty(t, be.Fallbacks())
}

// Arguments that disagree with the kernel — a concat piece whose other
// dims differ (the copy would write past the output), fewer buffers than
// the plan's argument list — are errors, not device writes out of bounds
// or an index panic.
func TestBackendRejectsArgumentsThePlanDoesNotDescribe(t *testing.T) {
	be := newTestBackend(t)
	a, b := rt.NewTensor(ir.F32, []int{2, 3}), rt.NewTensor(ir.F32, []int{4, 3})
	ba, err := be.CopyIn(a)
	require.NoError(t, err)
	bb, err := be.CopyIn(b)
	require.NoError(t, err)
	defer be.Free(ba)
	defer be.Free(bb)
	k := &plan.Kernel{Op: "concat", DType: ir.F32, Attrs: ir.Attrs{Axis: 1}, Shape: []int{2, 6},
		ArgDTypes: []ir.DType{ir.F32, ir.F32}, ArgShapes: [][]int{{2, 3}, {4, 3}}}
	blocks := []sbp.Block{{Off: []int{0, 0}, Len: []int{2, 3}}, {Off: []int{0, 0}, Len: []int{4, 3}}}
	_, err = be.Launch(context.Background(), k, []rt.Buffer{ba, bb}, blocks, sbp.Block{Off: []int{0, 0}, Len: []int{2, 6}})
	require.ErrorContains(t, err, "concat along axis 1 of [2, 3] and [4, 3]")
	k2 := &plan.Kernel{Op: "add", DType: ir.F32, Shape: []int{2, 3}, ArgDTypes: []ir.DType{ir.F32, ir.F32}, ArgShapes: [][]int{{2, 3}, {2, 3}}}
	_, err = be.Launch(context.Background(), k2, []rt.Buffer{ba}, blocks[:1], sbp.Block{Off: []int{0, 0}, Len: []int{2, 3}})
	require.ErrorContains(t, err, "add of f32: 1 arguments, the plan says 2")
}
