package vecmath

// Transpose writes the n×m transpose of the m×n row-major matrix src into
// dst: dst[j·m + i] = src[i·n + j]. Where AVX2 runs, whole 8×8 blocks go
// through registers (eight row loads, 24 shuffles, eight column stores:
// transpose_amd64.s); the edges of a matrix whose sides are not multiples
// of 8, and every element elsewhere, take the scalar loop. The element-
// wise walk (rt's 16×16 tiles) cost 1.5–3 ns per element on the tiny
// GPT's and the MLP's matrices, 10–20% of their steps (issue 10).
func Transpose(dst, src []float32, m, n int) {
	dst, src = dst[:m*n], src[:m*n]
	mb, nb := 0, 0
	if hasAVX2 {
		mb, nb = m&^7, n&^7
		// along dst's rows: the block below in src fills the other half of
		// the cache lines the last one wrote, and the eight rows of dst are
		// written front to back
		for j := 0; j < nb; j += 8 {
			for i := 0; i < mb; i += 8 {
				transpose8x8(&dst[j*m+i], m, &src[i*n+j], n)
			}
		}
	}
	for i := 0; i < m; i++ { // columns nb.. of every row
		row := src[i*n : (i+1)*n]
		for j := nb; j < n; j++ {
			dst[j*m+i] = row[j]
		}
	}
	for i := mb; i < m; i++ { // rows mb.., columns below nb
		row := src[i*n : i*n+nb]
		for j, v := range row {
			dst[j*m+i] = v
		}
	}
}
