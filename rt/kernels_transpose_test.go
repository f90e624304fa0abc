package rt

import (
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/stretchr/testify/require"
)

// TestTransposeBlocksMatchesPermute: the tiled matrix transpose gives what
// the element-wise permute gives, on shapes that are not multiples of the
// tile, batched, and degenerate; out[..., j, i] = in[..., i, j] is checked
// directly too.
func TestTransposeBlocksMatchesPermute(t *testing.T) {
	for _, sh := range [][]int{{70, 33}, {3, 45, 70}, {2, 2, 1, 65}, {1, 1}, {32, 64}, {0, 5}} {
		r := len(sh)
		perm := make([]int, r)
		for i := range perm {
			perm[i] = i
		}
		perm[r-2], perm[r-1] = r-1, r-2
		for _, dt := range []ir.DType{ir.F32, ir.F64} {
			x := NewTensor(dt, sh)
			vals := x.Float64s()
			for i := range vals {
				vals[i] = float64(i*7%101) - 50
			}
			storeFloat64s(x, vals)
			got := transpose(nil, x, perm)
			out := make([]float64, len(vals))
			src := strides(sh)
			src[r-2], src[r-1] = src[r-1], src[r-2]
			shape := append([]int{}, sh...)
			shape[r-2], shape[r-1] = sh[r-1], sh[r-2]
			if len(out) > 0 {
				permute(out, vals, shape, src)
			}
			require.Equal(t, shape, got.Shape, "%v", sh)
			require.Equal(t, out, got.Float64s(), "%v %s", sh, dt)
			m, n := sh[r-2], sh[r-1]
			g := got.Float64s()
			for i := 0; i < m && n > 0; i++ {
				for j := 0; j < n; j++ {
					require.Equal(t, vals[i*n+j], g[j*m+i], "%v at [%d, %d]", sh, i, j)
				}
			}
		}
	}
}

// BenchmarkTranspose: the tiled transpose against the element-wise
// permute on the matrix shapes of bench/torch_mlp.sh's MLP and the tiny
// GPT.
func BenchmarkTranspose(b *testing.B) {
	for _, sh := range [][2]int{{256, 1024}, {1024, 512}, {512, 256}, {256, 128}, {128, 32}} {
		m, n := sh[0], sh[1]
		in, out := make([]float32, m*n), make([]float32, m*n)
		b.Run(ir.ShapeString(sh[:])+"/permute", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				permute(out, in, []int{n, m}, []int{1, n})
			}
		})
		b.Run(ir.ShapeString(sh[:])+"/tiles", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				transposeBlocks(out, in, m, n)
			}
		})
	}
}
