package lang

// Type rules of the ops that move data without arithmetic: transpose,
// permute, reshape, concat, slice, index, and cast between float dtypes.

func transposeOp(c *Checker, b *binder) *Value {
	if len(b.args) != 1 && len(b.args) != 3 {
		return c.fail(b, "transpose takes x, or x and two dims to swap")
	}
	x := c.tensor(b, 0, nil)
	if x == nil {
		return nil
	}
	r := x.Type.Rank()
	if r < 2 && len(b.args) == 1 {
		return c.fail(b, "transpose(x) swaps the last two dims and needs rank >= 2, got %s", x.Type)
	}
	d0, d1 := r-2, r-1
	if len(b.args) == 3 {
		var ok bool
		if d0, ok = c.axisAttr(b, 1, "dim0", 0, r, true); !ok {
			return nil
		}
		if d1, ok = c.axisAttr(b, 2, "dim1", 0, r, true); !ok {
			return nil
		}
	}
	perm := make([]int, r)
	for i := range perm {
		perm[i] = i
	}
	perm[d0], perm[d1] = perm[d1], perm[d0]
	return permuted(b, x, perm)
}

func permuted(b *binder, x *Value, perm []int) *Value {
	shape := make([]int, len(perm))
	for i, p := range perm {
		shape[i] = x.Type.Shape[p]
	}
	b.name = "transpose"
	v := newValue(b, Type{DType: x.Type.DType, Shape: shape}, x)
	v.Attrs.Perm = perm
	return v
}

func permuteOp(c *Checker, b *binder) *Value {
	if len(b.args) < 1 {
		return c.fail(b, "permute takes x and a permutation of its dims")
	}
	x := c.tensor(b, 0, nil)
	if x == nil {
		return nil
	}
	r := x.Type.Rank()
	if len(b.args)-1 != r {
		return c.fail(b, "permute of a rank-%d tensor needs %d dims, got %d", r, r, len(b.args)-1)
	}
	perm := make([]int, r)
	seen := make([]bool, r)
	for i := range perm {
		d, ok := c.axisAttr(b, i+1, "dim", 0, r, true)
		if !ok {
			return nil
		}
		if seen[d] {
			return c.fail(b, "permute: dim %d appears twice", d)
		}
		seen[d] = true
		perm[i] = d
	}
	return permuted(b, x, perm)
}

// castOp is cast(x, "bf16"): a float tensor in another float dtype,
// rounded to nearest (ties to even).
func castOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	x := c.tensor(b, 0, nil)
	if !c.floatTensor(b, x) {
		return nil
	}
	s := b.args[1].str
	dt, ok := DType(0), false
	if s != nil {
		dt, ok = ParseDType(*s)
	}
	if !ok || !dt.IsFloat() {
		return c.fail(b, "cast(x, \"dtype\"): the dtype must be \"f32\", \"f64\", \"bf16\" or \"f16\"")
	}
	return newValue(b, Type{DType: dt, Shape: x.Type.Shape}, x)
}

// indexOp is index(W, i) = W[i]: a slice along dim 0 and a reshape that
// drops it, so stacked per-layer parameters can be written once:
// param Wq : f32[L, H, H]; for l in range(L) { ... index(Wq, l) ... }.
func indexOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	w := c.tensor(b, 0, nil)
	if w == nil {
		return nil
	}
	if w.Type.Rank() == 0 {
		return c.fail(b, "index needs a tensor of rank >= 1")
	}
	i, ok := c.intAttr(b, 1, "i", 0, true)
	if !ok {
		return nil
	}
	if i < 0 || i >= w.Type.Shape[0] {
		return c.fail(b, "index %d out of range for dim 0 of size %d", i, w.Type.Shape[0])
	}
	s := c.mk(b.pos, "slice", []operand{{v: w}, numOp(0), numOp(float64(i)), numOp(float64(i + 1))}, nil)
	v := newValue(&binder{name: "reshape", pos: b.pos}, Type{DType: w.Type.DType, Shape: append([]int{}, w.Type.Shape[1:]...)}, s)
	return v
}

func reshapeOp(c *Checker, b *binder) *Value {
	if len(b.args) < 1 {
		return c.fail(b, "reshape takes x and the new dims")
	}
	x := c.tensor(b, 0, nil)
	if x == nil {
		return nil
	}
	shape := make([]int, len(b.args)-1)
	infer := -1
	known := 1
	for i := range shape {
		d, ok := c.intAttr(b, i+1, "dim", 0, true)
		if !ok {
			return nil
		}
		switch {
		case d == -1 && infer < 0:
			infer = i
		case d < 1:
			return c.fail(b, "reshape: dim %d is invalid (positive, or one -1 to infer)", d)
		default:
			known *= d
		}
		shape[i] = d
	}
	n := x.Type.Numel()
	if infer >= 0 {
		if n%known != 0 {
			return c.fail(b, "shape mismatch in reshape: cannot reshape %s into %s", ShapeString(x.Type.Shape), ShapeString(shape))
		}
		shape[infer] = n / known
		known *= shape[infer]
	}
	if known != n {
		return c.fail(b, "shape mismatch in reshape: cannot reshape %s (%d elements) into %s", ShapeString(x.Type.Shape), n, ShapeString(shape))
	}
	return newValue(b, Type{DType: x.Type.DType, Shape: shape}, x)
}

func concatOp(c *Checker, b *binder) *Value {
	if len(b.args) < 1 {
		return c.fail(b, "concat takes tensors and axis=")
	}
	var xs []*Value
	for i := range b.args {
		x := c.tensor(b, i, nil)
		if x == nil {
			return nil
		}
		xs = append(xs, x)
	}
	r := xs[0].Type.Rank()
	if r == 0 {
		return c.fail(b, "concat needs tensors of rank >= 1")
	}
	ax, ok := c.axisAttr(b, -1, "axis", 0, r, false)
	if !ok {
		return nil
	}
	shape := append([]int{}, xs[0].Type.Shape...)
	for _, x := range xs[1:] {
		if !c.sameDType(b, xs[0], x) {
			return nil
		}
		if x.Type.Rank() != r {
			return c.fail(b, "shape mismatch in concat: %s and %s", ShapeString(xs[0].Type.Shape), ShapeString(x.Type.Shape))
		}
		for d := range shape {
			if d != ax && x.Type.Shape[d] != shape[d] {
				return c.fail(b, "shape mismatch in concat along axis %d: %s and %s", ax, ShapeString(xs[0].Type.Shape), ShapeString(x.Type.Shape))
			}
		}
		shape[ax] += x.Type.Shape[ax]
	}
	v := newValue(b, Type{DType: xs[0].Type.DType, Shape: shape}, xs...)
	v.Attrs.Axis = ax
	return v
}

// axisAndTwoInts reads the (x, axis, i, j) arguments slice and pad share.
func (c *Checker) axisAndTwoInts(b *binder, first, second string) (x *Value, ax, i, j int, ok bool) {
	if !c.nargs(b, 4, 4) {
		return nil, 0, 0, 0, false
	}
	if x = c.tensor(b, 0, nil); x == nil {
		return nil, 0, 0, 0, false
	}
	if x.Type.Rank() == 0 {
		c.fail(b, "%s needs a tensor of rank >= 1", b.name)
		return nil, 0, 0, 0, false
	}
	if ax, ok = c.axisAttr(b, 1, "axis", 0, x.Type.Rank(), true); !ok {
		return nil, 0, 0, 0, false
	}
	i, ok1 := c.intAttr(b, 2, first, 0, true)
	j, ok2 := c.intAttr(b, 3, second, 0, true)
	return x, ax, i, j, ok1 && ok2
}

func sliceOp(c *Checker, b *binder) *Value {
	x, ax, start, end, ok := c.axisAndTwoInts(b, "start", "end")
	if !ok {
		return nil
	}
	n := x.Type.Shape[ax]
	if start < 0 || end > n || start >= end {
		return c.fail(b, "slice [%d:%d] out of range for dim %d of size %d", start, end, ax, n)
	}
	shape := append([]int{}, x.Type.Shape...)
	shape[ax] = end - start
	v := newValue(b, Type{DType: x.Type.DType, Shape: shape}, x)
	v.Attrs.Axis, v.Attrs.Start, v.Attrs.End = ax, start, end
	return v
}
