package vecmath

import (
	"strconv"
	"testing"
)

// TestTranspose: every m, n from 0 to 19 (whole blocks, edges, both) and
// larger shapes of the models, against dst[j·m+i] = src[i·n+j]; nothing
// past m·n is written.
func TestTranspose(t *testing.T) {
	var shapes [][2]int
	for m := 0; m < 20; m++ {
		for n := 0; n < 20; n++ {
			shapes = append(shapes, [2]int{m, n})
		}
	}
	shapes = append(shapes, [2]int{33, 70}, [2]int{256, 128}, [2]int{64, 8}, [2]int{8, 64})
	for _, sh := range shapes {
		m, n := sh[0], sh[1]
		src, dst := make([]float32, m*n), make([]float32, m*n+1)
		for i := range src {
			src[i] = float32(i) + 0.25
		}
		dst[m*n] = -1
		Transpose(dst, src, m, n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				if got := dst[j*m+i]; got != src[i*n+j] {
					t.Fatalf("%d×%d: dst[%d·%d+%d] = %g, want %g", m, n, j, m, i, got, src[i*n+j])
				}
			}
		}
		if dst[m*n] != -1 {
			t.Fatalf("%d×%d: wrote past m·n", m, n)
		}
	}
}

// BenchmarkTranspose: the tiny GPT's and the MLP's matrix shapes.
func BenchmarkTranspose(b *testing.B) {
	for _, sh := range [][2]int{{16, 8}, {256, 32}, {256, 128}, {256, 1024}, {1024, 512}} {
		m, n := sh[0], sh[1]
		src, dst := make([]float32, m*n), make([]float32, m*n)
		b.Run(strconv.Itoa(m)+"x"+strconv.Itoa(n), func(b *testing.B) {
			for range b.N {
				Transpose(dst, src, m, n)
			}
			b.SetBytes(int64(4 * m * n))
		})
	}
}
