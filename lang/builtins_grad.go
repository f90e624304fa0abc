package lang

import "slices"

// Gradient helper ops. Autodiff builds backward graphs from these and the
// ordinary ops; they are callable from programs too (and so tested like
// every other op). Each is the derivative of a forward op that is not a
// composition of others.

func init() {
	for name, fn := range map[string]builtinFn{
		"relu_grad": unaryOp, "gelu_grad": unaryOp,
		"softmax_grad":       softmaxGradOp,
		"normalize":          normalizeOp,
		"normalize_grad":     normalizeGradOp,
		"max_grad":           maxGradOp,
		"broadcast_to":       broadcastToOp,
		"pad":                padOp,
		"embedding_grad":     embeddingGradOp,
		"cross_entropy_grad": crossEntropyGradOp,
	} {
		builtins[name] = fn
	}
}

// GradOps lists the gradient helper ops.
func GradOps() []string {
	return []string{"relu_grad", "gelu_grad", "softmax_grad", "normalize", "normalize_grad", "max_grad",
		"broadcast_to", "pad", "embedding_grad", "cross_entropy_grad"}
}

func (c *Checker) sameShape(b *binder, x, y *Value) bool {
	if !slices.Equal(x.Type.Shape, y.Type.Shape) {
		c.fail(b, "shape mismatch in %s: %s and %s", b.name, ShapeString(x.Type.Shape), ShapeString(y.Type.Shape))
		return false
	}
	return c.sameDType(b, x, y)
}

// softmax_grad(y, g, axis=-1) = y·(g − Σ_axis g·y): the backward of softmax
// given its output y.
func softmaxGradOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 3) {
		return nil
	}
	y, g := c.tensor(b, 0, nil), c.tensor(b, 1, nil)
	if !c.floatTensor(b, y) || !c.floatTensor(b, g) || !c.sameShape(b, y, g) {
		return nil
	}
	if y.Type.Rank() == 0 {
		return c.fail(b, "softmax_grad needs a tensor of rank >= 1")
	}
	ax, ok := c.axisAttr(b, 2, "axis", -1, y.Type.Rank(), false)
	if !ok {
		return nil
	}
	v := newValue(b, y.Type, y, g)
	v.Attrs.Axis = ax
	return v
}

func epsAttr(c *Checker, b *binder) (float64, bool) {
	eps := 1e-5
	if e, ok := b.kw["eps"]; ok {
		delete(b.kw, "eps")
		if e.num == nil || *e.num <= 0 {
			c.fail(b, "%s: eps must be a positive number", b.name)
			return 0, false
		}
		eps = *e.num
	}
	return eps, true
}

// normalize(x, eps=1e-5) = (x − mean)/√(var + eps) over the last dim:
// layernorm without gamma and beta.
func normalizeOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 1, 1) {
		return nil
	}
	x := c.tensor(b, 0, nil)
	if !c.floatTensor(b, x) {
		return nil
	}
	if x.Type.Rank() == 0 {
		return c.fail(b, "normalize needs a tensor of rank >= 1")
	}
	eps, ok := epsAttr(c, b)
	if !ok {
		return nil
	}
	v := newValue(b, x.Type, x)
	v.Attrs.Eps = eps
	return v
}

// normalize_grad(x, d, eps=1e-5) is the backward of normalize: with
// x̂ = normalize(x) and σ = √(var + eps), (d − mean(d) − x̂·mean(d·x̂))/σ.
func normalizeGradOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 2, 2) {
		return nil
	}
	x, d := c.tensor(b, 0, nil), c.tensor(b, 1, nil)
	if !c.floatTensor(b, x) || !c.floatTensor(b, d) || !c.sameShape(b, x, d) {
		return nil
	}
	if x.Type.Rank() == 0 {
		return c.fail(b, "normalize_grad needs a tensor of rank >= 1")
	}
	eps, ok := epsAttr(c, b)
	if !ok {
		return nil
	}
	v := newValue(b, x.Type, x, d)
	v.Attrs.Eps = eps
	return v
}

// max_grad(x, y, g, axis) routes g (shaped like y = max(x, axis)) to the
// positions of the maximum, shared equally among ties (like torch.amax).
// Without axis, y and g are scalars (max over all elements).
func maxGradOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 3, 4) {
		return nil
	}
	x, y, g := c.tensor(b, 0, nil), c.tensor(b, 1, nil), c.tensor(b, 2, nil)
	if !c.floatTensor(b, x) || !c.floatTensor(b, y) || !c.floatTensor(b, g) || !c.sameShape(b, y, g) || !c.sameDType(b, x, y) {
		return nil
	}
	axis := -1
	if len(b.args) == 4 {
		ax, ok := c.axisAttr(b, 3, "axis", 0, x.Type.Rank(), true)
		if !ok {
			return nil
		}
		axis = ax
	}
	want := []int{}
	if axis >= 0 {
		want = append(append([]int{}, x.Type.Shape[:axis]...), x.Type.Shape[axis+1:]...)
	}
	if !slices.Equal(want, y.Type.Shape) {
		return c.fail(b, "shape mismatch in max_grad: max of %s is %s, got %s", ShapeString(x.Type.Shape), ShapeString(want), ShapeString(y.Type.Shape))
	}
	v := newValue(b, x.Type, x, y, g)
	v.Attrs.Axis = axis
	return v
}

// broadcast_to(x, d0, d1, ...) expands x NumPy-style to the given shape.
func broadcastToOp(c *Checker, b *binder) *Value {
	if len(b.args) < 1 {
		return c.fail(b, "broadcast_to takes x and the target dims")
	}
	x := c.tensor(b, 0, nil)
	if !c.floatTensor(b, x) {
		return nil
	}
	shape := make([]int, len(b.args)-1)
	for i := range shape {
		d, ok := c.intAttr(b, i+1, "dim", 0, true)
		if !ok {
			return nil
		}
		if d < 1 {
			return c.fail(b, "broadcast_to: dim %d is invalid", d)
		}
		shape[i] = d
	}
	if out, ok := Broadcast(x.Type.Shape, shape); !ok || !slices.Equal(out, shape) {
		return c.fail(b, "shape mismatch in broadcast_to: %s does not broadcast to %s", ShapeString(x.Type.Shape), ShapeString(shape))
	}
	return newValue(b, Type{DType: x.Type.DType, Shape: shape}, x)
}

// pad(x, axis, before, after) adds zeros along axis: the backward of slice.
func padOp(c *Checker, b *binder) *Value {
	x, ax, before, after, ok := c.axisAndTwoInts(b, "before", "after")
	if !ok {
		return nil
	}
	if before < 0 || after < 0 || before+after > 1<<30 {
		return c.fail(b, "pad: before and after must be >= 0")
	}
	shape := append([]int{}, x.Type.Shape...)
	shape[ax] += before + after
	v := newValue(b, Type{DType: x.Type.DType, Shape: shape}, x)
	v.Attrs.Axis, v.Attrs.Start, v.Attrs.End = ax, before, before+x.Type.Shape[ax]
	return v
}

// embedding_grad(idx, g, vocab) scatter-adds the rows of g into a
// [vocab, hidden] table: the backward of embedding with respect to W.
func embeddingGradOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 3, 3) {
		return nil
	}
	idx, g := c.tensor(b, 0, nil), c.tensor(b, 1, nil)
	if idx == nil || !c.floatTensor(b, g) {
		return nil
	}
	if !idx.Type.DType.IsInt() {
		return c.fail(b, "embedding_grad indices must be i32 or i64, got %s", idx.Type.DType)
	}
	vocab, ok := c.intAttr(b, 2, "vocab", 0, true)
	if !ok {
		return nil
	}
	if vocab < 1 {
		return c.fail(b, "embedding_grad: vocab must be positive")
	}
	r := idx.Type.Rank()
	if g.Type.Rank() != r+1 || !slices.Equal(g.Type.Shape[:r], idx.Type.Shape) {
		return c.fail(b, "shape mismatch in embedding_grad: indices %s and gradient %s", ShapeString(idx.Type.Shape), ShapeString(g.Type.Shape))
	}
	return newValue(b, Type{DType: g.Type.DType, Shape: []int{vocab, g.Type.Shape[r]}}, idx, g)
}

// cross_entropy_grad(logits, labels, g) = (softmax(logits) − onehot(labels))·g/N.
func crossEntropyGradOp(c *Checker, b *binder) *Value {
	if !c.nargs(b, 3, 3) {
		return nil
	}
	x, t := c.tensor(b, 0, nil), c.tensor(b, 1, nil)
	g := c.tensor(b, 2, x)
	if !c.floatTensor(b, x) || t == nil || !c.floatTensor(b, g) || !c.sameDType(b, x, g) {
		return nil
	}
	if x.Type.Rank() != 2 || t.Type.Rank() != 1 || x.Type.Shape[0] != t.Type.Shape[0] || g.Type.Rank() != 0 {
		return c.fail(b, "shape mismatch in cross_entropy_grad: want logits [N, C], labels [N] and a scalar gradient")
	}
	if !t.Type.DType.IsInt() {
		return c.fail(b, "cross_entropy_grad labels must be i32 or i64, got %s", t.Type.DType)
	}
	return newValue(b, x.Type, x, t, g)
}
