package cuda

import (
	"fmt"
	"math"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
)

// The backend's native ops: each checks its operands as the CPU kernel
// does, allocates the result and issues the kernel or GEMM on the stream.

func (be *Backend) binary(k *plan.Kernel, a, b *Buf) (rt.Buffer, error) {
	bc, shape, err := BroadcastFor(a.shape, b.shape)
	if err != nil {
		return nil, err
	}
	out, err := be.newBuf(k.DType, shape)
	if err != nil {
		return nil, err
	}
	n := out.bytes / int64(k.DType.Size())
	name, _ := KernelName(k.Op, k.DType)
	p := new(params).ptr(out.ptr).ptr(a.ptr).ptr(b.ptr).i64(n).bcast(&bc)
	if err := be.dev.launch(name, n, p); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

func (be *Backend) unary(k *plan.Kernel, x *Buf) (rt.Buffer, error) {
	out, err := be.newBuf(k.DType, x.shape)
	if err != nil {
		return nil, err
	}
	n := out.bytes / int64(k.DType.Size())
	name, _ := KernelName(k.Op, k.DType)
	if err := be.dev.launch(name, n, new(params).ptr(out.ptr).ptr(x.ptr).i64(n)); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// reshape is a copy, not a view, as on the CPU (every slot owns its
// storage, so the memory accounting counts what is held).
func (be *Backend) reshape(x *Buf, shape []int) (rt.Buffer, error) {
	out, err := be.newBuf(x.dt, shape)
	if err != nil {
		return nil, err
	}
	if out.bytes != x.bytes {
		be.Free(out)
		return nil, fmt.Errorf("reshape: local block of %s cannot become %s", ir.ShapeString(x.shape), ir.ShapeString(shape))
	}
	if err := be.dev.copyOnDevice(out.ptr, x.ptr, x.bytes); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// matmulFused is matmul for a kernel whose operands lower's gemm fusion
// may have left stored transposed (plan.Kernel.TransA, TransB): such an
// operand is transposed on the device into a temporary first, then the
// plain GEMM runs. (cuBLAS could read it transposed through its flags; the
// copy keeps one GEMM path here, at the cost of the copy the CPU saves.)
func (be *Backend) matmulFused(k *plan.Kernel, a, b *Buf) (rt.Buffer, error) {
	if !k.TransA && !k.TransB {
		return be.matmul(k, a, b)
	}
	ops := [2]*Buf{a, b}
	for i, tr := range [2]bool{k.TransA, k.TransB} {
		if !tr {
			continue
		}
		r := len(ops[i].shape)
		if r < 2 {
			return nil, fmt.Errorf("matmul of %s and %s: both need two dims", ir.ShapeString(a.shape), ir.ShapeString(b.shape))
		}
		perm := make([]int, r)
		for d := range perm {
			perm[d] = d
		}
		perm[r-2], perm[r-1] = r-1, r-2
		t, err := be.transpose(ops[i], perm)
		if err != nil {
			return nil, err
		}
		defer be.Free(t)
		tb, ok := t.(*Buf)
		if !ok {
			return nil, fmt.Errorf("cuda: a transpose gave a %T", t)
		}
		ops[i] = tb
	}
	plain := *k
	plain.TransA, plain.TransB = false, false
	return be.matmul(&plain, ops[0], ops[1])
}

// matmul multiplies the last two dims with NumPy batch broadcasting, as
// the CPU's: with no batch dims on B, A's batch folds into its rows (one
// GEMM); batch dims each operand has in full or not at all are one
// strided batched GEMM (stride 0 for the missing one); any other
// broadcast is a GEMM per batch.
func (be *Backend) matmul(k *plan.Kernel, a, b *Buf) (rt.Buffer, error) {
	ra, rb := len(a.shape), len(b.shape)
	if ra < 2 || rb < 2 {
		return nil, fmt.Errorf("matmul of %s and %s: both need two dims", ir.ShapeString(a.shape), ir.ShapeString(b.shape))
	}
	m, kk, n := a.shape[ra-2], a.shape[ra-1], b.shape[rb-1]
	if b.shape[rb-2] != kk {
		return nil, fmt.Errorf("local inner dims differ: %s @ %s", ir.ShapeString(a.shape), ir.ShapeString(b.shape))
	}
	ab, bb := a.shape[:ra-2], b.shape[:rb-2]
	batch, ok := ops.Broadcast(ab, bb)
	if !ok {
		return nil, fmt.Errorf("local batch dims differ: %s @ %s", ir.ShapeString(a.shape), ir.ShapeString(b.shape))
	}
	out, err := be.newBuf(k.DType, append(append([]int{}, batch...), m, n))
	if err != nil {
		return nil, err
	}
	nb := count(batch)
	if m == 0 || n == 0 || nb == 0 || kk == 0 {
		if err := be.dev.zero(out.ptr, out.bytes); err != nil {
			be.Free(out)
			return nil, err
		}
		return out, nil
	}
	es := uint64(k.DType.Size())
	switch {
	case rb == 2:
		err = be.dev.rowMajorGemm(k.DType, m*count(ab), n, kk, 1, a.ptr, b.ptr, out.ptr, 0, 0)
	case whole(ab, batch) && whole(bb, batch):
		err = be.dev.rowMajorGemm(k.DType, m, n, kk, nb, a.ptr, b.ptr, out.ptr,
			stride(ab, m*kk), stride(bb, kk*n))
	default:
		as, bs := batchStrides(ab, batch), batchStrides(bb, batch)
		idx := make([]int, len(batch))
		for i := 0; i < nb && err == nil; i++ {
			ao, bo := 0, 0
			for d := range idx {
				ao += idx[d] * as[d]
				bo += idx[d] * bs[d]
			}
			err = be.dev.rowMajorGemm(k.DType, m, n, kk, 1, a.ptr+uint64(ao*m*kk)*es, b.ptr+uint64(bo*kk*n)*es,
				out.ptr+uint64(i*m*n)*es, 0, 0)
			for d := len(idx) - 1; d >= 0; d-- {
				if idx[d]++; idx[d] < batch[d] {
					break
				}
				idx[d] = 0
			}
		}
	}
	if err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// whole: an operand's batch dims are all of batch, or all ones (then its
// one matrix serves every batch).
func whole(dims, batch []int) bool {
	if count(dims) == 1 {
		return true
	}
	if len(dims) != len(batch) {
		return false
	}
	for i := range dims {
		if dims[i] != batch[i] {
			return false
		}
	}
	return true
}

// stride is an operand's batch stride in elements: 0 when broadcast.
func stride(dims []int, mat int) int64 {
	if count(dims) == 1 {
		return 0
	}
	return int64(mat)
}

func count(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// batchStrides are an operand's batch dims' strides, in matrices, over
// the broadcast batch (0 along a dim it lacks or has as 1).
func batchStrides(dims, batch []int) []int {
	out := make([]int, len(batch))
	st := 1
	for i := len(dims) - 1; i >= 0; i-- {
		j := i + len(batch) - len(dims)
		if dims[i] != 1 {
			out[j] = st
		}
		st *= dims[i]
	}
	return out
}

// adam runs one of Adam's fused ops (optim.cu): an elementwise kernel
// over the first argument's shape; the others are that shape too (m, g,
// v) or one-element scalars.
func (be *Backend) adam(k *plan.Kernel, a []*Buf) (rt.Buffer, error) {
	n := int64(count(a[0].shape))
	for i, b := range a {
		want := n
		if k.Op == "adam_moment" || k.Op == "adam_moment2" {
			if i == 2 {
				want = 1
			}
		} else if i >= 3 {
			want = 1
		}
		if int64(count(b.shape)) != want {
			return nil, fmt.Errorf("cuda: %s: argument %d is %s, want %d elements", k.Op, i, ir.ShapeString(b.shape), want)
		}
	}
	out, err := be.newBuf(k.DType, a[0].shape)
	if err != nil {
		return nil, err
	}
	name, _ := KernelName(k.Op, k.DType)
	p := new(params).ptr(out.ptr)
	for _, b := range a {
		p.ptr(b.ptr)
	}
	if err := be.dev.launch(name, n, p.i64(n)); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// reduce is sum, mean or max over Attrs.Axis (all of x when negative), as
// the CPU: in double, in the CPU's order, mean dividing by the reduced
// dim's global length (k.ArgShapes: x may be a shard).
func (be *Backend) reduce(k *plan.Kernel, x *Buf) (rt.Buffer, error) {
	axis := k.Attrs.Axis
	outer, n, inner := 1, count(x.shape), 1
	var shape []int
	div := float64(count(k.ArgShapes[0]))
	if axis >= 0 {
		if axis >= len(x.shape) {
			return nil, fmt.Errorf("cuda: %s over axis %d of %s", k.Op, axis, ir.ShapeString(x.shape))
		}
		outer, n, inner = count(x.shape[:axis]), x.shape[axis], count(x.shape[axis+1:])
		shape = append(append([]int{}, x.shape[:axis]...), x.shape[axis+1:]...)
		div = float64(k.ArgShapes[0][axis])
	}
	init := 0.0
	if k.Op == "max" {
		init = math.Inf(-1)
	}
	out, err := be.newBuf(k.DType, shape)
	if err != nil {
		return nil, err
	}
	name, _ := KernelName(k.Op, k.DType)
	p := new(params).ptr(out.ptr).ptr(x.ptr).i64(int64(outer)).i64(int64(n)).i64(int64(inner)).
		u64(math.Float64bits(init)).u64(math.Float64bits(div))
	if err := be.dev.launch(name, int64(outer*inner), p); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// mse is Σ(a−b)² over the local blocks divided by the global element
// count, in double, one thread (as the CPU: the same order).
func (be *Backend) mse(k *plan.Kernel, a, b *Buf) (rt.Buffer, error) {
	if count(a.shape) != count(b.shape) {
		return nil, fmt.Errorf("cuda: mse of %s and %s", ir.ShapeString(a.shape), ir.ShapeString(b.shape))
	}
	out, err := be.newBuf(k.DType, nil)
	if err != nil {
		return nil, err
	}
	name, _ := KernelName("mse", k.DType)
	p := new(params).ptr(out.ptr).ptr(a.ptr).ptr(b.ptr).i64(int64(count(a.shape))).
		u64(math.Float64bits(float64(count(k.ArgShapes[0]))))
	if err := be.dev.launch(name, 1, p); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// softmax (or log_softmax) over Attrs.Axis, one thread per row (nn.cu).
func (be *Backend) softmax(k *plan.Kernel, x *Buf) (rt.Buffer, error) {
	axis := k.Attrs.Axis
	if axis < 0 || axis >= len(x.shape) {
		return nil, fmt.Errorf("cuda: %s over axis %d of %s", k.Op, axis, ir.ShapeString(x.shape))
	}
	outer, n, inner := count(x.shape[:axis]), x.shape[axis], count(x.shape[axis+1:])
	out, err := be.newBuf(k.DType, x.shape)
	if err != nil {
		return nil, err
	}
	name, _ := KernelName(k.Op, k.DType)
	p := new(params).ptr(out.ptr).ptr(x.ptr).i64(int64(outer)).i64(int64(n)).i64(int64(inner)).
		u64(math.Float64bits(math.Inf(-1)))
	if err := be.dev.launch(name, int64(outer*inner), p); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// layernorm normalises the rows of x's last dim (nn.cu), one thread per row.
func (be *Backend) layernorm(k *plan.Kernel, x, g, b *Buf) (rt.Buffer, error) {
	if len(x.shape) == 0 {
		return nil, fmt.Errorf("cuda: layernorm of a scalar")
	}
	h := x.shape[len(x.shape)-1]
	if count(g.shape) != h || count(b.shape) != h {
		return nil, fmt.Errorf("cuda: layernorm of %s with gamma %s and beta %s", ir.ShapeString(x.shape), ir.ShapeString(g.shape), ir.ShapeString(b.shape))
	}
	out, err := be.newBuf(k.DType, x.shape)
	if err != nil {
		return nil, err
	}
	rows := 0
	if h > 0 {
		rows = count(x.shape) / h
	}
	name, _ := KernelName("layernorm", k.DType)
	p := new(params).ptr(out.ptr).ptr(x.ptr).ptr(g.ptr).ptr(b.ptr).i64(int64(rows)).i64(int64(h)).
		u64(math.Float64bits(k.Attrs.Eps))
	if err := be.dev.launch(name, int64(rows), p); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// softmaxGrad is y·(g − Σ y·g) over Attrs.Axis, one thread per row (nn.cu).
func (be *Backend) softmaxGrad(k *plan.Kernel, y, g *Buf) (rt.Buffer, error) {
	axis := k.Attrs.Axis
	if axis < 0 || axis >= len(y.shape) || count(g.shape) != count(y.shape) {
		return nil, fmt.Errorf("cuda: softmax_grad of %s and %s over axis %d", ir.ShapeString(y.shape), ir.ShapeString(g.shape), axis)
	}
	outer, n, inner := count(y.shape[:axis]), y.shape[axis], count(y.shape[axis+1:])
	out, err := be.newBuf(k.DType, y.shape)
	if err != nil {
		return nil, err
	}
	name, _ := KernelName("softmax_grad", k.DType)
	p := new(params).ptr(out.ptr).ptr(y.ptr).ptr(g.ptr).i64(int64(outer)).i64(int64(n)).i64(int64(inner))
	if err := be.dev.launch(name, int64(outer*inner), p); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// normalize is (x − μ)/σ over the last dim; normalize_grad its backward
// given the incoming gradient (a[1]); one thread per row (nn.cu).
func (be *Backend) normalize(k *plan.Kernel, a []*Buf) (rt.Buffer, error) {
	x, d := a[0], a[0]
	if len(a) == 2 {
		d = a[1]
	}
	if len(x.shape) == 0 || count(d.shape) != count(x.shape) {
		return nil, fmt.Errorf("cuda: %s of %s", k.Op, ir.ShapeString(x.shape))
	}
	h := x.shape[len(x.shape)-1]
	rows := 0
	if h > 0 {
		rows = count(x.shape) / h
	}
	out, err := be.newBuf(k.DType, x.shape)
	if err != nil {
		return nil, err
	}
	name, _ := KernelName(k.Op, k.DType)
	p := new(params).ptr(out.ptr).ptr(x.ptr).ptr(d.ptr).i64(int64(rows)).i64(int64(h)).u64(math.Float64bits(k.Attrs.Eps))
	if err := be.dev.launch(name, int64(rows), p); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// sliceOp is the slice op: [Start, End) of Attrs.Axis, a box copy.
func (be *Backend) sliceOp(k *plan.Kernel, x *Buf) (rt.Buffer, error) {
	at := k.Attrs
	if at.Axis < 0 || at.Axis >= len(x.shape) {
		return nil, fmt.Errorf("cuda: slice of %s along axis %d", ir.ShapeString(x.shape), at.Axis)
	}
	off, cnt := make([]int, len(x.shape)), slices.Clone(x.shape)
	off[at.Axis], cnt[at.Axis] = at.Start, at.End-at.Start
	return be.Slice(x, off, cnt)
}

// pad widens Attrs.Axis to the kernel's length (by as much as the global
// shape grows), x at Start and zeros elsewhere: Embed.
func (be *Backend) pad(k *plan.Kernel, x *Buf) (rt.Buffer, error) {
	ax := k.Attrs.Axis
	if ax < 0 || ax >= len(x.shape) || len(k.Shape) != len(x.shape) || len(k.ArgShapes) != 1 {
		return nil, fmt.Errorf("cuda: pad of %s along axis %d", ir.ShapeString(x.shape), ax)
	}
	shape, off := slices.Clone(x.shape), make([]int, len(x.shape))
	shape[ax] += k.Shape[ax] - k.ArgShapes[0][ax]
	off[ax] = k.Attrs.Start
	return be.Embed(x, shape, off, rt.FillZero)
}
