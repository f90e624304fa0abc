package rt

import (
	"fmt"
	"math"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt/vecmath"
)

// Reductions and row-wise ops accumulate in float64 and round once.

// axisView splits a shape around axis: outer × n × inner.
func axisView(shape []int, axis int) (outer, n, inner int) {
	outer, inner = 1, 1
	for i, d := range shape {
		switch {
		case i < axis:
			outer *= d
		case i > axis:
			inner *= d
		}
	}
	return outer, shape[axis], inner
}

func softmax(p *hostPool, x *Tensor, axis int, logOut bool) *Tensor {
	out := uninitialised(p, x.DType, x.Shape)
	outer, n, inner := axisView(x.Shape, axis)
	if in, ok := x.Data.([]float32); ok && inner == 1 {
		softmaxRows32(p, out.Data.([]float32), in, n, logOut)
		return out
	}
	in, o := p.float64s(x), p.f64(x.Numel())
	defer p.done(in, o)
	exp := expFor(x.DType)
	for a := 0; a < outer; a++ {
		for c := 0; c < inner; c++ {
			base := a*n*inner + c
			mx := math.Inf(-1)
			for i := 0; i < n; i++ {
				mx = max(mx, in[base+i*inner])
			}
			s := 0.0
			for i := 0; i < n; i++ {
				s += exp(in[base+i*inner] - mx)
			}
			for i := 0; i < n; i++ {
				v := in[base+i*inner] - mx
				if logOut {
					o[base+i*inner] = v - math.Log(s)
				} else {
					o[base+i*inner] = exp(v) / s
				}
			}
		}
	}
	storeFloat64s(out, o)
	return out
}

// softmaxRows32 is softmax (or log_softmax) over contiguous f32 rows of n:
// the same float64 arithmetic as softmax's general path, element for
// element, so the results are identical; but only one row's exponentials
// are kept (in float64), where the general path widens the whole input
// and output to float64 scratch (about a tenth of the tiny GPT's step,
// issue 10).
func softmaxRows32(p *hostPool, out, in []float32, n int, logOut bool) {
	e := p.f64(n)
	defer p.done(e)
	for r := 0; r+n <= len(in) && n > 0; r += n {
		row, o := in[r:r+n], out[r:r+n]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = max(mx, float64(v))
		}
		vecmath.ExpShifted(e, row, mx) // exp64's bits, four lanes at a time
		s := 0.0
		for _, v := range e[:n] {
			s += v
		}
		if logOut {
			ls := math.Log(s)
			for i, v := range row {
				o[i] = float32(float64(v) - mx - ls)
			}
			continue
		}
		for i := range o {
			o[i] = float32(e[i] / s)
		}
	}
}

// storeFloat64s writes float64 values into a float tensor, rounding once.
func storeFloat64s(t *Tensor, v []float64) {
	switch d := t.Data.(type) {
	case []float32:
		for i, x := range v {
			d[i] = float32(x)
		}
	case []float64:
		copy(d, v)
	case []uint16:
		conv := F32ToBF16
		if t.DType == ir.F16 {
			conv = F32ToF16
		}
		for i, x := range v {
			d[i] = conv(float32(x))
		}
	}
}

// layernorm over the last dim: (x - mean)/sqrt(var + eps)·gamma + beta with
// the biased variance, as PyTorch computes it.
func layernorm(p *hostPool, x, g, b *Tensor, eps float64) *Tensor {
	out := uninitialised(p, x.DType, x.Shape)
	h := x.Shape[len(x.Shape)-1]
	gv, bv := p.float64s(g), p.float64s(b)
	defer p.done(gv, bv)
	if in, ok := x.Data.([]float32); ok { // rows read in place, in float64
		o := out.Data.([]float32)
		gv, bv := gv[:h], bv[:h]
		for r := 0; h > 0 && r < len(in)/h; r++ {
			row, orow := in[r*h:(r+1)*h], o[r*h:(r+1)*h]
			mean, inv := rowMoments(row, eps)
			for i, v := range row {
				orow[i] = float32((float64(v)-mean)*inv*gv[i] + bv[i])
			}
		}
		return out
	}
	in := p.float64s(x)
	o := p.f64(len(in))
	defer p.done(in, o)
	for r := 0; h > 0 && r < len(in)/h; r++ {
		row := in[r*h : (r+1)*h]
		mean, inv := rowMoments(row, eps)
		for i, v := range row {
			o[r*h+i] = (v-mean)*inv*gv[i] + bv[i]
		}
	}
	storeFloat64s(out, o)
	return out
}

// rowMoments is a row's mean and 1/√(biased variance + eps), in float64
// (an f32 row is read in place: its values widen exactly).
func rowMoments[T float32 | float64](row []T, eps float64) (mean, inv float64) {
	mean = sum4(row) / float64(len(row))
	vr := sumSqDev4(row, mean) / float64(len(row))
	return mean, 1 / math.Sqrt(vr+eps)
}

// sum4 is Σ x in four interleaved partial sums: one running sum is a
// chain of dependent additions (4 cycles each), and layernorm's rows are
// short (32 in the tiny GPT), so the chains were most of its time.
func sum4[T float32 | float64](x []T) float64 {
	var a, b, c, d float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		a += float64(x[i])
		b += float64(x[i+1])
		c += float64(x[i+2])
		d += float64(x[i+3])
	}
	for ; i < len(x); i++ {
		a += float64(x[i])
	}
	return (a + b) + (c + d)
}

// sumSqDev4 is Σ (x − mean)² in four partial sums (see sum4).
func sumSqDev4[T float32 | float64](x []T, mean float64) float64 {
	var a, b, c, d float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		u, v, w, z := float64(x[i])-mean, float64(x[i+1])-mean, float64(x[i+2])-mean, float64(x[i+3])-mean
		a += u * u
		b += v * v
		c += w * w
		d += z * z
	}
	for ; i < len(x); i++ {
		a += (float64(x[i]) - mean) * (float64(x[i]) - mean)
	}
	return (a + b) + (c + d)
}

// reduce computes sum, mean or max along Attrs.Axis (-1: all dims). mean
// divides by the global count from the value's type, so a split input gives
// the right partial.
func reduce(p *hostPool, v *plan.Kernel, x *Tensor) *Tensor {
	axis := v.Attrs.Axis
	var dims [8]int // on the stack: the result's header copies its shape
	var outShape []int
	outer, n, inner := 1, x.Numel(), 1
	globalN := numel(v.ArgShapes[0])
	if axis >= 0 {
		outer, n, inner = axisView(x.Shape, axis)
		outShape = append(append(dims[:0], x.Shape[:axis]...), x.Shape[axis+1:]...)
		globalN = v.ArgShapes[0][axis]
	}
	o := p.f64(outer * inner)
	defer p.done(o)
	isMax := v.Op == "max"
	if d, ok := x.Data.([]float32); ok {
		reduceRows(o, d, outer, n, inner, isMax)
	} else {
		in := p.float64s(x)
		defer p.done(in)
		reduceRows(o, in, outer, n, inner, isMax)
	}
	if v.Op == "mean" {
		for i := range o {
			o[i] /= float64(globalN)
		}
	}
	out := uninitialised(p, x.DType, outShape)
	storeFloat64s(out, o)
	return out
}

// reduceRows folds in, viewed as [outer, n, inner], along n into o
// ([outer, inner], zero on entry) in float64: each output sums (or takes
// the max of) its n inputs in order, as a column walk would, but the walk
// goes along rows of inner contiguous elements and reads f32 directly
// (issue 10: the strided walk over a float64 copy, with the op's name
// compared per element, was 5% of the tiny GPT's step).
func reduceRows[T float32 | float64](o []float64, in []T, outer, n, inner int, isMax bool) {
	if inner == 1 {
		// rows of one element (a sum over the last or every dim): one
		// running sum per output, the same additions in the same order
		// without a row slice per element (5 ns an element before, a
		// twelfth of a Megatron MLP step on one device)
		reduceLines(o, in, outer, n, isMax)
		return
	}
	for a := 0; a < outer; a++ {
		acc := o[a*inner : (a+1)*inner]
		if isMax {
			for c := range acc {
				acc[c] = math.Inf(-1)
			}
		}
		for i := 0; i < n; i++ {
			row := in[(a*n+i)*inner : (a*n+i+1)*inner]
			if isMax {
				for c, e := range row {
					acc[c] = max(acc[c], float64(e))
				}
				continue
			}
			for c, e := range row {
				acc[c] += float64(e)
			}
		}
	}
}

// reduceLines is reduceRows with inner 1: o[a] folds in[a*n : (a+1)*n]
// in order.
func reduceLines[T float32 | float64](o []float64, in []T, outer, n int, isMax bool) {
	for a := 0; a < outer; a++ {
		line := in[a*n : (a+1)*n]
		if isMax {
			acc := math.Inf(-1)
			for _, e := range line {
				acc = max(acc, float64(e))
			}
			o[a] = acc
			continue
		}
		acc := o[a]
		for _, e := range line {
			acc += float64(e)
		}
		o[a] = acc
	}
}

func transpose(p *hostPool, x *Tensor, perm []int) *Tensor {
	r := len(perm)
	shape := make([]int, r)
	for i, p := range perm {
		shape[i] = x.Shape[p]
	}
	out := uninitialised(p, x.DType, shape)
	n := out.Numel()
	if n == 0 {
		return out
	}
	ist := strides(x.Shape)
	src := make([]int, r) // stride in x of each output dim
	for i, p := range perm {
		src[i] = ist[p]
	}
	if m, n, ok := swapsLastTwo(x.Shape, perm); ok {
		switch d := out.Data.(type) {
		case []float32: // 8×8 blocks in AVX2 registers (rt/vecmath)
			in, size := x.Data.([]float32), m*n
			for b := 0; b+size <= len(in) && size > 0; b += size {
				vecmath.Transpose(d[b:b+size], in[b:b+size], m, n)
			}
			return out
		case []float64:
			transposeBlocks(d, x.Data.([]float64), m, n)
			return out
		}
	}
	if outer, n1, n2, run, ok := swapsAdjacent(x.Shape, perm); ok {
		switch d := out.Data.(type) {
		case []float32:
			swapRuns(d, x.Data.([]float32), outer, n1, n2, run)
			return out
		case []float64:
			swapRuns(d, x.Data.([]float64), outer, n1, n2, run)
			return out
		}
	}
	switch d := out.Data.(type) {
	case []float32:
		permute(d, x.Data.([]float32), shape, src)
	case []float64:
		permute(d, x.Data.([]float64), shape, src)
	case []int32:
		permute(d, x.Data.([]int32), shape, src)
	case []int64:
		permute(d, x.Data.([]int64), shape, src)
	}
	return out
}

// swapsLastTwo reports whether perm keeps every dim but swaps the last
// two, with the shape's last two dims (m, n): a matrix transpose per batch.
func swapsLastTwo(shape, perm []int) (m, n int, ok bool) {
	r := len(perm)
	if r < 2 || perm[r-2] != r-1 || perm[r-1] != r-2 {
		return 0, 0, false
	}
	for i := 0; i < r-2; i++ {
		if perm[i] != i {
			return 0, 0, false
		}
	}
	return shape[r-2], shape[r-1], true
}

// swapsAdjacent reports whether perm swaps two adjacent dims k and k+1
// of shape, neither of them the last, and keeps every other dim: x is
// then outer [n1, n2] matrices whose elements are runs of run contiguous
// elements (attention's [B, T, H, D] ↔ [B, H, T, D], perm 0 2 1 3).
func swapsAdjacent(shape, perm []int) (outer, n1, n2, run int, ok bool) {
	r, k := len(perm), -1
	for i := 0; i < r; i++ {
		switch {
		case perm[i] == i:
		case k < 0 && i+1 < r-1 && perm[i] == i+1 && perm[i+1] == i:
			k = i
			i++
		default:
			return 0, 0, 0, 0, false
		}
	}
	if k < 0 {
		return 0, 0, 0, 0, false
	}
	outer, run = 1, 1
	for _, d := range shape[:k] {
		outer *= d
	}
	for _, d := range shape[k+2:] {
		run *= d
	}
	return outer, shape[k], shape[k+1], run, true
}

// swapRuns writes in's outer [n1, n2] matrices of runs (swapsAdjacent)
// transposed into out, a run at a time in out's order: the general
// permute's per-run index walk cost three times the copy on attention's
// head transposes (8% of a tiny-GPT step).
func swapRuns[T Num](out, in []T, outer, n1, n2, run int) {
	o, size := 0, n1*n2*run
	for b := 0; b < outer; b++ {
		m := in[b*size : (b+1)*size]
		for j := 0; j < n2; j++ {
			for i := 0; i < n1; i++ {
				s := (i*n2 + j) * run
				copy(out[o:o+run], m[s:s+run])
				o += run
			}
		}
	}
}

// transposeBlocks transposes each [m, n] matrix of in (as many as fit)
// into out's [n, m] in 16×16 tiles (f64; f32 goes through
// vecmath.Transpose's 8×8 register blocks, 3–4× faster than this), writing a tile's rows in order: the
// element-wise walk of permute reads one element per cache line of a wide
// matrix (the backward's transposes of weights and activations, issue 10).
// BenchmarkTranspose, [256, 1024] … [128, 32] f32 on a loaded machine: as
// fast as permute to 4× faster; 32×32 tiles, or writes down the columns,
// thrashed the cache when a row is a power-of-two multiple of 4 KiB (up
// to 6× slower than permute there).
func transposeBlocks[T Float](out, in []T, m, n int) {
	const tile = 16
	size := m * n
	for b := 0; b+size <= len(in) && size > 0; b += size {
		src, dst := in[b:b+size], out[b:b+size]
		for i0 := 0; i0 < m; i0 += tile {
			i1 := min(i0+tile, m)
			for j0 := 0; j0 < n; j0 += tile {
				for j := j0; j < min(j0+tile, n); j++ {
					o := dst[j*m+i0 : j*m+i1]
					for k := range o {
						o[k] = src[(i0+k)*n+j]
					}
				}
			}
		}
	}
}

// permute writes out (of shape, row-major) from in, src[k] being in's
// stride along out's dim k. Trailing dims that are contiguous in in as
// well (attention's heads permute keeps the head width last) are copied
// as runs: the index walk then steps once per run, not per element (it
// was 8% of the tiny GPT's step, issue 10).
func permute[T Num](out, in []T, shape, src []int) {
	r, run := len(shape), 1
	for r > 0 && src[r-1] == run {
		run *= shape[r-1]
		r--
	}
	idx := make([]int, r)
	si := 0
	for o := 0; o+run <= len(out) && run > 0; o += run {
		dst, from := out[o:o+run], in[si:si+run]
		for j := range dst {
			dst[j] = from[j]
		}
		for k := r - 1; k >= 0; k-- {
			idx[k]++
			si += src[k]
			if idx[k] < shape[k] {
				break
			}
			si -= src[k] * idx[k]
			idx[k] = 0
		}
	}
}

func indices(t *Tensor) []int64 {
	switch d := t.Data.(type) {
	case []int32:
		out := make([]int64, len(d))
		for i, v := range d {
			out[i] = int64(v)
		}
		return out
	case []int64:
		return d
	}
	return nil
}

// embedding looks rows of the local table block up; vocabOff is the first
// vocab row this device holds. Indices outside the local rows give zero
// rows (the vocab-parallel partial); outside the global table, an error.
func embedding(p *hostPool, w, idx *Tensor, vocabOff, vocab int) (*Tensor, error) {
	rows, h := w.Shape[0], w.Shape[1]
	ix := indices(idx)
	out := p.zeroed(w.DType, append(append([]int{}, idx.Shape...), h)) // rows of other shards stay 0
	for i, id := range ix {
		if id < 0 || id >= int64(vocab) {
			return nil, fmt.Errorf("embedding index %d out of range [0, %d)", id, vocab)
		}
		r := int(id) - vocabOff
		if r < 0 || r >= rows {
			continue
		}
		CopyBlock(out, []int{i * h}, flat(w), []int{r * h}, []int{h})
	}
	return out, nil
}

func flat(t *Tensor) *Tensor {
	return &Tensor{DType: t.DType, Shape: []int{t.Numel()}, Data: t.Data}
}

// crossEntropy is the mean over the global batch of logsumexp(row) -
// row[label]; a row split gives each device the sum of its rows / N.
func crossEntropy(p *hostPool, logits, labels *Tensor, globalN int) (*Tensor, error) {
	n, c := logits.Shape[0], logits.Shape[1]
	in := p.float64s(logits)
	defer p.done(in)
	lab := indices(labels)
	total := 0.0
	exp, l32 := expFor(logits.DType), f32Data(logits)
	e := p.f64(c)
	defer p.done(e)
	for r := 0; r < n; r++ {
		row := in[r*c : (r+1)*c]
		if lab[r] < 0 || lab[r] >= int64(c) {
			return nil, fmt.Errorf("cross_entropy label %d out of range [0, %d)", lab[r], c)
		}
		mx, s := expRow(e, row, rowOf(l32, r, c), exp)
		total += mx + math.Log(s) - row[lab[r]]
	}
	out := NewTensor(logits.DType, nil)
	setScalar(out, total/float64(globalN))
	return out, nil
}

// expRow sets e[i] = exp(row[i] − max) and returns the row's maximum and
// Σ e in order, the stable pieces of its log-sum-exp, with the exponential
// expFor chose: for an f32 row (r32, the same values) four lanes at a time
// with exp64's bits (vecmath.ExpShifted). The gradient reads e instead of
// computing each exponential a second time.
func expRow(e, row []float64, r32 []float32, exp func(float64) float64) (mx, s float64) {
	mx = math.Inf(-1)
	for _, v := range row {
		mx = max(mx, v)
	}
	e = e[:len(row)]
	if r32 != nil {
		vecmath.ExpShifted(e, r32, mx)
	} else {
		for i, v := range row {
			e[i] = exp(v - mx)
		}
	}
	for _, v := range e {
		s += v
	}
	return mx, s
}

// f32Data is t's storage when t is f32 (whose kernels take exp64), else nil.
func f32Data(t *Tensor) []float32 {
	if t.DType != ir.F32 {
		return nil
	}
	d, _ := t.Data.([]float32)
	return d
}

// rowOf is row r of c elements of d, or nil when d is.
func rowOf(d []float32, r, c int) []float32 {
	if d == nil {
		return nil
	}
	return d[r*c : (r+1)*c]
}

// expFor is the exponential a kernel over dt uses: package math's for f64,
// exp64 (about 1e-13 relative, see f32math.go) for f32 and half tensors,
// whose results round to 24 bits or fewer.
func expFor(dt ir.DType) func(float64) float64 {
	if dt == ir.F64 {
		return math.Exp
	}
	return exp64
}

// mse is the mean squared error of blocks a and b over globalN elements
// in all, a scalar from pool p (a fresh one per step was an allocation
// per rank).
func mse(p *hostPool, a, b *Tensor, globalN int) (*Tensor, error) {
	s := 0.0
	if x, ok := a.Data.([]float32); ok && b.DType == ir.F32 {
		// read in place: the float64 copies of both operands were 2 MB of
		// fresh memory per step of bench/torch_mlp.sh's MLP (issue 10); each
		// difference is formed in float64 as before, the same bits
		y := b.Data.([]float32)[:len(x)]
		for i := range x {
			d := float64(x[i]) - float64(y[i])
			s += d * d
		}
	} else {
		x, y := a.Float64s(), b.Float64s()
		for i := range x {
			d := x[i] - y[i]
			s += d * d
		}
	}
	out := uninitialised(p, a.DType, nil)
	setScalar(out, s/float64(globalN))
	return out, nil
}
