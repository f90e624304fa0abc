package rt

import (
	"context"
	"fmt"
	"math"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt/vecmath"
	"github.com/meshrun/meshrun/sbp"
)

// Kernels of the fused optimizer ops (registered with their rules in ops/optim.go).

func init() {
	registerCPU(pure(adamMoment), "adam_moment", "adam_moment2")
	registerCPU(pure(adamStep), "adam_update")
}

// adamMoment is m·β + g·(1−β), or with the square g²·(1−β) (Adam's
// first and second moments).
func adamMoment(call *OpCall) *Tensor {
	a := call.Args
	out := uninitialised(call.pool, a[0].DType, a[0].Shape)
	sq := call.Kernel.Op == "adam_moment2"
	switch d := out.Data.(type) {
	case []float32: // eight lanes at a time (rt/vecmath), the same bits as moment
		m, g, beta := a[0].Data.([]float32), a[1].Data.([]float32), a[2].Data.([]float32)[0]
		parallelWith(len(d), f32Slices{out: d, m: m, v: g, h: [4]float32{beta}, square: sq}, func(a f32Slices, lo, hi int) {
			vecmath.Moment(a.out[lo:hi], a.m[lo:hi], a.v[lo:hi], a.h[0], a.square)
		})
	case []float64:
		moment(d, a[0].Data.([]float64), a[1].Data.([]float64), a[2].Data.([]float64)[0], sq)
	}
	return out
}

// adamStep is the parameter update from the moments (adamUpdate).
func adamStep(call *OpCall) *Tensor {
	a := call.Args
	out := uninitialised(call.pool, a[0].DType, a[0].Shape)
	switch d := out.Data.(type) {
	case []float32:
		s := func(i int) float32 { return a[i].Data.([]float32)[0] }
		adamUpdate32(d, a[0].Data.([]float32), a[1].Data.([]float32), a[2].Data.([]float32), s(3), s(4), s(5), s(6))
	case []float64:
		s := func(i int) float64 { return a[i].Data.([]float64)[0] }
		adamUpdate(d, a[0].Data.([]float64), a[1].Data.([]float64), a[2].Data.([]float64), s(3), s(4), s(5), s(6))
	}
	return out
}

// moment and adamUpdate round every product (T(a*b)): Go may fuse a*b + c
// into one multiply-add (on arm64, and on amd64 with GOAMD64=v3), which
// neither rt/vecmath's kernels nor the CUDA backend's (--fmad=false) do,
// and the results would differ in the last bit.
//
// A small loop runs inline: the closure parallelFor's goroutines need is
// made only on the parallel path (a closure in a generic function holds
// its dictionary, and one handed to parallelFor escapes: an allocation
// per call).
func moment[T Float](out, m, g []T, beta T, square bool) {
	if len(out) <= parallelGrain {
		momentRun(out, m, g, beta, square)
		return
	}
	parallelFor(len(out), func(lo, hi int) { momentRun(out[lo:hi], m[lo:hi], g[lo:hi], beta, square) })
}

func momentRun[T Float](out, m, g []T, beta T, square bool) {
	w := 1 - beta
	m, g = m[:len(out)], g[:len(out)]
	if square {
		for i := range out {
			out[i] = T(m[i]*beta) + T(g[i]*g[i]*w)
		}
		return
	}
	for i := range out {
		out[i] = T(m[i]*beta) + T(g[i]*w)
	}
}

func adamUpdate[T Float](out, p, m, v []T, step, rootBC2, eps, decay T) {
	if len(out) <= parallelGrain {
		adamUpdateRun(out, p, m, v, step, rootBC2, eps, decay)
		return
	}
	parallelFor(len(out), func(lo, hi int) {
		adamUpdateRun(out[lo:hi], p[lo:hi], m[lo:hi], v[lo:hi], step, rootBC2, eps, decay)
	})
}

func adamUpdateRun[T Float](out, p, m, v []T, step, rootBC2, eps, decay T) {
	p, m, v = p[:len(out)], m[:len(out)], v[:len(out)]
	for i := range out {
		denom := T(math.Sqrt(float64(v[i])))/rootBC2 + eps
		out[i] = T(p[i]*decay) - T(step*(m[i]/denom))
	}
}

// f32Slices is the slices and scalars an f32 optimizer loop reads
// (parallelWith): out, p, m, v (or m, g for a moment) and step, root_bc2,
// eps, decay (or β).
type f32Slices struct {
	out, p, m, v []float32
	h            [4]float32
	square       bool
}

// adamUpdate32 is adamUpdate for f32, the same arithmetic, eight lanes at
// a time where AVX2 runs (rt/vecmath): the generic instance ran at 21 ns
// per element on 1M parameters, its float64 square root not narrowed to
// SQRTSS; a scalar f32 loop at 10 (issue 10).
func adamUpdate32(out, p, m, v []float32, step, rootBC2, eps, decay float32) {
	parallelWith(len(out), f32Slices{out: out, p: p, m: m, v: v, h: [4]float32{step, rootBC2, eps, decay}}, func(a f32Slices, lo, hi int) {
		vecmath.AdamUpdate(a.out[lo:hi], a.p[lo:hi], a.m[lo:hi], a.v[lo:hi], a.h[0], a.h[1], a.h[2], a.h[3])
	})
}

// Kernels with several results (plan.Instr.Outs): lower's Adam fusion
// (lower/fuse_adam.go) makes adam_fused, which writes p', m' and v' in one
// pass where adam_moment, adam_moment2 and adam_update take three.

// ResultsLauncher is a Backend that runs a kernel with several results in
// one launch. LaunchResults runs such a kernel on a backend without it as
// the kernels it fuses, into as many buffers.
type ResultsLauncher interface {
	// LaunchResults is Launch for a kernel with n results, every one of
	// them of block out.
	LaunchResults(ctx context.Context, k *plan.Kernel, args []Buffer, in []sbp.Block, out sbp.Block, n int) ([]Buffer, error)
}

// LaunchResults runs kernel k with n results on be: in one launch where
// be has a kernel for it (the CPU and CUDA backends have adam_fused), else
// as the separate kernels it fuses. Either way the
// instruction's results are n buffers of block out, held from the
// instruction on, as the plan's memory replay counts them; the
// intermediate results of the separate kernels are those buffers.
func LaunchResults(ctx context.Context, be Backend, k *plan.Kernel, args []Buffer, in []sbp.Block, out sbp.Block, n int) ([]Buffer, error) {
	if rl, ok := be.(ResultsLauncher); ok {
		return rl.LaunchResults(ctx, k, args, in, out, n)
	}
	if k.Op != "adam_fused" || n != 3 || len(args) != 10 || len(in) != 10 {
		return nil, fmt.Errorf("%s: no kernel for %s with %d results on the %s backend", k.Op, k.Op, n, be.Name())
	}
	return adamUnfused(ctx, be, k, args, in, out)
}

// adamUnfused runs adam_fused as adam_moment, adam_moment2 and
// adam_update (the arguments as fuse_adam.go orders them: p, m, v, g,
// β1, β2, step, root_bc2, eps, decay).
func adamUnfused(ctx context.Context, be Backend, k *plan.Kernel, args []Buffer, in []sbp.Block, out sbp.Block) ([]Buffer, error) {
	part := func(op string, idx ...int) *plan.Kernel {
		pk := &plan.Kernel{Op: op, DType: k.DType, Shape: k.Shape}
		for _, i := range idx {
			pk.ArgDTypes = append(pk.ArgDTypes, k.ArgDTypes[i])
			pk.ArgShapes = append(pk.ArgShapes, k.ArgShapes[i])
		}
		return pk
	}
	pick := func(idx ...int) ([]Buffer, []sbp.Block) {
		var bs []Buffer
		var bl []sbp.Block
		for _, i := range idx {
			bs, bl = append(bs, args[i]), append(bl, in[i])
		}
		return bs, bl
	}
	ma, mb := pick(1, 3, 4)
	nm, err := be.Launch(ctx, part("adam_moment", 1, 3, 4), ma, mb, out)
	if err != nil {
		return nil, err
	}
	va, vb := pick(2, 3, 5)
	nv, err := be.Launch(ctx, part("adam_moment2", 2, 3, 5), va, vb, out)
	if err != nil {
		be.Free(nm)
		return nil, err
	}
	ua, ub := pick(0, 1, 2, 6, 7, 8, 9)
	ua[1], ua[2], ub[1], ub[2] = nm, nv, out, out
	np, err := be.Launch(ctx, part("adam_update", 0, 1, 2, 6, 7, 8, 9), ua, ub, out)
	if err != nil {
		be.Free(nm)
		be.Free(nv)
		return nil, err
	}
	return []Buffer{np, nm, nv}, nil
}

// LaunchResults implements ResultsLauncher: the CPU has adam_fused.
func (c *CPU) LaunchResults(_ context.Context, k *plan.Kernel, args []Buffer, _ []sbp.Block, out sbp.Block, n int) ([]Buffer, error) {
	return c.adamFused(k, args, out, n, nil)
}

// LaunchDonated implements DonatingLauncher: adam_fused writes p', m',
// v' over the arguments donate names, in place (see adamFused).
func (c *CPU) LaunchDonated(_ context.Context, k *plan.Kernel, args []Buffer, _ []sbp.Block, out sbp.Block, n int, donate []int) ([]Buffer, error) {
	return c.adamFused(k, args, out, n, donate)
}

// adamFused runs adam_fused with its results written over the arguments
// donate names (nil: every result fresh).
func (c *CPU) adamFused(k *plan.Kernel, args []Buffer, out sbp.Block, n int, donate []int) ([]Buffer, error) {
	if k.Op != "adam_fused" || n != 3 || len(args) != 10 {
		return nil, fmt.Errorf("no CPU kernel for %s with %d results", k.Op, n)
	}
	if err := AdamDonation(donate); err != nil {
		return nil, err
	}
	var ts [10]*Tensor // on the stack, as adamFused's results (two allocations a step per parameter)
	if err := adamArgs(k, args, out, ts[:]); err != nil {
		return nil, err
	}
	res, ok := adamFused(c.alloc(), ts[:], out.Len, donate)
	if !ok {
		return nil, fmt.Errorf("adam_fused on %s: only f32 and f64 (lower fuses no other dtype)", k.DType)
	}
	return []Buffer{res[0], res[1], res[2]}, nil
}

// AdamDonation checks adam_fused's donations as a backend is handed them
// (nil, or -1 or k for result k): p', m', v' are written only over p, m,
// v, each over its own (ops' InPlace for adam_fused; the plan verifier
// has checked as much, a backend checks again before it writes).
func AdamDonation(donate []int) error {
	if donate != nil && len(donate) != 3 {
		return fmt.Errorf("adam_fused: %d donations for 3 results", len(donate))
	}
	for k, a := range donate {
		if a >= 0 && a != k {
			return fmt.Errorf("adam_fused: result %d written over argument %d, not its own (%d)", k+1, a+1, k+1)
		}
	}
	return nil
}

// adamArgs puts adam_fused's arguments in ts (as long as args) as host
// tensors, checked: four tensors of the result's block, six scalars, of
// the kernel's dtype.
func adamArgs(k *plan.Kernel, args []Buffer, out sbp.Block, ts []*Tensor) error {
	for i, a := range args {
		t, err := host(a)
		if err != nil {
			return err
		}
		if t.DType != k.DType || (i < 4 && t.Numel() != numel(out.Len)) || (i >= 4 && t.Numel() != 1) {
			return fmt.Errorf("adam_fused: argument %d is %s%v, the kernel's results %s%v", i+1, t.DType, t.Shape, k.DType, out.Len)
		}
		ts[i] = t
	}
	return nil
}

// adamFused computes p', m', v' from (p, m, v, g, β1, β2, step,
// root_bc2, eps, decay): bit for bit adam_moment, adam_moment2 and
// adam_update in turn (vecmath.AdamFused for f32; adamFusedLoop, the
// same expressions as moment and adamUpdate, for f64). Result k is
// written into argument donate[k] where donate (nil: none) says so
// (plan.Instr.Donate: p' over p, m' over m, v' over v); both loops read
// each element of p, m and v before writing it. Not ok for another
// dtype.
func adamFused(pool *hostPool, a []*Tensor, shape []int, donate []int) (out [3]*Tensor, ok bool) {
	dt := a[0].DType
	if dt != ir.F32 && dt != ir.F64 {
		return out, false // (before a donated argument is taken)
	}
	for k := range out {
		if k < len(donate) && donate[k] >= 0 {
			out[k] = a[donate[k]]
			continue
		}
		out[k] = uninitialised(pool, dt, shape)
	}
	switch d := out[0].Data.(type) {
	case []float32:
		f := func(i int) []float32 { return a[i].Data.([]float32) }
		s := func(i int) float32 { return f(i)[0] }
		h := vecmath.AdamHyper{Beta1: s(4), Beta2: s(5), Step: s(6), RootBC2: s(7), Eps: s(8), Decay: s(9)}
		nm, nv := out[1].Data.([]float32), out[2].Data.([]float32)
		p, m, v, g := f(0), f(1), f(2), f(3)
		if len(d) <= parallelGrain { // no closure to allocate (see binaryKernel)
			vecmath.AdamFused(d, nm, nv, p, m, v, g, h)
			break
		}
		parallelFor(len(d), func(lo, hi int) {
			vecmath.AdamFused(d[lo:hi], nm[lo:hi], nv[lo:hi], p[lo:hi], m[lo:hi], v[lo:hi], g[lo:hi], h)
		})
	case []float64:
		f := func(i int) []float64 { return a[i].Data.([]float64) }
		adamFusedLoop(d, out[1].Data.([]float64), out[2].Data.([]float64), f(0), f(1), f(2), f(3), f(4)[0], f(5)[0], [4]float64{f(6)[0], f(7)[0], f(8)[0], f(9)[0]})
	default:
		return out, false
	}
	return out, true
}

// adamFusedLoop is moment (β1), moment squared (β2) and adamUpdate
// (hyper: step, root_bc2, eps, decay) in one loop, each product rounded
// as they round it. np, nm, nv may be p, m, v themselves (donation):
// element i of each is read before it is written.
func adamFusedLoop[T Float](np, nm, nv, p, m, v, g []T, b1, b2 T, hyper [4]T) {
	if len(np) <= parallelGrain { // no closure (see moment)
		adamFusedRun(np, nm, nv, p, m, v, g, b1, b2, hyper)
		return
	}
	parallelFor(len(np), func(lo, hi int) {
		adamFusedRun(np[lo:hi], nm[lo:hi], nv[lo:hi], p[lo:hi], m[lo:hi], v[lo:hi], g[lo:hi], b1, b2, hyper)
	})
}

func adamFusedRun[T Float](np, nm, nv, p, m, v, g []T, b1, b2 T, hyper [4]T) {
	w1, w2 := 1-b1, 1-b2
	step, rootBC2, eps, decay := hyper[0], hyper[1], hyper[2], hyper[3]
	for i := range np {
		nm[i] = T(m[i]*b1) + T(g[i]*w1)
		nv[i] = T(v[i]*b2) + T(g[i]*g[i]*w2)
		denom := T(math.Sqrt(float64(nv[i])))/rootBC2 + eps
		np[i] = T(p[i]*decay) - T(step*(nm[i]/denom))
	}
}
