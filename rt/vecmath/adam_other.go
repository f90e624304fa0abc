//go:build !amd64

package vecmath

// adamVec and momentVec do no element here (no vector kernels on this
// architecture): the scalar loops do all of them.
func adamVec(out, p, m, v []float32, step, rootBC2, eps, decay float32) int { return 0 }

func momentVec(out, m, g []float32, beta, w float32, square bool) int { return 0 }

func adamFusedVec(pOut, mOut, vOut, p, m, v, g []float32, h AdamHyper, w1, w2 float32) int { return 0 }
