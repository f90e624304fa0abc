//go:build amd64

package asmgemm

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSgemmAgainstNaive checks Sgemm against a float64 triple loop on
// shapes that exercise full tiles, ragged edges in m and n, several kc
// blocks (k > 256), several mc blocks (m > 96), strides wider than the
// matrices, and k = 0.
func TestSgemmAgainstNaive(t *testing.T) {
	for _, kn := range []*Kernel{AVX2, AVX512} {
		if !kn.Supported() {
			t.Logf("%s: not on this CPU", kn.Name)
			continue
		}
		t.Run(kn.Name, func(t *testing.T) { checkSgemm(t, kn) })
	}
}

func checkSgemm(t *testing.T, kn *Kernel) {
	for _, sh := range [][3]int{{6, 16, 1}, {1, 1, 1}, {7, 17, 5}, {64, 512, 512}, {256, 37, 32}, {100, 70, 600}, {13, 33, 0}, {12, 32, 3}, {25, 65, 257}} {
		m, n, k := sh[0], sh[1], sh[2]
		lda, ldb, ldc := k+3, n+5, n+2
		a, b := make([]float32, m*lda), make([]float32, k*ldb+1)
		for i := range a {
			a[i] = float32(math.Sin(float64(i)))
		}
		for i := range b {
			b[i] = float32(math.Cos(float64(i) * 0.7))
		}
		c := make([]float32, m*ldc)
		for i := range c {
			c[i] = 99 // overwritten inside each row, kept past n
		}
		kn.Sgemm(m, n, k, a, lda, b, ldb, c, ldc)
		for i := 0; i < m; i++ {
			for j := 0; j < ldc; j++ {
				if j >= n {
					require.Equal(t, float32(99), c[i*ldc+j], "%v: C[%d, %d] past n was written", sh, i, j)
					continue
				}
				want := 0.0
				for p := 0; p < k; p++ {
					want += float64(a[i*lda+p]) * float64(b[p*ldb+j])
				}
				require.InDelta(t, want, c[i*ldc+j], 1e-5*float64(k+1), "%v at [%d, %d]", sh, i, j)
			}
		}
	}
}
