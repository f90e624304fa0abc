package rt

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// Tests of the shortcuts that cut a rank's cost per instruction (issue
// 10): each must give what the general path gives.

// A binary op on two scalars (binaryKernel's scalar path) gives the bits
// the same op gives element by element on two-element operands, one of
// them broadcast (the vector and broadcasting paths), for the special
// values as for random ones, in f32 and f64.
func TestScalarBinaryMatchesTheVectorPath(t *testing.T) {
	special := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 3e38, -3e38, 1e-45, -1e-40, math.Inf(1), math.Inf(-1), math.NaN()}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		special = append(special, rng.NormFloat64()*100)
	}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, op := range []string{"add", "sub", "mul", "div", "minimum", "maximum"} {
			for _, a := range special {
				for _, b := range special {
					x, y := scalarOf(dt, a), scalarOf(dt, b)
					got, err := elementwise(nil, op, x, y)
					require.NoError(t, err)
					// [a, a] op [b, b] (same shapes), and [a, a] op b (broadcast)
					same, err := elementwise(nil, op, pairOf(dt, a), pairOf(dt, b))
					require.NoError(t, err)
					bcast, err := elementwise(nil, op, pairOf(dt, a), y)
					require.NoError(t, err)
					g := got.Float64s()[0]
					for _, want := range []float64{same.Float64s()[0], bcast.Float64s()[0]} {
						if math.IsNaN(want) {
							require.True(t, math.IsNaN(g), "%s %s(%v, %v)", dt, op, a, b)
							continue
						}
						require.Equal(t, math.Float64bits(want), math.Float64bits(g), "%s %s(%v, %v): %v, want %v", dt, op, a, b, g, want)
					}
				}
			}
		}
	}
}

func scalarOf(dt ir.DType, v float64) *Tensor {
	t := NewTensor(dt, nil)
	setScalar(t, v)
	return t
}

func pairOf(dt ir.DType, v float64) *Tensor {
	t := NewTensor(dt, []int{2})
	storeFloat64s(t, []float64{v, v})
	return t
}

// A rank's CPU finds each kernel by the plan's kernel, and runs the op
// the kernel names now: a kernel whose op changed runs the new op, and
// a cache that reached its bound starts over.
func TestKernelCacheFollowsTheOp(t *testing.T) {
	c := NewRankCPU(DefaultBLAS())
	x, y := FromSlice([]int{2}, []float32{5, 3}), FromSlice([]int{2}, []float32{2, 4})
	k := func(op string) *plan.Kernel {
		return &plan.Kernel{Op: op, DType: ir.F32, Shape: []int{2}, ArgDTypes: []ir.DType{ir.F32, ir.F32}, ArgShapes: [][]int{{2}, {2}}}
	}
	run := func(k *plan.Kernel) []float32 {
		out, err := c.Launch(context.Background(), k, []Buffer{x, y}, nil, sbp.Block{Off: []int{0}, Len: []int{2}})
		require.NoError(t, err)
		return append([]float32(nil), out.(*Tensor).Data.([]float32)...)
	}
	kernels := make([]*plan.Kernel, 300) // more than fit the table at first: it grows
	ops := []string{"add", "sub", "mul", "maximum"}
	want := map[string][]float32{"add": {7, 7}, "sub": {3, -1}, "mul": {10, 12}, "maximum": {5, 4}}
	for i := range kernels {
		kernels[i] = k(ops[i%len(ops)])
	}
	for range 2 {
		for i, kn := range kernels {
			require.Equal(t, want[ops[i%len(ops)]], run(kn), "kernel %d", i)
		}
	}
	kernels[0].Op = "mul" // the same kernel, another op
	require.Equal(t, want["mul"], run(kernels[0]))
	for range kernelCacheMax {
		c.kernelFor(k("add"))
	}
	require.Less(t, c.kernels.used, kernelCacheMax, "the cache started over at its bound")
	for i, kn := range kernels[1:] {
		require.Equal(t, want[ops[(i+1)%len(ops)]], run(kn), "kernel %d after the cache started over", i+1)
	}
	_, err := c.Launch(context.Background(), k("no_such_op"), []Buffer{x, y}, nil, sbp.Block{Off: []int{0}, Len: []int{2}})
	require.ErrorContains(t, err, "no CPU kernel for op no_such_op")
}

// A pool gives back, for each of many sizes (more than its direct-mapped
// list cache has entries, so entries collide and are replaced), a buffer
// freed at that size and no other.
func TestPoolListsOfManySizes(t *testing.T) {
	p := newArena(0)
	const sizes = 400
	freed := map[int]*Tensor{}
	for n := 1; n <= sizes; n++ {
		t0 := p.zeroed(ir.F32, []int{n})
		freed[n] = t0
	}
	for n := sizes; n >= 1; n-- { // freed in the other order
		p.put(freed[n])
	}
	for round := range 2 {
		for n := 1; n <= sizes; n++ {
			got := p.zeroed(ir.F32, []int{n})
			require.Same(t, freed[n], got, "round %d, size %d", round, n)
			require.Len(t, got.Data, n)
		}
		for n := 1; n <= sizes; n++ {
			p.put(freed[n])
		}
	}
	require.Nil(t, p.reuse(ir.F32, []int{sizes + 1}), "no list for a size never freed")
}

// A source loaded from a file is this rank's block of the file's own
// storage, made by the first execution and handed out again by the next
// (the same view, the file's data unchanged), and the program computes
// the same from it every time.
func TestLoadedSourceMadeOnce(t *testing.T) {
	dir := t.TempDir()
	data := []float32{1, 2, 3, 4, 5, 6}
	require.NoError(t, npy.WriteFile(filepath.Join(dir, "x.npy"), []int{2, 3}, data))
	src := "mesh M = [a=1]\ninput x : f32[2, 3] = load(\"x.npy\")\ny = x * x\noutput y\n"
	g, err := lang.CheckSource(filepath.Join(dir, "x.mesh"), []byte(src), lang.CheckOptions{Dir: dir})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	w, err := NewWorker(context.Background(), p.Exec, 0, NewRankCPU(DefaultBLAS()), NewInProc(1)[0], Options{})
	require.NoError(t, err)
	var first *Tensor
	for run := range 3 {
		res, err := w.Run(context.Background(), nil, time.Now())
		require.NoError(t, err, "run %d", run)
		require.Equal(t, []float32{1, 4, 9, 16, 25, 36}, res.Outputs[0].(*Tensor).Data, "run %d", run)
		var views []*Tensor
		for _, v := range w.loaded {
			if v != nil {
				views = append(views, v)
			}
		}
		require.Len(t, views, 1, "run %d: one loaded source", run)
		require.True(t, views[0].view, "a view of the file's storage")
		require.Equal(t, data, views[0].Data, "run %d: the file's data unchanged", run)
		if run == 0 {
			first = views[0]
		}
		require.Same(t, first, views[0], "run %d reuses the first run's block", run)
	}
}

// A transpose that swaps two adjacent dims, not the last (swapRuns), gives
// what an element-by-element walk of the permutation gives, for ranks 3 to
// 5, every such pair of dims, f32 and f64; other permutations are not
// taken for such a swap.
func TestSwapRunsMatchesTheElementWalk(t *testing.T) {
	shapes := [][]int{{3, 5, 2}, {16, 16, 4, 8}, {2, 3, 4, 5}, {1, 7, 1, 3}, {2, 3, 2, 3, 2}}
	for _, shape := range shapes {
		r := len(shape)
		for k := 0; k+1 < r-1; k++ {
			perm := make([]int, r)
			for i := range perm {
				perm[i] = i
			}
			perm[k], perm[k+1] = k+1, k
			_, _, _, _, ok := swapsAdjacent(shape, perm)
			require.True(t, ok, "%v %v", shape, perm)
			for _, dt := range []ir.DType{ir.F32, ir.F64} {
				x := NewTensor(dt, shape)
				vals := make([]float64, x.Numel())
				for i := range vals {
					vals[i] = float64(i) + 0.5
				}
				storeFloat64s(x, vals)
				got := transpose(nil, x, perm)
				require.Equal(t, walkPermute(shape, perm, vals), got.Float64s(), "%s %v %v", dt, shape, perm)
			}
		}
	}
	for _, c := range []struct {
		perm []int
		ok   bool
	}{{[]int{0, 1, 2}, false}, {[]int{0, 2, 1}, false}, {[]int{1, 0, 2, 3}, true}, {[]int{2, 1, 0, 3}, false},
		{[]int{0, 2, 1, 3, 4}, true}, {[]int{1, 0, 3, 2, 4}, false}, {[]int{1, 2, 0, 3}, false}} {
		_, _, _, _, ok := swapsAdjacent([]int{2, 3, 4, 5, 6}[:len(c.perm)], c.perm)
		require.Equal(t, c.ok, ok, "%v", c.perm)
	}
}

// walkPermute is vals (of shape) permuted by perm, one element at a time:
// out[idx] = x[idx permuted back].
func walkPermute(shape, perm []int, vals []float64) []float64 {
	r := len(shape)
	oshape := make([]int, r)
	for i, p := range perm {
		oshape[i] = shape[p]
	}
	out := make([]float64, len(vals))
	idx := make([]int, r)
	for o := range out {
		rem := o
		for d := r - 1; d >= 0; d-- {
			idx[d] = rem % oshape[d]
			rem /= oshape[d]
		}
		in := 0
		for d := 0; d < r; d++ { // input dim d is output dim where perm == d
			for od, p := range perm {
				if p == d {
					in = in*shape[d] + idx[od]
				}
			}
		}
		out[o] = vals[in]
	}
	return out
}

// Small loops make no closure: exp, tanh, sigmoid, log (through float64),
// the unfused Adam ops and the f64 update on a rank's arena allocate
// nothing once their output's buffer is back in the arena.
func TestSmallLoopsAllocateNothing(t *testing.T) {
	p := newArena(0)
	vec := func(dt ir.DType, v float64) *Tensor {
		x := NewTensor(dt, []int{64})
		vals := make([]float64, 64)
		for i := range vals {
			vals[i] = v + float64(i)/64
		}
		storeFloat64s(x, vals)
		return x
	}
	for _, op := range []string{"exp", "tanh", "sigmoid", "log", "gelu"} {
		x := vec(ir.F32, 0.5)
		p.put(unary(p, op, x))
		require.Zero(t, testing.AllocsPerRun(50, func() { p.put(unary(p, op, x)) }), op)
	}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		m, g, v, w := vec(dt, 0.1), vec(dt, -0.2), vec(dt, 0.3), vec(dt, 1)
		s := func(x float64) *Tensor { return scalarOf(dt, x) }
		for _, c := range []struct {
			op   string
			args []*Tensor
			f    func(*OpCall) *Tensor
		}{
			{"adam_moment", []*Tensor{m, g, s(0.9)}, adamMoment},
			{"adam_moment2", []*Tensor{v, g, s(0.999)}, adamMoment},
			{"adam_update", []*Tensor{w, m, v, s(0.01), s(0.99), s(1e-8), s(1)}, adamStep},
		} {
			call := &OpCall{Kernel: &plan.Kernel{Op: c.op, DType: dt}, Args: c.args, pool: p}
			p.put(c.f(call))
			require.Zero(t, testing.AllocsPerRun(50, func() { p.put(c.f(call)) }), "%s %s", c.op, dt)
		}
		fused := []*Tensor{w, m, v, g, s(0.9), s(0.999), s(0.01), s(0.99), s(1e-8), s(1)}
		put := func(r [3]*Tensor) {
			for _, x := range r {
				p.put(x)
			}
		}
		r, ok := adamFused(p, fused, []int{64}, nil)
		require.True(t, ok)
		put(r)
		require.Zero(t, testing.AllocsPerRun(50, func() { r, _ := adamFused(p, fused, []int{64}, nil); put(r) }), "adam_fused %s", dt)
	}
}
