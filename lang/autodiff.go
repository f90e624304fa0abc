package lang

import (
	"errors"

	"github.com/meshrun/meshrun/ad"
	"github.com/meshrun/meshrun/ops"
)

// grad(y, x) and the train block differentiate through package ad; the
// checker caches each scalar's backward graph and lends ad its builder.

// gradOp implements the grad(y, x) builtin.
func gradOp(c *Checker, b *ops.Call, raw []operand) *Value {
	if !b.NArgs(2, 2) {
		return nil
	}
	y, x := raw[0].v, raw[1].v
	if y == nil || x == nil {
		return b.Failf("grad(y, x) takes two tensors")
	}
	if y.Type.Rank() != 0 || !y.Type.DType.IsFloat() {
		return b.Failf("grad(y, x) needs a float scalar y, got %s", y.Type)
	}
	if !x.Type.DType.IsFloat() {
		return b.Failf("grad(y, x): x must be a float tensor, got %s", x.Type)
	}
	adj, err := c.backward(y)
	if errors.Is(err, ad.ErrNotBuilt) {
		return nil // the builder reported why
	}
	if err != nil {
		return b.Failf("%v", err)
	}
	g := adj.Of[x]
	if g == nil {
		// y does not depend on x: the gradient is zero
		zero := c.constValue(numOp(0), x.Type.DType, b.Pos)
		g = builder{c}.Apply(b.Pos, "broadcast_to", nil, append([]ops.Arg{ops.T(zero)}, ops.Dims(x.Type.Shape)...)...)
		if len(x.Type.Shape) == 0 {
			g = zero
		}
	}
	// grad returns the adjoint value itself: mark it with the name the
	// assignment gives it, through an identity conversion-free alias
	return g
}

// backward builds (once per y) the adjoints of every value on a path from a
// float source to y.
func (c *Checker) backward(y *Value) (*ad.Adjoints, error) {
	if c.grads == nil {
		c.grads = map[*Value]*ad.Adjoints{}
	}
	if a, ok := c.grads[y]; ok {
		return a, nil
	}
	adj, err := ad.Backward(builder{c}, y, c.onFinal)
	if err != nil {
		return nil, err
	}
	c.grads[y] = adj
	return adj, nil
}

// builder lends the checker's graph building to the passes over the IR
// (packages ad and train).
type builder struct{ c *Checker }

func (b builder) Graph() *Graph       { return b.c.g }
func (b builder) Add(v *Value) *Value { return b.c.add(v) }
func (b builder) Const(f float64, dt DType, pos Pos) *Value {
	return b.c.constValue(numOp(f), dt, pos)
}

func (b builder) Apply(pos Pos, name string, kw map[string]ops.Arg, args ...ops.Arg) *Value {
	vals := make([]operand, len(args))
	for i, a := range args {
		vals[i] = fromArg(a)
	}
	var kwo map[string]operand
	for k, a := range kw {
		if kwo == nil {
			kwo = map[string]operand{}
		}
		kwo[k] = fromArg(a)
	}
	return b.c.mk(pos, name, vals, kwo)
}
