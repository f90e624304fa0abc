package vecmath

import "math"

// Adam's element-wise steps on f32, eight lanes at a time where AVX2 runs
// (adam_amd64.s): the same operations in the same order as the scalar
// loops here, each rounded to f32 (no fused multiply-add), so both paths
// give identical bits. The square root of an f32 rounded through float64
// equals the f32 square root (53 ≥ 2·24 + 2 bits), which VSQRTPS computes.
// On the MLP of bench/torch_mlp.sh (1M parameters) the scalar update was
// a third of the step outside the GEMMs (issue 10): a square root and two
// divisions per element, one element at a time.
//
// The scalar loops round every product explicitly (float32(a*b)): Go may
// otherwise fuse a*b + c into one multiply-add (it does on arm64, and on
// amd64 built with GOAMD64=v3), which the vector kernel does not do, and
// the two paths would differ in the last bit.

// AdamUpdate writes out[i] = p[i]·decay − step·(m[i]/(√v[i]/rootBC2 + eps)).
func AdamUpdate(out, p, m, v []float32, step, rootBC2, eps, decay float32) {
	n := len(out)
	p, m, v = p[:n], m[:n], v[:n]
	k := adamVec(out, p, m, v, step, rootBC2, eps, decay)
	for i := k; i < n; i++ {
		denom := float32(math.Sqrt(float64(v[i])))/rootBC2 + eps
		out[i] = float32(p[i]*decay) - float32(step*(m[i]/denom))
	}
}

// Moment writes out[i] = m[i]·β + g[i]·(1−β), or with square
// m[i]·β + g[i]²·(1−β) (Adam's first and second moments).
func Moment(out, m, g []float32, beta float32, square bool) {
	n := len(out)
	m, g = m[:n], g[:n]
	w := 1 - beta
	k := momentVec(out, m, g, beta, w, square)
	if square {
		for i := k; i < n; i++ {
			out[i] = float32(m[i]*beta) + float32(g[i]*g[i]*w)
		}
		return
	}
	for i := k; i < n; i++ {
		out[i] = float32(m[i]*beta) + float32(g[i]*w)
	}
}
