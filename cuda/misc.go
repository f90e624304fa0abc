package cuda

import (
	"fmt"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// where, max_grad, nonfinite (reduce.cu) and the local view's padding
// ops, to_local and from_local (box copies).

// where broadcasts cond, a and b to their common shape (box copies) and
// picks a where cond ≠ 0, else b.
func (be *Backend) where(k *plan.Kernel, c, a, b *Buf) (rt.Buffer, error) {
	shape, ok := ops.Broadcast(a.shape, b.shape)
	if ok {
		shape, ok = ops.Broadcast(shape, c.shape)
	}
	if !ok {
		return nil, fmt.Errorf("local shapes %s, %s and %s do not broadcast", ir.ShapeString(c.shape), ir.ShapeString(a.shape), ir.ShapeString(b.shape))
	}
	full := make([]*Buf, 3)
	for i, x := range []*Buf{c, a, b} {
		y, err := be.broadcastTo(x, shape)
		if err != nil {
			return nil, err
		}
		defer be.Free(y)
		full[i] = y.(*Buf)
	}
	out, err := be.newBuf(k.DType, shape)
	if err != nil {
		return nil, err
	}
	n := int64(count(shape))
	if n > 0 {
		name, _ := KernelName("where", k.DType)
		err = be.dev.launch(name, n, new(params).ptr(out.ptr).ptr(full[0].ptr).ptr(full[1].ptr).ptr(full[2].ptr).i64(n))
	}
	if err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// maxGrad is max's gradient over Attrs.Axis (all of x when negative).
func (be *Backend) maxGrad(k *plan.Kernel, x, y, g *Buf) (rt.Buffer, error) {
	axis := k.Attrs.Axis
	outer, n, inner := 1, count(x.shape), 1
	if axis >= 0 {
		if axis >= len(x.shape) {
			return nil, fmt.Errorf("cuda: max_grad over axis %d of %s", axis, ir.ShapeString(x.shape))
		}
		outer, n, inner = count(x.shape[:axis]), x.shape[axis], count(x.shape[axis+1:])
	}
	if count(y.shape) != outer*inner || count(g.shape) != outer*inner {
		return nil, fmt.Errorf("cuda: max_grad of %s with a max of %s", ir.ShapeString(x.shape), ir.ShapeString(y.shape))
	}
	out, err := be.newBuf(k.DType, x.shape)
	if err != nil {
		return nil, err
	}
	name, _ := KernelName("max_grad", k.DType)
	p := new(params).ptr(out.ptr).ptr(x.ptr).ptr(y.ptr).ptr(g.ptr).i64(int64(outer)).i64(int64(n)).i64(int64(inner))
	if err := be.dev.launch(name, int64(outer*inner), p); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// nonfinite is a scalar: 1 when x holds ±inf or NaN, else 0.
func (be *Backend) nonfinite(k *plan.Kernel, x *Buf) (rt.Buffer, error) {
	out, err := be.newBuf(k.DType, nil)
	if err != nil {
		return nil, err
	}
	name, _ := KernelName("nonfinite", k.DType)
	if err := be.dev.launch(name, 1, new(params).ptr(out.ptr).ptr(x.ptr).i64(int64(count(x.shape)))); err != nil {
		be.Free(out)
		return nil, err
	}
	return out, nil
}

// toLocal pads a block to the local function's block shape (out.Len) with
// zeros after it; fromLocal drops that padding.
func (be *Backend) toLocal(x *Buf, out sbp.Block) (rt.Buffer, error) {
	return be.Embed(x, out.Len, make([]int, len(out.Len)), rt.FillZero)
}

func (be *Backend) fromLocal(x *Buf, out sbp.Block) (rt.Buffer, error) {
	return be.Slice(x, make([]int, len(out.Len)), out.Len)
}

// nativeOther decides where, max_grad, nonfinite, to_local and from_local.
func nativeOther(k *plan.Kernel) (native, decided bool) {
	same := func(n int, float bool) bool {
		if len(k.ArgDTypes) != n || float && k.DType != ir.F32 && k.DType != ir.F64 {
			return false
		}
		for _, dt := range k.ArgDTypes {
			if dt != k.DType {
				return false
			}
		}
		return true
	}
	switch k.Op {
	case "where", "max_grad":
		return same(3, true), true
	case "nonfinite":
		return same(1, true), true
	case "to_local", "from_local":
		return same(1, false), true
	}
	return false, false
}
