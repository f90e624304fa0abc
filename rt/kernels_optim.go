package rt

import (
	"math"

	"github.com/meshrun/meshrun/rt/vecmath"
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
		parallelFor(len(d), func(lo, hi int) { vecmath.Moment(d[lo:hi], m[lo:hi], g[lo:hi], beta, sq) })
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
func moment[T Float](out, m, g []T, beta T, square bool) {
	w := 1 - beta
	parallelFor(len(out), func(lo, hi int) {
		if square {
			for i := lo; i < hi; i++ {
				out[i] = T(m[i]*beta) + T(g[i]*g[i]*w)
			}
			return
		}
		for i := lo; i < hi; i++ {
			out[i] = T(m[i]*beta) + T(g[i]*w)
		}
	})
}

func adamUpdate[T Float](out, p, m, v []T, step, rootBC2, eps, decay T) {
	parallelFor(len(out), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			denom := T(math.Sqrt(float64(v[i])))/rootBC2 + eps
			out[i] = T(p[i]*decay) - T(step*(m[i]/denom))
		}
	})
}

// adamUpdate32 is adamUpdate for f32, the same arithmetic, eight lanes at
// a time where AVX2 runs (rt/vecmath): the generic instance ran at 21 ns
// per element on 1M parameters, its float64 square root not narrowed to
// SQRTSS; a scalar f32 loop at 10 (issue 10).
func adamUpdate32(out, p, m, v []float32, step, rootBC2, eps, decay float32) {
	parallelFor(len(out), func(lo, hi int) {
		vecmath.AdamUpdate(out[lo:hi], p[lo:hi], m[lo:hi], v[lo:hi], step, rootBC2, eps, decay)
	})
}
