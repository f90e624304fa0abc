package cuda

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// Slice implements rt.Backend: the box [off, off+count) of x, copied on
// the device by mr_copy_box.
func (be *Backend) Slice(x rt.Buffer, off, count []int) (rt.Buffer, error) {
	bufs, done, err := be.onDevice([]rt.Buffer{x})
	if err != nil {
		return nil, err
	}
	defer done()
	src := bufs[0]
	if len(off) != len(src.shape) || len(count) != len(src.shape) {
		return nil, fmt.Errorf("cuda: slice of %s at %v size %v: ranks differ", ir.ShapeString(src.shape), off, count)
	}
	for i := range off {
		if off[i] < 0 || count[i] < 0 || off[i]+count[i] > src.shape[i] {
			return nil, fmt.Errorf("cuda: slice of %s at %v size %v is out of bounds", ir.ShapeString(src.shape), off, count)
		}
	}
	out, err := be.newBuf(src.dt, count)
	if err != nil {
		return nil, err
	}
	es := uint64(src.dt.Size())
	corner := src.ptr + uint64(offset(src.shape, off))*es
	err = be.copyBox(src.dt, out.ptr, denseStrides(count), corner, denseStrides(src.shape), count)
	if err != nil {
		be.Free(out)
	}
	if err == errBoxDims {
		return be.onHost(src, func(t *rt.Tensor) (rt.Buffer, error) { return be.cpu.Slice(t, off, count) })
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Embed implements rt.Backend: a buffer of shape holding x at off, the
// rest zero (cuMemsetD8) or -inf (mr_fill).
func (be *Backend) Embed(x rt.Buffer, shape, off []int, fill rt.Fill) (rt.Buffer, error) {
	bufs, done, err := be.onDevice([]rt.Buffer{x})
	if err != nil {
		return nil, err
	}
	defer done()
	src := bufs[0]
	if len(off) != len(shape) || len(src.shape) != len(shape) {
		return nil, fmt.Errorf("cuda: embed of %s into %s at %v: ranks differ", ir.ShapeString(src.shape), ir.ShapeString(shape), off)
	}
	for i := range off {
		if off[i] < 0 || off[i]+src.shape[i] > shape[i] {
			return nil, fmt.Errorf("cuda: embed of %s into %s at %v is out of bounds", ir.ShapeString(src.shape), ir.ShapeString(shape), off)
		}
	}
	out, err := be.newBuf(src.dt, shape)
	if err != nil {
		return nil, err
	}
	if bits, ok := negInfBits(src.dt); ok && fill == rt.FillNegInf {
		err = be.fillBits(out, bits)
	} else {
		err = be.dev.zero(out.ptr, out.bytes)
	}
	es := uint64(src.dt.Size())
	if err == nil {
		corner := out.ptr + uint64(offset(shape, off))*es
		err = be.copyBox(src.dt, corner, denseStrides(shape), src.ptr, denseStrides(src.shape), src.shape)
	}
	if err != nil {
		be.Free(out)
	}
	if err == errBoxDims {
		return be.onHost(src, func(t *rt.Tensor) (rt.Buffer, error) { return be.cpu.Embed(t, shape, off, fill) })
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// onHost runs a CPU backend step on a host copy of x and copies the
// result in: boxes with more than MaxDims uneven dims.
func (be *Backend) onHost(x *Buf, step func(*rt.Tensor) (rt.Buffer, error)) (rt.Buffer, error) {
	t, err := x.ReadHost()
	if err != nil {
		return nil, err
	}
	r, err := step(t)
	if err != nil {
		return nil, err
	}
	return buffer(be.upload(r.(*rt.Tensor)))
}

// transpose permutes x's dims (out dim i is x's dim perm[i]): a box copy
// of the output's shape reading x with its strides permuted.
func (be *Backend) transpose(x *Buf, perm []int) (rt.Buffer, error) {
	if len(perm) != len(x.shape) {
		return nil, fmt.Errorf("cuda: transpose of %s by %v: ranks differ", ir.ShapeString(x.shape), perm)
	}
	shape, src := make([]int, len(perm)), make([]int, len(perm))
	xs := denseStrides(x.shape)
	for i, p := range perm {
		if p < 0 || p >= len(perm) {
			return nil, fmt.Errorf("cuda: transpose of %s by %v: no dim %d", ir.ShapeString(x.shape), perm, p)
		}
		shape[i], src[i] = x.shape[p], xs[p]
	}
	return be.readBox(x, shape, src, func(t *rt.Tensor) (rt.Buffer, error) {
		return be.cpu.Compute(&rt.OpCall{Kernel: &plan.Kernel{Op: "transpose", DType: x.dt, Attrs: ir.Attrs{Perm: perm}}, Args: []*rt.Tensor{t}})
	})
}

// readBox is a new buffer of shape read from x with the source strides
// src (a permutation, or zeros along broadcast dims); a box the copy
// kernel cannot describe runs onHost instead.
func (be *Backend) readBox(x *Buf, shape, src []int, onHost func(t *rt.Tensor) (rt.Buffer, error)) (rt.Buffer, error) {
	out, err := be.newBuf(x.dt, shape)
	if err != nil {
		return nil, err
	}
	err = be.copyBox(x.dt, out.ptr, denseStrides(shape), x.ptr, src, shape)
	if err != nil {
		be.Free(out)
	}
	if err == errBoxDims {
		return be.onHost(x, onHost)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// constant is a scalar (shape []) holding v rounded to dt (f32 or f64).
func (be *Backend) constant(dt ir.DType, v float64) (rt.Buffer, error) {
	out, err := be.newBuf(dt, nil)
	if err != nil {
		return nil, err
	}
	bits := math.Float64bits(v)
	if dt == ir.F32 {
		bits = uint64(math.Float32bits(float32(v)))
	}
	if err := be.fillBits(out, bits); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// negInfBits is -inf's bit pattern in dt; integers have none (the CPU
// backend leaves them zero).
func negInfBits(dt ir.DType) (uint64, bool) {
	switch dt {
	case ir.F32:
		return uint64(math.Float32bits(float32(math.Inf(-1)))), true
	case ir.F64:
		return math.Float64bits(math.Inf(-1)), true
	case ir.BF16:
		return 0xff80, true
	case ir.F16:
		return 0xfc00, true
	}
	return 0, false
}

// moveSuffix names the data-movement kernel for an element size.
func moveSuffix(dt ir.DType) (string, error) {
	switch dt.Size() {
	case 2:
		return "b2", nil
	case 4:
		return "b4", nil
	case 8:
		return "b8", nil
	}
	return "", fmt.Errorf("cuda: no copy kernel for %s (%d-byte elements)", dt, dt.Size())
}

func (be *Backend) fillBits(out *Buf, bits uint64) error {
	s, err := moveSuffix(out.dt)
	if err != nil {
		return err
	}
	n := out.bytes / int64(out.dt.Size())
	if n == 0 {
		return nil
	}
	return be.dev.launch("mr_fill_"+s, n, new(params).ptr(out.ptr).i64(n).u64(bits))
}

// errBoxDims: a box the copy kernel cannot describe (Slice and Embed then
// move it on the host).
var errBoxDims = errors.New("cuda: box has too many dims")

// copyBox copies the box of shape box from src (strides ss, elements) to
// dst (strides ds); both pointers are at the box's corner. Size-1 dims are
// dropped and a dim both sides walk contiguously from the previous one is
// merged into it; what remains must fit MaxDims.
func (be *Backend) copyBox(dt ir.DType, dst uint64, ds []int, src uint64, ss []int, box []int) error {
	s, err := moveSuffix(dt)
	if err != nil {
		return err
	}
	var bc Broadcast
	n := int64(1)
	for i, d := range box {
		n *= int64(d)
		if d == 1 {
			continue
		}
		k := bc.NDim - 1
		if k >= 0 && bc.A[k] == int64(ds[i]*d) && bc.B[k] == int64(ss[i]*d) {
			bc.Shape[k] *= int64(d)
			bc.A[k], bc.B[k] = int64(ds[i]), int64(ss[i])
			continue
		}
		if bc.NDim == MaxDims {
			return errBoxDims
		}
		bc.Shape[bc.NDim], bc.A[bc.NDim], bc.B[bc.NDim] = int64(d), int64(ds[i]), int64(ss[i])
		bc.NDim++
	}
	if n == 0 {
		return nil
	}
	return be.dev.launch("mr_copy_box_"+s, n, new(params).ptr(dst).ptr(src).i64(n).bcast(&bc))
}

func denseStrides(shape []int) []int {
	st := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

func offset(shape, off []int) int {
	o := 0
	for i, s := range denseStrides(shape) {
		o += off[i] * s
	}
	return o
}

// concat joins xs along dim: a box copy of each into its place.
// sameBut says a and b have the same rank and dims except dim: the
// pieces of a concat, which the copy would otherwise write past the
// output with.
func sameBut(a, b []int, dim int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if i != dim && a[i] != b[i] {
			return false
		}
	}
	return true
}

func (be *Backend) concat(k *plan.Kernel, xs []*Buf) (rt.Buffer, error) {
	dim := k.Attrs.Axis
	shape := slices.Clone(xs[0].shape)
	if dim < 0 || dim >= len(shape) {
		return nil, fmt.Errorf("cuda: concat along axis %d of %s", dim, ir.ShapeString(shape))
	}
	shape[dim] = 0
	for _, x := range xs {
		if !sameBut(x.shape, xs[0].shape, dim) {
			return nil, fmt.Errorf("cuda: concat along axis %d of %s and %s", dim, ir.ShapeString(xs[0].shape), ir.ShapeString(x.shape))
		}
		shape[dim] += x.shape[dim]
	}
	out, err := be.newBuf(k.DType, shape)
	if err != nil {
		return nil, err
	}
	off := make([]int, len(shape))
	es := uint64(k.DType.Size())
	for _, x := range xs {
		corner := out.ptr + uint64(offset(shape, off))*es
		if err = be.copyBox(k.DType, corner, denseStrides(shape), x.ptr, denseStrides(x.shape), x.shape); err != nil {
			break
		}
		off[dim] += x.shape[dim]
	}
	if err != nil {
		be.Free(out)
		if err == errBoxDims {
			return be.fallback(k, bufsOf(xs), nil, sbp.Block{})
		}
		return nil, err
	}
	return out, nil
}

// broadcastTo repeats x over shape (NumPy broadcasting): a box copy whose
// source strides are 0 along the broadcast dims.
func (be *Backend) broadcastTo(x *Buf, shape []int) (rt.Buffer, error) {
	if len(x.shape) > len(shape) {
		return nil, fmt.Errorf("cuda: broadcast of %s to %s", ir.ShapeString(x.shape), ir.ShapeString(shape))
	}
	src, xs := make([]int, len(shape)), denseStrides(x.shape)
	for i := range shape {
		j := i - (len(shape) - len(x.shape))
		switch {
		case j < 0 || x.shape[j] == 1:
		case x.shape[j] == shape[i]:
			src[i] = xs[j]
		default:
			return nil, fmt.Errorf("cuda: broadcast of %s to %s", ir.ShapeString(x.shape), ir.ShapeString(shape))
		}
	}
	return be.readBox(x, shape, src, func(t *rt.Tensor) (rt.Buffer, error) {
		k := &plan.Kernel{Op: "broadcast_to", DType: x.dt, Shape: shape}
		return be.cpu.Compute(&rt.OpCall{Kernel: k, Args: []*rt.Tensor{t}, Out: sbp.Block{Off: make([]int, len(shape)), Len: shape}})
	})
}

// arange is the f32 tensor 0, 1, 2, ... of shape.
func (be *Backend) arange(shape []int) (rt.Buffer, error) {
	out, err := be.newBuf(ir.F32, shape)
	if err != nil {
		return nil, err
	}
	n := int64(count(shape))
	if n > 0 {
		err = be.dev.launch("mr_arange_f32", n, new(params).ptr(out.ptr).i64(n))
	}
	if err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// axisIndex is the device's coordinate along a split axis, [1] f32: its
// block's offset in [0, p).
func (be *Backend) axisIndex(out sbp.Block) (rt.Buffer, error) {
	if len(out.Off) < 1 {
		return nil, fmt.Errorf("cuda: axis_index without a block")
	}
	b, err := be.newBuf(ir.F32, []int{1})
	if err != nil {
		return nil, err
	}
	if err := be.fillBits(b, uint64(math.Float32bits(float32(out.Off[0])))); err != nil {
		be.Free(b)
		return nil, err
	}
	return b, nil
}

// cast converts between f32 and f64 (rounding to nearest); to the same
// dtype it is a copy.
func (be *Backend) cast(k *plan.Kernel, x *Buf) (rt.Buffer, error) {
	out, err := be.newBuf(k.DType, x.shape)
	if err != nil {
		return nil, err
	}
	n := int64(count(x.shape))
	switch {
	case x.dt == k.DType:
		err = be.dev.copyOnDevice(out.ptr, x.ptr, x.bytes)
	case n > 0:
		err = be.dev.launch(fmt.Sprintf("mr_cast_%s_%s", x.dt, k.DType), n, new(params).ptr(out.ptr).ptr(x.ptr).i64(n))
	}
	if err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

func bufsOf(xs []*Buf) []rt.Buffer {
	out := make([]rt.Buffer, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
