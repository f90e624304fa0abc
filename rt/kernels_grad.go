package rt

import (
	"fmt"
	"math"

	"github.com/meshrun/meshrun/rt/vecmath"
)

// Kernels of the gradient helper ops (registered with their rules in ops/grad.go).

func init() {
	registerCPU(pure(func(call *OpCall) *Tensor {
		return mapFloat(call.Args[0], func(x float64) float64 {
			if x > 0 {
				return 1
			}
			return 0
		})
	}), "relu_grad")
	registerCPU(pure(func(call *OpCall) *Tensor { return geluGrad(call.pool, call.Args[0]) }), "gelu_grad")
	registerCPU(pure(func(call *OpCall) *Tensor {
		return softmaxGrad(call.pool, call.Args[0], call.Args[1], call.Kernel.Attrs.Axis)
	}), "softmax_grad")
	registerCPU(pure(func(call *OpCall) *Tensor { return normalizeRows(call.pool, call.Args[0], nil, call.Kernel.Attrs.Eps) }), "normalize")
	registerCPU(pure(func(call *OpCall) *Tensor {
		return normalizeRows(call.pool, call.Args[0], call.Args[1], call.Kernel.Attrs.Eps)
	}), "normalize_grad")
	registerCPU(pure(func(call *OpCall) *Tensor {
		a := call.Args
		return maxGrad(a[0], a[1], a[2], call.Kernel.Attrs.Axis)
	}), "max_grad")
	registerCPU(pure(func(call *OpCall) *Tensor { return broadcastTo(call.Args[0], call.Out.Len) }), "broadcast_to")
	registerCPU(pure(func(call *OpCall) *Tensor {
		x, k := call.Args[0], call.Kernel
		var dims [8]int // on the stack: zeroed copies the shape
		shape := append(dims[:0], x.Shape...)
		shape[k.Attrs.Axis] += k.Shape[k.Attrs.Axis] - k.ArgShapes[0][k.Attrs.Axis]
		out := call.pool.zeroed(x.DType, shape) // zero outside the copied block
		off := make([]int, len(shape))
		off[k.Attrs.Axis] = k.Attrs.Start
		CopyBlock(out, off, x, make([]int, len(shape)), x.Shape)
		return out
	}), "pad")
	registerCPU(func(_ *CPU, call *OpCall) (*Tensor, error) {
		return embeddingGrad(call.pool, call.Args[0], call.Args[1], call.Out.Len, call.Out.Off[0])
	}, "embedding_grad")
	registerCPU(func(_ *CPU, call *OpCall) (*Tensor, error) {
		a := call.Args
		return crossEntropyGrad(call.pool, a[0], a[1], a[2], call.Kernel.ArgShapes[0][0])
	}, "cross_entropy_grad")
}

// geluGrad is Φ(x) + x·φ(x), the derivative of exact gelu.
func geluGrad(p *hostPool, x *Tensor) *Tensor {
	const invSqrt2Pi = 0.3989422804014327
	f := func(v float64) float64 {
		return 0.5*(1+math.Erf(v*(1/math.Sqrt2))) + v*math.Exp(-0.5*v*v)*invSqrt2Pi
	}
	if in, ok := x.Data.([]float32); ok {
		out := uninitialised(p, x.DType, x.Shape)
		d := out.Data.([]float32)
		parallelSlices(d, in, vecmath.GeluGrad)
		return out
	}
	return mapFloat(x, f)
}

func mapFloat(x *Tensor, f func(float64) float64) *Tensor {
	in := x.Float64s()
	for i, v := range in {
		in[i] = f(v)
	}
	out := NewTensor(x.DType, x.Shape)
	storeFloat64s(out, in)
	return out
}

func softmaxGrad(p *hostPool, y, g *Tensor, axis int) *Tensor {
	outer, n, inner := axisView(y.Shape, axis)
	y32, ok1 := y.Data.([]float32)
	g32, ok2 := g.Data.([]float32)
	if ok1 && ok2 && inner == 1 { // rows: the same float64 arithmetic, no scratch
		out := uninitialised(p, y.DType, y.Shape)
		o := out.Data.([]float32)
		for r := 0; r+n <= len(y32) && n > 0; r += n {
			yr, gr := y32[r:r+n], g32[r:r+n]
			dot := 0.0
			for i, v := range yr {
				dot += float64(v) * float64(gr[i])
			}
			for i, v := range yr {
				o[r+i] = float32(float64(v) * (float64(gr[i]) - dot))
			}
		}
		return out
	}
	yv, gv := p.float64s(y), p.float64s(g)
	o := p.f64(len(yv))
	defer p.done(yv, gv, o)
	for a := 0; a < outer; a++ {
		for c := 0; c < inner; c++ {
			base := a*n*inner + c
			dot := 0.0
			for i := 0; i < n; i++ {
				dot += yv[base+i*inner] * gv[base+i*inner]
			}
			for i := 0; i < n; i++ {
				k := base + i*inner
				o[k] = yv[k] * (gv[k] - dot)
			}
		}
	}
	out := uninitialised(p, y.DType, y.Shape)
	storeFloat64s(out, o)
	return out
}

// normalizeRows computes x̂ = (x − μ)/σ over the last dim, or, given d, the
// backward (d − mean(d) − x̂·mean(d·x̂))/σ. f32 tensors are widened one row
// at a time (the same arithmetic as widening them whole).
func normalizeRows(p *hostPool, x, d *Tensor, eps float64) *Tensor {
	h := x.Shape[len(x.Shape)-1]
	out := uninitialised(p, x.DType, x.Shape)
	x32, ok := x.Data.([]float32)
	var d32 []float32
	if d != nil {
		d32, ok = d.Data.([]float32)
		ok = ok && x32 != nil
	}
	if ok && h > 0 { // rows read and written in place, in float64
		o := out.Data.([]float32)
		for r := 0; r < len(x32)/h; r++ {
			var dr []float32
			if d32 != nil {
				dr = d32[r*h : (r+1)*h]
			}
			normalizeRow(o[r*h:(r+1)*h], x32[r*h:(r+1)*h], dr, eps)
		}
		return out
	}
	in := p.float64s(x)
	var dv []float64
	if d != nil {
		dv = p.float64s(d)
	}
	o := p.f64(len(in))
	defer p.done(in, dv, o)
	for r := 0; h > 0 && r < len(in)/h; r++ {
		var dr []float64
		if dv != nil {
			dr = dv[r*h : (r+1)*h]
		}
		normalizeRow(o[r*h:(r+1)*h], in[r*h:(r+1)*h], dr, eps)
	}
	storeFloat64s(out, o)
	return out
}

// normalizeRow is normalizeRows on one row (d nil: the forward), in
// float64 whatever T (f32 rows widen exactly as they are read), each
// result rounded once to T.
func normalizeRow[T float32 | float64](o, row, d []T, eps float64) {
	h := float64(len(row))
	mean, inv := rowMoments(row, eps)
	o = o[:len(row)]
	if d == nil {
		for i, v := range row {
			o[i] = T((float64(v) - mean) * inv)
		}
		return
	}
	d = d[:len(row)]
	md := sum4(d) / h
	var m0, m1 float64 // Σ d·x̂ in two partial sums (see sum4)
	i := 0
	for ; i+2 <= len(row); i += 2 {
		m0 += float64(d[i]) * (float64(row[i]) - mean) * inv
		m1 += float64(d[i+1]) * (float64(row[i+1]) - mean) * inv
	}
	if i < len(row) {
		m0 += float64(d[i]) * (float64(row[i]) - mean) * inv
	}
	mdx := (m0 + m1) / h
	for i, v := range row {
		o[i] = T((float64(d[i]) - md - (float64(v)-mean)*inv*mdx) * inv)
	}
}

func maxGrad(x, y, g *Tensor, axis int) *Tensor {
	xv, yv, gv := x.Float64s(), y.Float64s(), g.Float64s()
	outer, n, inner := 1, len(xv), 1
	if axis >= 0 {
		outer, n, inner = axisView(x.Shape, axis)
	}
	o := make([]float64, len(xv))
	for a := 0; a < outer; a++ {
		for c := 0; c < inner; c++ {
			m, gr := yv[a*inner+c], gv[a*inner+c]
			ties := 0
			for i := 0; i < n; i++ {
				if xv[a*n*inner+i*inner+c] == m {
					ties++
				}
			}
			for i := 0; i < n; i++ {
				if k := a*n*inner + i*inner + c; xv[k] == m {
					o[k] = gr / float64(ties)
				}
			}
		}
	}
	out := NewTensor(x.DType, x.Shape)
	storeFloat64s(out, o)
	return out
}

func broadcastTo(x *Tensor, shape []int) *Tensor {
	out := NewTensor(x.DType, shape)
	st := broadcastStrides(x.Shape, shape)
	n := out.Numel()
	in := x.Float64s()
	o := make([]float64, n)
	idx := make([]int, len(shape))
	for i := 0; i < n; i++ {
		k := 0
		for d := range idx {
			k += idx[d] * st[d]
		}
		o[i] = in[k]
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	storeFloat64s(out, o)
	return out
}

// embeddingGrad scatter-adds g's rows into the local block of the table
// gradient: rows [rowOff, rowOff+shape[0]) of the vocabulary.
// embeddingGrad, crossEntropyGrad (and the forward kernels) take their
// float64 working copies and outputs from the rank's arena p: they were a
// third of the bytes a tiny-GPT step left to the collector (issue 10).
func embeddingGrad(p *hostPool, idx, g *Tensor, shape []int, rowOff int) (*Tensor, error) {
	h := shape[1]
	ix := indices(idx)
	gv := p.float64s(g)
	o := p.f64(shape[0] * h)
	defer p.done(gv, o)
	for i, id := range ix {
		r := int(id) - rowOff
		if r < 0 || r >= shape[0] {
			continue
		}
		for j := 0; j < h; j++ {
			o[r*h+j] += gv[i*h+j]
		}
	}
	out := uninitialised(p, g.DType, shape)
	storeFloat64s(out, o)
	return out, nil
}

func crossEntropyGrad(p *hostPool, logits, labels, g *Tensor, globalN int) (*Tensor, error) {
	n, c := logits.Shape[0], logits.Shape[1]
	in := p.float64s(logits)
	lab := indices(labels)
	scale := g.Float64s()[0] / float64(globalN)
	o := p.f64(len(in))
	defer p.done(in, o)
	exp, l32 := expFor(logits.DType), f32Data(logits)
	e := p.f64(c)
	defer p.done(e)
	for r := 0; r < n; r++ {
		if lab[r] < 0 || lab[r] >= int64(c) {
			return nil, fmt.Errorf("cross_entropy label %d out of range [0, %d)", lab[r], c)
		}
		_, s := expRow(e, in[r*c:(r+1)*c], rowOf(l32, r, c), exp)
		for i, v := range e {
			p := v / s
			if int64(i) == lab[r] {
				p--
			}
			o[r*c+i] = p * scale
		}
	}
	out := uninitialised(p, logits.DType, logits.Shape)
	storeFloat64s(out, o)
	return out, nil
}
