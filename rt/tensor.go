package rt

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/meshrun/meshrun/internal/size"
	"github.com/meshrun/meshrun/ir"
)

// Tensor is a dense, row-major array in one device's memory. Data is
// []float32, []float64, []int32 or []int64 according to DType.
type Tensor struct {
	DType ir.DType
	Shape []int
	Data  any
	// home is the pool that may recycle Data once the tensor is freed: set
	// for a kernel's output on a recycling backend, cleared when the
	// buffer is shared with another rank (see escape).
	home *hostPool
	// view says Data is not the tensor's own (a block of a loaded file the
	// cache keeps: blockView): no pool ever takes it back.
	view bool
}

// Num is every element type the CPU backend stores (uint16 holds bf16 and
// f16 bit patterns, which only ever move, never add, as Num).
type Num interface {
	~float32 | ~float64 | ~int32 | ~int64 | ~uint16
}

// Float is the float element types.
type Float interface {
	~float32 | ~float64
}

// numel is a shape's element count. Every shape the runtime allocates
// comes from a checked graph (ir.Builder admits no uncountable type) or a
// file reader that sized it through package size, so an uncountable one
// here is a bug: it stops the program rather than wrapping into a small
// count and computing on an array of the wrong size.
func numel(shape []int) int {
	// the common case without size.Elements's division per dim (numel
	// runs several times per instruction: 2% of a tiny-GPT mesh step); a
	// zero or negative dim, or a product past the limit, takes the exact
	// path below
	n := uint64(1)
	for _, d := range shape {
		if d <= 0 {
			return numelChecked(shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > size.MaxElements {
			return numelChecked(shape)
		}
		n = lo
	}
	return int(n)
}

func numelChecked(shape []int) int {
	n, ok := size.Elements(shape)
	if !ok {
		// formatted without handing shape to fmt, where it would escape:
		// every caller's shape would then live on the heap (a shape built
		// on a kernel's stack was an allocation per call)
		panic("rt: shape " + ir.ShapeString(shape) + " has no valid element count")
	}
	return n
}

// NewTensor allocates a zero tensor.
func NewTensor(dt ir.DType, shape []int) *Tensor {
	n := numel(shape)
	t := header(dt, shape)
	switch dt {
	case ir.F32:
		t.Data = make([]float32, n)
	case ir.F64:
		t.Data = make([]float64, n)
	case ir.I32:
		t.Data = make([]int32, n)
	case ir.I64:
		t.Data = make([]int64, n)
	case ir.BF16, ir.F16:
		t.Data = make([]uint16, n)
	default:
		panic(fmt.Sprintf("rt: unsupported dtype %s", dt))
	}
	return t
}

// header returns a tensor of dt with a copy of shape and no data. A
// shape of up to four dims lives in the same object as the tensor: one
// allocation instead of two, for every tensor a step makes.
func header(dt ir.DType, shape []int) *Tensor {
	n := len(shape)
	if n > 4 {
		return &Tensor{DType: dt, Shape: append([]int{}, shape...)}
	}
	b := &struct {
		t    Tensor
		dims [4]int
	}{}
	// capacity n: an append to the shape must not write into dims
	b.t = Tensor{DType: dt, Shape: append(b.dims[:0:n], shape...)}
	return &b.t
}

// FromSlice wraps data with a shape.
func FromSlice(shape []int, data any) *Tensor {
	var dt ir.DType
	switch data.(type) {
	case []float32:
		dt = ir.F32
	case []float64:
		dt = ir.F64
	case []int32:
		dt = ir.I32
	case []int64:
		dt = ir.I64
	default:
		panic(fmt.Sprintf("rt: unsupported data %T", data))
	}
	return &Tensor{DType: dt, Shape: append([]int{}, shape...), Data: data}
}

// Numel is the element count.
func (t *Tensor) Numel() int { return numel(t.Shape) }

// Bytes is the storage size.
func (t *Tensor) Bytes() int64 { return int64(t.Numel() * t.DType.Size()) }

// Float64s returns the elements converted to float64 (for comparisons and printing).
func (t *Tensor) Float64s() []float64 {
	out := make([]float64, t.Numel())
	storeInto(out, t)
	return out
}

// storeInto writes t's elements, as float64, into out (len(out) ≥ t's).
func storeInto(out []float64, t *Tensor) {
	switch d := t.Data.(type) {
	case []float32:
		for i, v := range d {
			out[i] = float64(v)
		}
	case []float64:
		copy(out, d)
	case []int32:
		for i, v := range d {
			out[i] = float64(v)
		}
	case []int64:
		for i, v := range d {
			out[i] = float64(v)
		}
	case []uint16:
		for i, v := range widen(t).Data.([]float32) {
			out[i] = float64(v)
		}
	}
}

// Clone deep-copies a tensor.
func (t *Tensor) Clone() *Tensor { return t.cloneIn(nil) }

// cloneIn is Clone into a tensor from pool p.
func (t *Tensor) cloneIn(p *hostPool) *Tensor {
	c := uninitialised(p, t.DType, t.Shape) // every element is written below
	copyData(c, t)
	return c
}

// copyData copies src's elements into dst, of src's dtype and element
// count: one row of copyRows.
func copyData(dst, src *Tensor) {
	copyRows(dst, src, rows{count: 1, len: src.Numel()})
}

// strides of a row-major shape.
func strides(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// copyBlock copies a box of size count from src (shape ss, starting at
// soff) to dst (shape ds, starting at doff).
func copyBlock[T Num](dst []T, ds, doff []int, src []T, ss, soff []int, count []int) {
	if numel(count) == 0 {
		return
	}
	r := len(count)
	if r == 0 {
		dst[0] = src[0]
		return
	}
	dstr, sstr := strides(ds), strides(ss)
	inner := count[r-1]
	idx := make([]int, r-1)
	for {
		di, si := doff[r-1], soff[r-1]
		for k := 0; k < r-1; k++ {
			di += (doff[k] + idx[k]) * dstr[k]
			si += (soff[k] + idx[k]) * sstr[k]
		}
		copy(dst[di:di+inner], src[si:si+inner])
		k := r - 2
		for ; k >= 0; k-- {
			idx[k]++
			if idx[k] < count[k] {
				break
			}
			idx[k] = 0
		}
		if k < 0 {
			return
		}
	}
}

// CopyBlock copies a box between tensors of the same dtype.
func CopyBlock(dst *Tensor, doff []int, src *Tensor, soff []int, count []int) {
	switch d := dst.Data.(type) {
	case []float32:
		copyBlock(d, dst.Shape, doff, src.Data.([]float32), src.Shape, soff, count)
	case []float64:
		copyBlock(d, dst.Shape, doff, src.Data.([]float64), src.Shape, soff, count)
	case []int32:
		copyBlock(d, dst.Shape, doff, src.Data.([]int32), src.Shape, soff, count)
	case []int64:
		copyBlock(d, dst.Shape, doff, src.Data.([]int64), src.Shape, soff, count)
	case []uint16:
		copyBlock(d, dst.Shape, doff, src.Data.([]uint16), src.Shape, soff, count)
	}
}

// Extract returns the box [off, off+count) of t as a new tensor.
func Extract(t *Tensor, off, count []int) *Tensor { return extract(nil, t, off, count) }

// extract is Extract into a tensor from pool p.
func extract(p *hostPool, t *Tensor, off, count []int) *Tensor {
	out := p.zeroed(t.DType, count)
	CopyBlock(out, make([]int, len(count)), t, off, count)
	return out
}

// SplitDim cuts t along dim into pieces of the given lengths.
func SplitDim(t *Tensor, dim int, lens []int) []*Tensor {
	out := make([]*Tensor, len(lens))
	off := make([]int, len(t.Shape))
	for i, l := range lens {
		count := append([]int{}, t.Shape...)
		count[dim] = l
		out[i] = Extract(t, off, count)
		off[dim] += l
	}
	return out
}

// ConcatDim joins tensors along dim.
func ConcatDim(ts []*Tensor, dim int) *Tensor { return concatDim(nil, ts, dim) }

// concatDim is ConcatDim into a tensor from pool p.
func concatDim(p *hostPool, ts []*Tensor, dim int) *Tensor {
	shape := append([]int{}, ts[0].Shape...)
	shape[dim] = 0
	for _, t := range ts {
		shape[dim] += t.Shape[dim]
	}
	out := p.zeroed(ts[0].DType, shape)
	off := make([]int, len(shape))
	for _, t := range ts {
		CopyBlock(out, off, t, make([]int, len(shape)), t.Shape)
		off[dim] += t.Shape[dim]
	}
	return out
}

// sameShape reports equal shapes.
func sameShape(a, b []int) bool { return slices.Equal(a, b) }

// Bits is the tensor's elements as bit patterns, widened to 64 bits: for
// comparing results bit for bit (a NaN compares by its payload, -0 and +0
// differ), as the tests of the collectives and of the GPU's kernels do.
func (t *Tensor) Bits() []uint64 {
	out := make([]uint64, 0, t.Numel())
	switch d := t.Data.(type) {
	case []float32:
		for _, v := range d {
			out = append(out, uint64(math.Float32bits(v)))
		}
	case []float64:
		for _, v := range d {
			out = append(out, math.Float64bits(v))
		}
	case []int32:
		for _, v := range d {
			out = append(out, uint64(v))
		}
	case []int64:
		for _, v := range d {
			out = append(out, uint64(v))
		}
	case []uint16:
		for _, v := range d {
			out = append(out, uint64(v))
		}
	}
	return out
}
