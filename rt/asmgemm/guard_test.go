//go:build amd64 && linux

package asmgemm

import (
	"fmt"
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/internal/guardmem"
)

// guarded is n float32s flush against an inaccessible page at the end
// (atEnd) or the start, unmapped when the test ends.
func guarded(t *testing.T, n int, atEnd bool) []float32 {
	t.Helper()
	x, free, err := guardmem.Float32s(n, guardmem.Side(atEnd))
	require.NoError(t, err)
	t.Cleanup(free)
	return x
}

// TestKernelsStayInBounds runs every kernel on operands and results that
// touch an inaccessible page at one end, in both layouts of A and B, on
// shapes with ragged edges, single panels and several blocks, with the
// strides exactly the matrices' widths: any read or write outside the
// slices faults (a panic here, through SetPanicOnFault) instead of
// passing unseen on whatever memory lies next to them. Results are
// checked against a float64 triple loop too.
func TestKernelsStayInBounds(t *testing.T) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	shapes := [][3]int{{1, 1, 1}, {5, 7, 3}, {12, 32, 9}, {13, 33, 17}, {256, 32, 32}, {256, 128, 32}, {32, 512, 70},
		{97, 31, 260}, {100, 70, 600}, {6, 16, 1}, {25, 65, 257}}
	for _, kn := range []*Kernel{AVX2, AVX512} {
		if !kn.Supported() {
			t.Logf("%s: not on this CPU", kn.Name)
			continue
		}
		for _, sh := range shapes {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					for _, atEnd := range []bool{true, false} {
						name := fmt.Sprintf("%s/%dx%dx%d/ta=%v/tb=%v/end=%v", kn.Name, sh[0], sh[1], sh[2], ta, tb, atEnd)
						stayInBounds(t, name, kn, sh[0], sh[1], sh[2], ta, tb, atEnd)
					}
				}
			}
		}
	}
}

func stayInBounds(t *testing.T, name string, kn *Kernel, m, n, k int, ta, tb, atEnd bool) {
	a, b, c := guarded(t, m*k, atEnd), guarded(t, k*n, atEnd), guarded(t, m*n, atEnd)
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	// A[i, p] and B[p, j] in the layout the call reads
	at := func(i, p int) *float32 {
		if ta {
			return &a[p*lda+i]
		}
		return &a[i*lda+p]
	}
	bt := func(p, j int) *float32 {
		if tb {
			return &b[j*ldb+p]
		}
		return &b[p*ldb+j]
	}
	for i := range m {
		for p := range k {
			*at(i, p) = float32(math.Sin(float64(i*k + p)))
		}
	}
	for p := range k {
		for j := range n {
			*bt(p, j) = float32(math.Cos(0.7 * float64(p*n+j)))
		}
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: out of bounds: %v", name, r)
			}
		}()
		kn.SgemmT(ta, tb, m, n, k, a, lda, b, ldb, c, n)
	}()
	for i := range m {
		for j := range n {
			want, mag := 0.0, 0.0
			for p := range k {
				x := float64(*at(i, p)) * float64(*bt(p, j))
				want, mag = want+x, mag+math.Abs(x)
			}
			require.InDelta(t, want, float64(c[i*n+j]), 1e-5*mag+1e-6, "%s: C[%d, %d]", name, i, j)
		}
	}
}
