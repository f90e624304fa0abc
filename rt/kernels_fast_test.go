package rt

// Tests of the fast paths in the kernels (tiled transpose, f32 softmax and
// layernorm rows, f32 Adam) against the general code they shortcut.

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

// TestSoftmaxRows32MatchesGeneralPath: the f32 row kernel gives exactly
// what the general (float64 scratch) path gives for the same rows laid
// out as columns, for softmax and log_softmax, including -1e9 masks.
func TestSoftmaxRows32MatchesGeneralPath(t *testing.T) {
	const rows, n = 7, 19
	x := NewTensor(ir.F32, []int{rows, n})
	d := x.Data.([]float32)
	for i := range d {
		d[i] = float32(i*37%23)/3 - 4
		if i%n > i/n+5 {
			d[i] = -1e9
		}
	}
	xt := transpose(nil, x, []int{1, 0})
	for _, logOut := range []bool{false, true} {
		fast := softmax(nil, x, 1, logOut)
		general := transpose(nil, softmax(nil, xt, 0, logOut), []int{1, 0})
		require.Equal(t, general.Data, fast.Data, "log %v", logOut)
	}
}

// TestLayernormRows32MatchesFloat64: the f32 row path rounds the same
// float64 arithmetic as the general path (run here on the f64 copy).
func TestLayernormRows32MatchesFloat64(t *testing.T) {
	x, g, b := NewTensor(ir.F32, []int{5, 33}), NewTensor(ir.F32, []int{33}), NewTensor(ir.F32, []int{33})
	for i, d := 0, x.Data.([]float32); i < len(d); i++ {
		d[i] = float32(i*29%31)/7 - 2
	}
	for i := range 33 {
		g.Data.([]float32)[i] = 1 + float32(i)/50
		b.Data.([]float32)[i] = float32(i%3) - 1
	}
	wide := func(t *Tensor) *Tensor {
		w := NewTensor(ir.F64, t.Shape)
		copy(w.Data.([]float64), t.Float64s())
		return w
	}
	got := layernorm(nil, x, g, b, 1e-5).Data.([]float32)
	want := layernorm(nil, wide(x), wide(g), wide(b), 1e-5).Data.([]float64)
	for i := range got {
		require.Equal(t, float32(want[i]), got[i], "at %d", i)
	}
}

// TestAdamUpdate32MatchesGeneric: the f32 Adam update is the generic one,
// bit for bit.
func TestAdamUpdate32MatchesGeneric(t *testing.T) {
	n := 1000
	p, m, v := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range p {
		p[i], m[i], v[i] = float32(i%7)*0.1-0.3, float32(i%5)*0.01-0.02, float32(i%3)*0.001+1e-9
	}
	got, want := make([]float32, n), make([]float32, n)
	adamUpdate32(got, p, m, v, 0.001, 0.99, 1e-8, 0.999)
	adamUpdate(want, p, m, v, 0.001, 0.99, 1e-8, 0.999)
	require.Equal(t, want, got)
}

// TestBinarySuffixBroadcast: an operand repeating along the other's
// leading dims (either side, non-commutative ops too) gives the
// element-wise definition.
func TestBinarySuffixBroadcast(t *testing.T) {
	full := []int{3, 4, 5}
	for _, small := range [][]int{{4, 5}, {1, 4, 5}, {5}, {1, 1}} {
		for _, op := range []string{"add", "sub", "mul", "div", "maximum"} {
			for _, smallLeft := range []bool{false, true} {
				a, b := NewTensor(ir.F32, full), NewTensor(ir.F32, small)
				ad, bd := a.Data.([]float32), b.Data.([]float32)
				for i := range ad {
					ad[i] = float32(i%11) - 4.5
				}
				for i := range bd {
					bd[i] = float32(i%3) + 0.5
				}
				x, y := a, b
				if smallLeft {
					x, y = b, a
				}
				got, err := elementwise(nil, op, x, y)
				require.NoError(t, err)
				f := binaryFn[float32](op)
				for i, g := range got.Data.([]float32) {
					bv := bd[i%len(bd)]
					want := f(ad[i], bv)
					if smallLeft {
						want = f(bv, ad[i])
					}
					require.Equal(t, want, g, "%v %s %v at %d", small, op, smallLeft, i)
				}
			}
		}
	}
}

// TestSoftmaxGradRows32MatchesGeneralPath: the f32 row path of
// softmax_grad equals the general path on the transposed layout.
func TestSoftmaxGradRows32MatchesGeneralPath(t *testing.T) {
	y, g := NewTensor(ir.F32, []int{6, 17}), NewTensor(ir.F32, []int{6, 17})
	for i, d := 0, y.Data.([]float32); i < len(d); i++ {
		d[i] = float32(i%13) / 13
		g.Data.([]float32)[i] = float32(i%7) - 3
	}
	fast := softmaxGrad(nil, y, g, 1)
	tr := func(x *Tensor) *Tensor { return transpose(nil, x, []int{1, 0}) }
	general := tr(softmaxGrad(nil, tr(y), tr(g), 0))
	require.Equal(t, general.Data, fast.Data)
}

// TestNormalizeRows32MatchesFloat64: the f32 row path of normalize and
// its backward rounds the float64 path's values (run on f64 copies).
func TestNormalizeRows32MatchesFloat64(t *testing.T) {
	x, d := NewTensor(ir.F32, []int{4, 21}), NewTensor(ir.F32, []int{4, 21})
	for i := range x.Data.([]float32) {
		x.Data.([]float32)[i] = float32(i*17%19)/5 - 1
		d.Data.([]float32)[i] = float32(i%5) - 2
	}
	wide := func(t *Tensor) *Tensor {
		w := NewTensor(ir.F64, t.Shape)
		copy(w.Data.([]float64), t.Float64s())
		return w
	}
	for _, dd := range []*Tensor{nil, d} {
		var dw *Tensor
		if dd != nil {
			dw = wide(dd)
		}
		got := normalizeRows(nil, x, dd, 1e-5).Data.([]float32)
		want := normalizeRows(nil, wide(x), dw, 1e-5).Data.([]float64)
		for i := range got {
			require.Equal(t, float32(want[i]), got[i], "backward %v at %d", dd != nil, i)
		}
	}
}
