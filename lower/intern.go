package lower

import (
	"encoding/binary"
	"math"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// interner hands out one copy of each distinct position text and kernel
// description the spmd pass emits. A pipelined program repeats every op of
// a micro-batch once per micro-batch, and a deep one every layer's ops
// with the same shapes, so most instructions' Where and Kernel equal an
// earlier one's: sharing them saves an allocation per instruction and the
// collector's time to scan it. Nothing modifies an emitted kernel or
// string, so sharing is invisible to the plan's readers (the encoded plan
// is byte-identical).
type interner struct {
	buf     []byte
	wheres  map[string]string
	kernels map[string]*plan.Kernel
	// byPos finds a value's Where without formatting it: by its position
	// and its call chain's array, which the checker shares among the
	// values of one call and a copied micro-batch shares with the first
	byPos map[whereKey]string
	// convByPos is the same for convWhere's texts
	convByPos map[whereKey]string
}

// whereKey is what v.Where() is made of: the position's file, line and
// column, and the call chain (the same array holds the same positions).
type whereKey struct {
	file      string
	line, col int
	calls     *ir.Pos
	n         int
}

func newInterner() *interner {
	return &interner{wheres: map[string]string{}, kernels: map[string]*plan.Kernel{}, byPos: map[whereKey]string{}, convByPos: map[whereKey]string{}}
}

// text returns the interned copy of in.buf's text.
func (in *interner) text() string {
	if s, ok := in.wheres[string(in.buf)]; ok {
		return s
	}
	s := string(in.buf)
	in.wheres[s] = s
	return s
}

// posKey is the whereKey of a position and call chain.
func posKey(pos ir.Pos, calls []ir.Pos) whereKey {
	k := whereKey{file: pos.Filename, line: pos.Line, col: pos.Column, n: len(calls)}
	if k.n > 0 {
		k.calls = &calls[0]
	}
	return k
}

// where is v.Where(), shared.
func (in *interner) where(v *ir.Value) string {
	k := posKey(v.Pos, v.Calls)
	if s, ok := in.byPos[k]; ok {
		return s
	}
	in.buf = v.AppendWhere(in.buf[:0])
	s := in.text()
	in.byPos[k] = s
	return s
}

// convWhere is the position of a conversion with its call sites, each as
// " (called from POS)".
func (in *interner) convWhere(c *Conversion) string {
	k := posKey(c.Pos, c.Calls)
	if s, ok := in.convByPos[k]; ok {
		return s
	}
	in.buf = ir.AppendPos(in.buf[:0], c.Pos)
	for _, cp := range c.Calls {
		in.buf = ir.AppendPos(append(in.buf, " (called from "...), cp)
		in.buf = append(in.buf, ')')
	}
	s := in.text()
	in.convByPos[k] = s
	return s
}

// kernel is KernelOf(v), shared among values with equal kernels.
func (in *interner) kernel(v *ir.Value) *plan.Kernel {
	in.buf = kernelKey(in.buf[:0], v)
	if k, ok := in.kernels[string(in.buf)]; ok {
		return k
	}
	k := KernelOf(v)
	in.kernels[string(in.buf)] = k
	return k
}

// kernelKey appends what KernelOf(v) is made of: the op, every attribute
// but Init (which KernelOf drops), the dtypes and shapes of the value and
// its arguments. TestKernelKeyCoversKernel fails when plan.Kernel or
// ir.Attrs gains a field this does not encode. (TransA and TransB are not
// KernelOf's: the gemm fusion pass sets them on its own copy.)
func kernelKey(b []byte, v *ir.Value) []byte {
	ints := func(xs []int) {
		if xs == nil {
			b = append(b, 0) // nil and empty differ in a kernel (DeepEqual, gob)
			return
		}
		b = binary.AppendUvarint(b, uint64(len(xs))+1)
		for _, x := range xs {
			b = binary.AppendVarint(b, int64(x))
		}
	}
	a := &v.Attrs
	b = append(append(b, v.Op...), 0)
	b = append(b, byte(v.Type.DType))
	ints(v.Type.Shape)
	b = binary.AppendVarint(b, int64(a.Axis))
	ints(a.Perm)
	b = binary.AppendVarint(b, int64(a.Start))
	b = binary.AppendVarint(b, int64(a.End))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a.Eps))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a.Scalar))
	b = append(b, boolByte(a.Regather))
	ints(a.Axes)
	b = binary.AppendVarint(b, int64(a.Root))
	ints(a.Shift)
	b = binary.AppendVarint(b, int64(a.Dim2))
	b = appendNd(b, a.Place)
	b = binary.AppendUvarint(b, uint64(len(v.Args)))
	for _, x := range v.Args {
		b = append(b, byte(x.Type.DType))
		ints(x.Type.Shape)
	}
	return b
}

// appendNd appends a placement, telling nil from empty.
func appendNd(b []byte, nd sbp.NdSBP) []byte {
	if nd == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(nd))+1)
	for _, e := range nd {
		b = append(b, byte(e.Kind), byte(e.Reduce))
		b = binary.AppendVarint(b, int64(e.Dim))
	}
	return b
}

func boolByte(x bool) byte {
	if x {
		return 1
	}
	return 0
}

// window hands out pieces of large arrays: one allocation per chunkSize
// elements instead of one per value (an instruction's argument slots,
// explain's inputs of an op). Each piece's capacity is its length, so an
// append to one copies it rather than running into the next.
type window[T any] struct{ buf []T }

const chunkSize = 4096

func (c *window[T]) take(n int) []T {
	if n == 0 {
		return []T{}
	}
	if len(c.buf)+n > cap(c.buf) {
		c.buf = make([]T, 0, max(chunkSize, n))
	}
	start := len(c.buf)
	c.buf = c.buf[:start+n]
	return c.buf[start : start+n : start+n]
}
