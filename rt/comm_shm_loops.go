package rt

// The loops of the shared-memory collectives: copying rows between
// members' buffers, and reducing a chunk tile by tile (a tile of every
// member's input folded into one accumulator while it sits in the first
// level of cache).

import (
	"fmt"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt/vecmath"
)

// rows is a chunk of a tensor cut along one dim: count rows of len
// contiguous elements, at src + i·srcStride in the inputs and at
// dst + i·dstStride in the result.
type rows struct {
	count, len     int
	src, srcStride int
	dst, dstStride int
}

// tile is the elements reduced at a time: 16 KiB of f32, so that the
// accumulator stays in the first level of cache while every member's
// input streams through it.
const tile = 4096

// copyRows copies span's rows of x into out.
func copyRows(out, x *Tensor, span rows) {
	switch d := out.Data.(type) {
	case []float32:
		copyRowsOf(d, x.Data.([]float32), span)
	case []float64:
		copyRowsOf(d, x.Data.([]float64), span)
	case []int32:
		copyRowsOf(d, x.Data.([]int32), span)
	case []int64:
		copyRowsOf(d, x.Data.([]int64), span)
	case []uint16:
		copyRowsOf(d, x.Data.([]uint16), span)
	}
}

func copyRowsOf[T Num](d, s []T, span rows) {
	for i := 0; i < span.count; i++ {
		so, do := span.src+i*span.srcStride, span.dst+i*span.dstStride
		copy(d[do:do+span.len], s[so:so+span.len])
	}
}

// reduceRows reduces span of every member's posted input into out, in the
// ring's order for this member's chunk (see the file comment of
// comm_shm.go).
func (g *Ring) reduceRows(out *Tensor, span rows, op ReduceOp) error {
	return g.reduceRowsFrom(out, span, op, g.Rank+1)
}

// reduceRowsFrom is reduceRows in the ring's order for chunk first−1:
// the running sum starts from member first.
func (g *Ring) reduceRowsFrom(out *Tensor, span rows, op ReduceOp, first int) error {
	in := g.posted().in
	switch d := out.Data.(type) {
	case []float32:
		reduceRowsOf(d, in, first, span, op)
	case []float64:
		reduceRowsOf(d, in, first, span, op)
	case []int32:
		reduceRowsOf(d, in, first, span, op)
	case []int64:
		reduceRowsOf(d, in, first, span, op)
	case []uint16:
		if g.shm.wide == nil {
			g.shm.wide = make([]float32, tile)
		}
		toF32, fromF32 := BF16ToF32, F32ToBF16
		if out.DType == ir.F16 {
			toF32, fromF32 = F16ToF32, F32ToF16
		}
		h := halfReduce{in: in, wide: g.shm.wide, to: toF32, from: fromF32}
		if op == OpSum {
			// like reduceScatterHalf: in f32, in member order, rounded once
			h.first, h.fold, h.round = 0, h.sum, true
		} else {
			h.first, h.fold = first, h.max
		}
		reduceHalf(d, &h, span)
	default:
		return fmt.Errorf("reduce: %s is not supported", out.DType)
	}
	return nil
}

func reduceRowsOf[T Num](d []T, in []*Tensor, first int, span rows, op ReduceOp) {
	p := len(in)
	for i := 0; i < span.count; i++ {
		for j := 0; j < span.len; j += tile {
			w := min(tile, span.len-j)
			so, do := span.src+i*span.srcStride+j, span.dst+i*span.dstStride+j
			acc := d[do : do+w]
			at := func(k int) []T { return in[(first+k)%p].Data.([]T)[so : so+w] }
			k := 1
			switch {
			case op == OpMax || p == 1:
				copy(acc, at(0))
			case p == 2:
				sum2(acc, at(0), at(1)) // the first pass writes, not adds
				k = 2
			default:
				sum3(acc, at(0), at(1), at(2))
				k = 3
			}
			for k < p {
				switch n := min(p-k, 4); {
				case op == OpMax:
					maxInto(acc, at(k))
					k++
				case n == 4:
					add4(acc, at(k), at(k+1), at(k+2), at(k+3))
					k += 4
				case n >= 2:
					add2(acc, at(k), at(k+1))
					k += 2
				default:
					addInto(acc, at(k))
					k++
				}
			}
		}
	}
}

// addInto is the ring's step: the member's own value plus the running sum.
func addInto[T Num](acc, x []T) {
	x = x[:len(acc)]
	if f, ok := any(acc).([]float32); ok {
		add32(f, any(x).([]float32), f)
		return
	}
	for i, v := range x {
		acc[i] = v + acc[i]
	}
}

// sum2 and sum3 start the accumulator from two or three members' values,
// added as addInto would add them to a copy of the first.
func sum2[T Num](acc, a, b []T) {
	a, b = a[:len(acc)], b[:len(acc)]
	if f, ok := any(acc).([]float32); ok {
		add32(f, any(a).([]float32), any(b).([]float32))
		return
	}
	for i := range acc {
		acc[i] = a[i] + b[i]
	}
}

func sum3[T Num](acc, a, b, c []T) {
	a, b, c = a[:len(acc)], b[:len(acc)], c[:len(acc)]
	if f, ok := any(acc).([]float32); ok {
		add32(f, any(a).([]float32), any(b).([]float32))
		add32(f, f, any(c).([]float32))
		return
	}
	for i := range acc {
		acc[i] = a[i] + b[i] + c[i]
	}
}

// add2 and add4 are addInto of two and four members in turn, in one pass
// over the accumulator: the same sums, association and all, with a load
// and a store of the accumulator per element instead of one per member.
// In f32 they take one vector pass per member instead (add32): the tile
// is in the first level of cache, and eight lanes at a time beat one
// pass of scalar adds.
func add2[T Num](acc, a, b []T) {
	a, b = a[:len(acc)], b[:len(acc)]
	if f, ok := any(acc).([]float32); ok {
		add32(f, f, any(a).([]float32))
		add32(f, f, any(b).([]float32))
		return
	}
	for i, v := range acc {
		acc[i] = v + a[i] + b[i]
	}
}

func add4[T Num](acc, a, b, c, d []T) {
	a, b, c, d = a[:len(acc)], b[:len(acc)], c[:len(acc)], d[:len(acc)]
	if f, ok := any(acc).([]float32); ok {
		for _, x := range [...][]T{a, b, c, d} {
			add32(f, f, any(x).([]float32))
		}
		return
	}
	for i, v := range acc {
		acc[i] = v + a[i] + b[i] + c[i] + d[i]
	}
}

// add32 is out[i] = x[i] + y[i] in f32 through vecmath.Binary (AVX2 where
// it runs): the same IEEE addition, operands in the same order, as the
// scalar loops, so a reduction's bits do not depend on which ran.
func add32(out, x, y []float32) { vecmath.Binary('+', out, x, y, false, false) }

// maxInto keeps the running value only where it is greater than the
// member's own (so ties and NaNs resolve as in the ring).
func maxInto[T Num](acc, x []T) {
	x = x[:len(acc)]
	for i, v := range x {
		if !(acc[i] > v) {
			acc[i] = v
		}
	}
}

// halfReduce folds half-precision tiles in f32.
type halfReduce struct {
	in    []*Tensor
	first int
	wide  []float32 // the accumulator, widened
	to    func(uint16) float32
	from  func(float32) uint16
	fold  func(acc []uint16, wide []float32, x []uint16)
	round bool // a sum: acc is rounded from wide at the end
}

// sum adds x into the widened accumulator; the caller rounds at the end.
func (h *halfReduce) sum(_ []uint16, wide []float32, x []uint16) {
	for i, v := range x[:len(wide)] {
		wide[i] += h.to(v)
	}
}

// max keeps the running value where it is greater, as maxInto, comparing
// widened values and keeping the winner's bits.
func (h *halfReduce) max(acc []uint16, wide []float32, x []uint16) {
	for i, v := range x[:len(wide)] {
		if f := h.to(v); !(wide[i] > f) {
			wide[i], acc[i] = f, v
		}
	}
}

func reduceHalf(d []uint16, h *halfReduce, span rows) {
	p := len(h.in)
	for i := 0; i < span.count; i++ {
		for j := 0; j < span.len; j += tile {
			w := min(tile, span.len-j)
			so, do := span.src+i*span.srcStride+j, span.dst+i*span.dstStride+j
			acc, wide := d[do:do+w], h.wide[:w]
			copy(acc, h.in[h.first%p].Data.([]uint16)[so:so+w])
			for k, v := range acc {
				wide[k] = h.to(v)
			}
			for k := 1; k < p; k++ {
				h.fold(acc, wide, h.in[(h.first+k)%p].Data.([]uint16)[so:so+w])
			}
			if h.round {
				for k, f := range wide {
					acc[k] = h.from(f)
				}
			}
		}
	}
}
