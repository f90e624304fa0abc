package lang

import (
	"fmt"

	"github.com/meshrun/meshrun/ops"
)

// Reverse-mode autodiff, as a graph transformation in the checker.
//
// grad(y, x) asks for ∂y/∂x of a scalar y. The first request for a given y
// builds the backward graph once: every value that y depends on and that
// depends on some float source gets an adjoint, visited in reverse program
// order, each op's vector-Jacobian product (registered with the op in
// package ops) written with ordinary ops and the gradient helper ops.
// Backward values are ordinary graph values — placement inference and boxing treat them like forward
// ones, which is where the duality of backward placements comes from: the
// gradient of a replicated parameter computed from split activations comes
// out partial and is reduced by the boxing the consumer needs. Adjoints no
// one uses are removed by lowering's dead-code pass.

type adjoints struct {
	of       map[*Value]*Value
	regather map[*Value]*Value // ZeRO-3 gathers repeated for the backward
	remat    map[*Value]*Value // checkpointed activations, recomputed
}

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
	if err != nil {
		return b.Failf("%v", err)
	}
	g := adj.of[x]
	if g == nil {
		// y does not depend on x: the gradient is zero
		zero := c.constValue(numOp(0), x.Type.DType, b.Pos)
		g = c.mk(b.Pos, "broadcast_to", append([]operand{{v: zero}}, dims(x.Type.Shape)...), nil)
		if len(x.Type.Shape) == 0 {
			g = zero
		}
	}
	// grad returns the adjoint value itself: mark it with the name the
	// assignment gives it, through an identity conversion-free alias
	return g
}

func strp(s string) *string { return &s }

func dims(shape []int) []operand {
	var out []operand
	for _, d := range shape {
		out = append(out, numOp(float64(d)))
	}
	return out
}

// backward builds (once per y) the adjoints of every value on a path from a
// float source to y.
func (c *Checker) backward(y *Value) (*adjoints, error) {
	if c.grads == nil {
		c.grads = map[*Value]*adjoints{}
	}
	if a, ok := c.grads[y]; ok {
		return a, nil
	}
	// active: depends on a float source, and y depends on it
	dependsOnSource := map[*Value]bool{}
	for _, v := range c.g.Values[:y.ID+1] {
		if v.IsSource() && v.Type.DType.IsFloat() {
			dependsOnSource[v] = true
			continue
		}
		for _, a := range v.Args {
			if dependsOnSource[a] && v.Type.DType.IsFloat() {
				dependsOnSource[v] = true
			}
		}
	}
	needed := map[*Value]bool{y: true}
	for i := y.ID; i >= 0; i-- {
		v := c.g.Values[i]
		if needed[v] {
			for _, a := range v.Args {
				needed[a] = true
			}
		}
	}
	adj := &adjoints{of: map[*Value]*Value{}, regather: map[*Value]*Value{}, remat: map[*Value]*Value{}}
	one := c.constValue(numOp(1), y.Type.DType, y.Pos)
	adj.of[y] = one
	// A watched value's adjoint is complete once the backward has visited
	// its first consumer (the backward runs in reverse program order): the
	// hook runs there, e.g. to reduce-scatter a ZeRO-2 gradient as soon as
	// it exists instead of after the whole backward.
	finalAt := map[int][]*Value{}
	for w := range c.onFinal {
		first := -1
		for _, v := range c.g.Values[w.ID+1 : y.ID+1] {
			if !needed[v] || !dependsOnSource[v] {
				continue
			}
			for _, a := range v.Args {
				if a == w && first < 0 {
					first = v.ID
				}
			}
		}
		if first >= 0 {
			finalAt[first] = append(finalAt[first], w)
		}
	}
	for i := y.ID; i >= 0; i-- {
		v := c.g.Values[i]
		g := adj.of[v]
		if g != nil && needed[v] && dependsOnSource[v] && !v.IsSource() {
			bw := &vjp{c: c, v: v, g: g, adj: adj, active: dependsOnSource}
			if err := bw.run(); err != nil {
				return nil, err
			}
		}
		for _, w := range finalAt[i] {
			if g := adj.of[w]; g != nil {
				adj.of[w] = c.onFinal[w](g)
			}
		}
	}
	c.grads[y] = adj
	return adj, nil
}

// vjp applies one op's vector-Jacobian product.
type vjp struct {
	c      *Checker
	v      *Value
	g      *Value
	adj    *adjoints
	active map[*Value]bool
}

func t(v *Value) operand { return operand{v: v} }

// build applies an op for the backward of b.v: at its position and call
// sites, marked as backward.
func (b *vjp) build(name string, kw map[string]ops.Arg, args ...ops.Arg) *Value {
	vals := make([]operand, len(args))
	for i, a := range args {
		vals[i] = operand{v: a.V, num: a.Num, str: a.Str}
	}
	var kwo map[string]operand
	for k, a := range kw {
		if kwo == nil {
			kwo = map[string]operand{}
		}
		kwo[k] = operand{v: a.V, num: a.Num, str: a.Str}
	}
	out := b.c.mk(b.v.Pos, name, vals, kwo)
	out.Calls = b.v.Calls
	out.Backward = true
	return out
}

// val is x as an operand of the backward: a ZeRO-3 parameter gather is
// repeated (once per backward) rather than kept alive since the forward.
func (b *vjp) val(x *Value) *Value {
	if x.Remat {
		return b.recompute(x)
	}
	if x.Op != "to" || !x.Attrs.Regather {
		return x
	}
	if r, ok := b.adj.regather[x]; ok {
		return r
	}
	r := b.c.add(&Value{Op: "to", Type: x.Type, Args: x.Args, Pos: x.Pos, Declared: x.Declared, Name: x.Name + ".again", Backward: true, Attrs: Attrs{Regather: true}})
	b.adj.regather[x] = r
	return r
}

// recompute re-creates a checkpointed forward value (and the checkpointed
// values it needs) at its first use by the backward, so the forward's
// copies die as soon as the forward is done with them.
func (b *vjp) recompute(x *Value) *Value {
	if r, ok := b.adj.remat[x]; ok {
		return r
	}
	r := *x
	r.Args = make([]*Value, len(x.Args))
	for i, a := range x.Args {
		r.Args[i] = a
		if a.Remat {
			r.Args[i] = b.recompute(a)
		}
	}
	r.Remat, r.Backward = false, true
	if r.Name != "" {
		r.Name += ".recomputed"
	}
	out := b.c.add(&r)
	out.Calls = x.Calls
	b.adj.remat[x] = out
	return out
}

// acc adds a contribution to x's adjoint.
func (b *vjp) acc(x, contrib *Value) {
	if !b.active[x] || !x.Type.DType.IsFloat() {
		return
	}
	if contrib.Primal == nil && contrib.Backward {
		contrib.Primal = x
	}
	if prev := b.adj.of[x]; prev != nil {
		contrib = b.build("add", nil, ops.Arg{V: prev}, ops.Arg{V: contrib})
	}
	b.adj.of[x] = contrib
}

// run adds b.v's contributions to its arguments' adjoints with the op's
// gradient rule (package ops). A conversion passes its adjoint through:
// boxing places it, which is where an all-gather's backward becomes a
// reduce-scatter.
func (b *vjp) run() error {
	if b.v.Op == "to" {
		b.acc(b.v.Args[0], b.g)
		return nil
	}
	op, ok := ops.Lookup(b.v.Op)
	if !ok || op.Grad == nil && !op.NoGrad {
		return fmt.Errorf("no gradient for %s (second derivatives are not supported)", b.v.Op)
	}
	if op.Grad != nil {
		op.Grad(&ops.Grad{V: b.v, G: b.g, Build: b.build, Val: b.val, Acc: b.acc,
			Active: func(x *Value) bool { return b.active[x] }})
	}
	return nil
}
