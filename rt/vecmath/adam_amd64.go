package vecmath

// adamAVX and momentAVX (adam_amd64.s) run AdamUpdate's and Moment's
// loops on n elements, n a multiple of 8.
//
//go:noescape
func adamAVX(out, p, m, v *float32, n int, step, rootBC2, eps, decay float32)

//go:noescape
func momentAVX(out, m, gr *float32, n int, beta, w float32, square bool)

// adamVec runs the vector kernel on the leading multiple of 8 elements
// and returns how many it did.
func adamVec(out, p, m, v []float32, step, rootBC2, eps, decay float32) int {
	n := len(out) &^ 7
	if !hasAVX2 || n == 0 {
		return 0
	}
	adamAVX(&out[0], &p[0], &m[0], &v[0], n, step, rootBC2, eps, decay)
	return n
}

// momentVec is adamVec for Moment.
func momentVec(out, m, g []float32, beta, w float32, square bool) int {
	n := len(out) &^ 7
	if !hasAVX2 || n == 0 {
		return 0
	}
	momentAVX(&out[0], &m[0], &g[0], n, beta, w, square)
	return n
}

// adamFusedAVX (adam_amd64.s) runs AdamFused's loop on n elements, n a
// multiple of 8.
//
//go:noescape
func adamFusedAVX(pOut, mOut, vOut, p, m, v, gr *float32, n int, b1, w1, b2, w2, step, rootBC2, eps, decay float32)

// adamFusedVec is adamVec for AdamFused.
func adamFusedVec(pOut, mOut, vOut, p, m, v, g []float32, h AdamHyper, w1, w2 float32) int {
	n := len(pOut) &^ 7
	if !hasAVX2 || n == 0 {
		return 0
	}
	adamFusedAVX(&pOut[0], &mOut[0], &vOut[0], &p[0], &m[0], &v[0], &g[0], n, h.Beta1, w1, h.Beta2, w2, h.Step, h.RootBC2, h.Eps, h.Decay)
	return n
}
