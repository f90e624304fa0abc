package rt

// Tests of the fast paths in the kernels (tiled transpose, f32 softmax and
// layernorm rows, f32 Adam) against the general code they shortcut.

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

// TestTransposeBlocksMatchesPermute: the matrix transpose (f32: vecmath's
// 8×8 register blocks; f64: the tiled one) gives what
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

// TestPermuteRunsMatchIndexFormula: permute (which copies trailing dims
// contiguous in both layouts as runs) against out[i] = in[Σ idx_k·src_k]
// computed from each output element's multi-index, for every permutation
// of 3- and 4-dim shapes with sizes 1, 2 and 3 (and the heads permute of
// the tiny GPT's attention).
func TestPermuteRunsMatchIndexFormula(t *testing.T) {
	shapes := [][]int{{2, 3, 1}, {3, 1, 2}, {2, 3, 2, 3}, {1, 2, 1, 3}, {16, 16, 4, 8}, {4, 0, 3}}
	for _, sh := range shapes {
		for _, perm := range permutations(len(sh)) {
			ist := strides(sh)
			shape, src := make([]int, len(sh)), make([]int, len(sh))
			for i, p := range perm {
				shape[i], src[i] = sh[p], ist[p]
			}
			n := numel(sh)
			in := make([]float64, n)
			for i := range in {
				in[i] = float64(i) + 0.5
			}
			got := make([]float64, n)
			permute(got, in, shape, src)
			ost := strides(shape)
			for o := range got {
				at := 0
				for k := range shape {
					at += o / ost[k] % shape[k] * src[k]
				}
				require.Equal(t, in[at], got[o], "shape %v perm %v at %d", sh, perm, o)
			}
		}
	}
}

// permutations lists every ordering of 0..n-1.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for at := 0; at <= len(p); at++ {
			q := append(append(append([]int{}, p[:at]...), n-1), p[at:]...)
			out = append(out, q)
		}
	}
	return out
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

// TestAdamUpdate32MatchesGeneric: the f32 Adam update (vector lanes and
// the scalar tail: n is not a multiple of 8) is the generic one, bit for
// bit; so are the f32 moments.
func TestAdamUpdate32MatchesGeneric(t *testing.T) {
	n := 1003
	p, m, v := make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range p {
		p[i], m[i], v[i] = float32(i%7)*0.1-0.3, float32(i%5)*0.01-0.02, float32(i%3)*0.001+1e-9
	}
	got, want := make([]float32, n), make([]float32, n)
	adamUpdate32(got, p, m, v, 0.001, 0.99, 1e-8, 0.999)
	adamUpdate(want, p, m, v, 0.001, 0.99, 1e-8, 0.999)
	require.Equal(t, want, got)
	for _, sq := range []bool{false, true} {
		k := &plan.Kernel{Op: "adam_moment"}
		if sq {
			k.Op = "adam_moment2"
		}
		beta := &Tensor{DType: ir.F32, Data: []float32{0.9}}
		mt := &Tensor{DType: ir.F32, Shape: []int{n}, Data: m}
		gt := &Tensor{DType: ir.F32, Shape: []int{n}, Data: p}
		got := adamMoment(&OpCall{Kernel: k, Args: []*Tensor{mt, gt, beta}}).Data.([]float32)
		moment(want, m, p, 0.9, sq)
		require.Equal(t, want, got, "square %v", sq)
	}
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

// TestReduceMatchesDefinition: sum, mean and max along each axis (and
// over everything) of f32 and f64 tensors, against the definition
// evaluated per output element in float64, in the same order, so bit for
// bit; -0 and infinities included.
func TestReduceMatchesDefinition(t *testing.T) {
	shape := []int{3, 4, 5}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		x := NewTensor(dt, shape)
		vals := make([]float64, 60)
		for i := range vals {
			vals[i] = float64(i*37%29)/4 - 3
		}
		vals[7], vals[11], vals[40] = math.Copysign(0, -1), math.Inf(1), math.Inf(-1)
		storeFloat64s(x, vals)
		for _, op := range []string{"sum", "mean", "max"} {
			for axis := -1; axis < 3; axis++ {
				k := &plan.Kernel{Op: op, ArgShapes: [][]int{shape}}
				k.Attrs.Axis = axis
				got := reduce(nil, k, x).Float64s()
				outer, n, inner := 1, 60, 1
				if axis >= 0 {
					outer, n, inner = axisView(shape, axis)
				}
				for a := 0; a < outer; a++ {
					for c := 0; c < inner; c++ {
						acc := 0.0
						if op == "max" {
							acc = math.Inf(-1)
						}
						for i := 0; i < n; i++ {
							e := vals[a*n*inner+i*inner+c]
							if op == "max" {
								acc = max(acc, e)
							} else {
								acc += e
							}
						}
						if op == "mean" {
							acc /= float64(n)
						}
						want := storeRound(dt, acc)
						require.Equal(t, math.Float64bits(want), math.Float64bits(got[a*inner+c]),
							"%s %s axis %d at %d: got %g want %g", dt, op, axis, a*inner+c, got[a*inner+c], want)
					}
				}
			}
		}
	}
}

// storeRound is v as a tensor of dt holds it.
func storeRound(dt ir.DType, v float64) float64 {
	if dt == ir.F32 {
		return float64(float32(v))
	}
	return v
}

// TestCrossEntropyF32Rows: cross_entropy and its gradient on f32 logits
// (exponentials from vecmath.ExpShifted, computed once per element) give
// the bits of the definition evaluated here with exp64 one element at a
// time, rows of 37 (not a multiple of the lanes).
func TestCrossEntropyF32Rows(t *testing.T) {
	const n, c = 5, 37
	logits := NewTensor(ir.F32, []int{n, c})
	l := logits.Data.([]float32)
	for i := range l {
		l[i] = float32(i*13%41)/5 - 4
	}
	labels := &Tensor{DType: ir.I64, Shape: []int{n}, Data: []int64{0, 36, 5, 17, 3}}
	g := &Tensor{DType: ir.F32, Data: []float32{1.5}}
	loss, err := crossEntropy(nil, logits, labels, 8)
	require.NoError(t, err)
	grad, err := crossEntropyGrad(nil, logits, labels, g, 8)
	require.NoError(t, err)
	total := 0.0
	want := make([]float32, n*c)
	for r := 0; r < n; r++ {
		row := l[r*c : (r+1)*c]
		mx, s := math.Inf(-1), 0.0
		for _, v := range row {
			mx = max(mx, float64(v))
		}
		for _, v := range row {
			s += exp64(float64(v) - mx)
		}
		lab := labels.Data.([]int64)[r]
		total += mx + math.Log(s) - float64(row[lab])
		for i, v := range row {
			p := exp64(float64(v)-mx) / s
			if int64(i) == lab {
				p--
			}
			want[r*c+i] = float32(p * (1.5 / 8))
		}
	}
	require.Equal(t, float32(total/8), loss.Data.([]float32)[0])
	require.Equal(t, want, grad.Data.([]float32))
}

// TestMSEF32InPlace: mse reads f32 operands in place and gives the bits
// of the definition over float64 copies (Σ (float64(a)−float64(b))² in
// order, over the global count), also for f64 and mixed-size inputs.
func TestMSEF32InPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{1, 7, 1000} {
		for _, dt := range []ir.DType{ir.F32, ir.F64} {
			a, b := randOperand(rng, dt, []int{n}), randOperand(rng, dt, []int{n})
			got, err := mse(nil, a, b, 3*n)
			require.NoError(t, err)
			x, y := a.Float64s(), b.Float64s()
			s := 0.0
			for i := range x {
				d := x[i] - y[i]
				s += d * d
			}
			want := NewTensor(dt, nil)
			setScalar(want, s/float64(3*n))
			require.Equal(t, want.Data, got.Data, "n=%d %s", n, dt)
		}
	}
}
