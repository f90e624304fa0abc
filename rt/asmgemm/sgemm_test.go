//go:build amd64

package asmgemm

import (
	"fmt"
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

// TestSgemmTAgainstNaive: SgemmT with either operand stored transposed
// (strides wider than the stored rows) against a float64 triple loop over
// the logical operands, on the shapes of checkSgemm, and bit for bit what
// Sgemm gives on the same operands stored untransposed (the same panels,
// so the same sums in the same order).
func TestSgemmTAgainstNaive(t *testing.T) {
	for _, kn := range []*Kernel{AVX2, AVX512} {
		if !kn.Supported() {
			t.Logf("%s: not on this CPU", kn.Name)
			continue
		}
		for _, sh := range [][3]int{{6, 16, 1}, {1, 1, 1}, {7, 17, 5}, {64, 512, 512}, {256, 37, 32}, {100, 70, 600}, {13, 33, 0}, {25, 65, 257}} {
			m, n, k := sh[0], sh[1], sh[2]
			A, B := make([]float32, m*k), make([]float32, k*n) // logical, dense
			for i := range A {
				A[i] = float32(math.Sin(float64(i)))
			}
			for i := range B {
				B[i] = float32(math.Cos(float64(i) * 0.7))
			}
			ref := make([]float32, m*n)
			kn.Sgemm(m, n, k, A, k, B, n, ref, n)
			for _, tr := range [][2]bool{{true, false}, {false, true}, {true, true}} {
				a, lda := A, k
				if tr[0] { // stored k×m with row stride m+3
					lda = m + 3
					a = make([]float32, max(k*lda, 1))
					for i := 0; i < m; i++ {
						for p := 0; p < k; p++ {
							a[p*lda+i] = A[i*k+p]
						}
					}
				}
				b, ldb := B, n
				if tr[1] { // stored n×k with row stride k+2
					ldb = k + 2
					b = make([]float32, n*ldb)
					for p := 0; p < k; p++ {
						for j := 0; j < n; j++ {
							b[j*ldb+p] = B[p*n+j]
						}
					}
				}
				c := make([]float32, m*n)
				kn.SgemmT(tr[0], tr[1], m, n, k, a, lda, b, ldb, c, n)
				for i := 0; i < m; i++ {
					for j := 0; j < n; j++ {
						want := 0.0
						for p := 0; p < k; p++ {
							want += float64(A[i*k+p]) * float64(B[p*n+j])
						}
						require.InDelta(t, want, c[i*n+j], 1e-5*float64(k+1), "%s %v trans %v at [%d, %d]", kn.Name, sh, tr, i, j)
						require.Equal(t, ref[i*n+j], c[i*n+j], "%s %v trans %v at [%d, %d]: not Sgemm's bits", kn.Name, sh, tr, i, j)
					}
				}
			}
		}
	}
}

// TestInPlaceMatchesPacked: A is read in place (inPlace: by the rows
// kernel, or the cols kernel when stored transposed), and B too when it is
// small or C short. On shapes with full and ragged row tiles, n = 32, n <
// 32 and several panels with a ragged last one, one and several kc
// blocks, B's stride equal to n or wider, B read in place, packed ([100,
// 70, 300]) and stored transposed, A stored either way, C is bit for bit
// the packed path's (useRows off: the same sums in the same order) and
// within the f32 bound of a float64 loop; C's elements past n are never
// written.
func TestInPlaceMatchesPacked(t *testing.T) {
	defer func() { useRows = true }()
	for _, kn := range []*Kernel{AVX2, AVX512} {
		if !kn.Supported() {
			t.Logf("%s: not on this CPU", kn.Name)
			continue
		}
		checkInPlace(t, kn)
	}
}

func checkInPlace(t *testing.T, kn *Kernel) {
	for _, sh := range [][3]int{{256, 32, 128}, {12, 32, 1}, {25, 32, 300}, {36, 20, 257}, {11, 32, 7}, {256, 32, 32}, {100, 1, 600}, {37, 70, 260}, {24, 64, 5}, {60, 37, 33}, {6, 16, 9}, {13, 17, 40}, {100, 70, 300}} {
		m, n, k := sh[0], sh[1], sh[2]
		for _, ldb := range []int{n, n + 5} {
			for _, tb := range []bool{false, true} {
				lda := k + 3
				a := make([]float32, m*lda)
				for i := range a {
					a[i] = float32(math.Sin(float64(i)))
				}
				B := make([]float32, k*n) // logical, dense
				for i := range B {
					B[i] = float32(math.Cos(float64(i) * 0.7))
				}
				b, sb := make([]float32, k*ldb), ldb
				for p := 0; p < k; p++ {
					copy(b[p*ldb:], B[p*n:(p+1)*n])
				}
				if tb { // stored n×k, row stride k+2
					sb = k + 2
					b = make([]float32, n*sb)
					for p := 0; p < k; p++ {
						for j := 0; j < n; j++ {
							b[j*sb+p] = B[p*n+j]
						}
					}
				}
				at := make([]float32, max(k*(m+3), 1)) // A stored k×m, row stride m+3
				for i := 0; i < m; i++ {
					for p := 0; p < k; p++ {
						at[p*(m+3)+i] = a[i*lda+p]
					}
				}
				for _, ta := range []bool{false, true} {
					checkInPlaceRun(t, kn, sh, ta, tb, ldb, a, lda, at, b, sb, B)
				}
			}
		}
	}
}

// checkInPlaceRun is one case of checkInPlace: A given as a (row stride
// lda) or, when ta, as its transpose at (row stride m+3); B as b (stride
// sb, transposed when tb), B its dense logical value.
func checkInPlaceRun(t *testing.T, kn *Kernel, sh [3]int, ta, tb bool, ldb int, a []float32, lda int, at, b []float32, sb int, B []float32) {
	m, n, k := sh[0], sh[1], sh[2]
	ldc := n + 2
	run := func(rows bool) []float32 {
		useRows = rows
		c := make([]float32, m*ldc)
		for i := range c {
			c[i] = 99
		}
		if ta {
			kn.SgemmT(true, tb, m, n, k, at, m+3, b, sb, c, ldc)
		} else {
			kn.SgemmT(false, tb, m, n, k, a, lda, b, sb, c, ldc)
		}
		return c
	}
	got, want := run(true), run(false)
	for i := 0; i < m; i++ {
		for j := 0; j < ldc; j++ {
			at := fmt.Sprintf("%s %v ldb %d trans A %v B %v at [%d, %d]", kn.Name, sh, ldb, ta, tb, i, j)
			if j >= n {
				require.Equal(t, float32(99), got[i*ldc+j], "%s: past n was written", at)
				continue
			}
			require.Equal(t, want[i*ldc+j], got[i*ldc+j], "%s: not the packed path's bits", at)
			ref := 0.0
			for p := 0; p < k; p++ {
				ref += float64(a[i*lda+p]) * float64(B[p*n+j])
			}
			require.InDelta(t, ref, got[i*ldc+j], 1e-5*float64(k+1), at)
		}
	}
}
