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

// AdamHyper are the scalars of one fused Adam step (AdamFused): the two
// moments' betas and the update's step size, root of the second bias
// correction, epsilon and weight decay factor, as the three separate ops
// take them.
type AdamHyper struct {
	Beta1, Beta2, Step, RootBC2, Eps, Decay float32
}

// AdamFused writes, in one pass over p, m, v and g, what Moment (β1),
// Moment with the square (β2) and AdamUpdate on their results write in
// three: mOut = m·β1 + g·(1−β1), vOut = v·β2 + g²·(1−β2), pOut =
// p·decay − step·(mOut/(√vOut/rootBC2 + eps)), bit for bit. The three
// passes stream ten slices through memory (read m, g; read v, g; read p
// and both new moments), this one seven; on the MLP's parameters,
// beyond the caches, the optimizer is bound by that traffic (issue 10).
// pOut, mOut and vOut may be p, m and v themselves (buffer donation: the
// update in place), since element i of each input is read before
// element i of its own output is written, in the vector body as in the
// tail. No output may overlap another input: mOut[i] and vOut[i] are
// stored before v[i] and p[i] are read (mOut over v, or over p, would
// change the update).
func AdamFused(pOut, mOut, vOut, p, m, v, g []float32, h AdamHyper) {
	n := len(pOut)
	mOut, vOut, p, m, v, g = mOut[:n], vOut[:n], p[:n], m[:n], v[:n], g[:n]
	w1, w2 := 1-h.Beta1, 1-h.Beta2 // in f32, as Moment forms them
	k := adamFusedVec(pOut, mOut, vOut, p, m, v, g, h, w1, w2)
	for i := k; i < n; i++ {
		nm := float32(m[i]*h.Beta1) + float32(g[i]*w1)
		nv := float32(v[i]*h.Beta2) + float32(g[i]*g[i]*w2)
		denom := float32(math.Sqrt(float64(nv)))/h.RootBC2 + h.Eps
		mOut[i], vOut[i] = nm, nv
		pOut[i] = float32(p[i]*h.Decay) - float32(h.Step*(nm/denom))
	}
}
