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
// order, each op's vector-Jacobian product written with ordinary ops and
// the gradient helper ops (builtins_grad.go). Backward values are ordinary
// graph values — placement inference and boxing treat them like forward
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

func t(v *Value) operand  { return operand{v: v} }
func n(f float64) operand { return numOp(f) }
func (b *vjp) op(name string, args ...operand) *Value {
	out := b.c.mk(b.v.Pos, name, args, nil)
	out.Calls = b.v.Calls
	out.Backward = true
	return out
}
func (b *vjp) opKw(name string, kw map[string]operand, args ...operand) *Value {
	out := b.c.mk(b.v.Pos, name, args, kw)
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
		contrib = b.op("add", t(prev), t(contrib))
	}
	b.adj.of[x] = contrib
}

// unbroadcast sums g down to shape: over leading dims g has and shape
// lacks, and over dims where shape has 1 and g more.
func (b *vjp) unbroadcast(g *Value, shape []int) *Value {
	for g.Type.Rank() > len(shape) {
		g = b.op("sum", t(g), n(0))
	}
	for i, d := range shape {
		if d == 1 && g.Type.Shape[i] != 1 {
			keep := append([]int{}, g.Type.Shape...)
			keep[i] = 1
			g = b.op("reshape", append([]operand{t(b.op("sum", t(g), n(float64(i))))}, dims(keep)...)...)
		}
	}
	return g
}

// keepdim reshapes a reduction's result r of x along axis back to rank(x).
func (b *vjp) keepdim(r *Value, x *Value, axis int) *Value {
	keep := append([]int{}, x.Type.Shape...)
	keep[axis] = 1
	return b.op("reshape", append([]operand{t(r)}, dims(keep)...)...)
}

// sumToLast sums every dim but the last: [.., h] → [h].
func (b *vjp) sumToLast(x *Value) *Value {
	for x.Type.Rank() > 1 {
		x = b.op("sum", t(x), n(0))
	}
	return x
}

func (b *vjp) run() error {
	v, g, a := b.v, b.g, b.v.Args
	switch v.Op {
	case "add":
		b.acc(a[0], b.unbroadcast(g, a[0].Type.Shape))
		b.acc(a[1], b.unbroadcast(g, a[1].Type.Shape))
	case "sub":
		b.acc(a[0], b.unbroadcast(g, a[0].Type.Shape))
		b.acc(a[1], b.unbroadcast(b.op("neg", t(g)), a[1].Type.Shape))
	case "mul":
		b.acc(a[0], b.unbroadcast(b.op("mul", t(g), t(b.val(a[1]))), a[0].Type.Shape))
		b.acc(a[1], b.unbroadcast(b.op("mul", t(g), t(b.val(a[0]))), a[1].Type.Shape))
	case "div":
		b.acc(a[0], b.unbroadcast(b.op("div", t(g), t(b.val(a[1]))), a[0].Type.Shape))
		b.acc(a[1], b.unbroadcast(b.op("neg", t(b.op("div", t(b.op("mul", t(g), t(b.val(v)))), t(b.val(a[1]))))), a[1].Type.Shape))
	case "neg":
		b.acc(a[0], b.op("neg", t(g)))
	case "exp":
		b.acc(a[0], b.op("mul", t(g), t(b.val(v))))
	case "log":
		b.acc(a[0], b.op("div", t(g), t(b.val(a[0]))))
	case "sqrt":
		b.acc(a[0], b.op("div", t(b.op("mul", t(g), n(0.5))), t(b.val(v))))
	case "tanh":
		b.acc(a[0], b.op("mul", t(g), t(b.op("sub", n(1), t(b.op("mul", t(b.val(v)), t(b.val(v))))))))
	case "sigmoid":
		b.acc(a[0], b.op("mul", t(g), t(b.op("mul", t(b.val(v)), t(b.op("sub", n(1), t(b.val(v))))))))
	case "relu":
		b.acc(a[0], b.op("mul", t(g), t(b.op("relu_grad", t(b.val(a[0]))))))
	case "gelu":
		b.acc(a[0], b.op("mul", t(g), t(b.op("gelu_grad", t(b.val(a[0]))))))
	case "matmul":
		b.matmul(a[0], a[1], g)
	case "softmax":
		b.acc(a[0], b.op("softmax_grad", t(b.val(v)), t(g), n(float64(v.Attrs.Axis))))
	case "log_softmax":
		s := b.keepdim(b.op("sum", t(g), n(float64(v.Attrs.Axis))), g, v.Attrs.Axis)
		b.acc(a[0], b.op("sub", t(g), t(b.op("mul", t(b.op("exp", t(b.val(v)))), t(s)))))
	case "layernorm":
		eps := map[string]operand{"eps": n(v.Attrs.Eps)}
		xh := b.opKw("normalize", eps, t(b.val(a[0])))
		b.acc(a[1], b.sumToLast(b.op("mul", t(g), t(xh))))
		b.acc(a[2], b.sumToLast(g))
		b.acc(a[0], b.opKw("normalize_grad", map[string]operand{"eps": n(v.Attrs.Eps)}, t(b.val(a[0])), t(b.op("mul", t(g), t(b.val(a[1]))))))
	case "sum", "mean":
		x := a[0]
		gk := g
		count := x.Type.Numel()
		if v.Attrs.Axis >= 0 {
			gk = b.keepdim(g, x, v.Attrs.Axis)
			count = x.Type.Shape[v.Attrs.Axis]
		}
		if v.Op == "mean" {
			gk = b.op("mul", t(gk), n(1/float64(count)))
		}
		if x.Type.Rank() == 0 {
			b.acc(x, gk)
			break
		}
		b.acc(x, b.op("broadcast_to", append([]operand{t(gk)}, dims(x.Type.Shape)...)...))
	case "max":
		args := []operand{t(b.val(a[0])), t(b.val(v)), t(g)}
		if v.Attrs.Axis >= 0 {
			args = append(args, n(float64(v.Attrs.Axis)))
		}
		b.acc(a[0], b.op("max_grad", args...))
	case "transpose":
		inv := make([]operand, len(v.Attrs.Perm))
		for i, p := range v.Attrs.Perm {
			inv[p] = n(float64(i))
		}
		b.acc(a[0], b.op("permute", append([]operand{t(g)}, inv...)...))
	case "reshape":
		b.acc(a[0], b.op("reshape", append([]operand{t(g)}, dims(a[0].Type.Shape)...)...))
	case "concat":
		off := 0
		for _, x := range a {
			l := x.Type.Shape[v.Attrs.Axis]
			b.acc(x, b.op("slice", t(g), n(float64(v.Attrs.Axis)), n(float64(off)), n(float64(off+l))))
			off += l
		}
	case "slice":
		full := a[0].Type.Shape[v.Attrs.Axis]
		b.acc(a[0], b.op("pad", t(g), n(float64(v.Attrs.Axis)), n(float64(v.Attrs.Start)), n(float64(full-v.Attrs.End))))
	case "embedding":
		b.acc(a[0], b.op("embedding_grad", t(b.val(a[1])), t(g), n(float64(a[0].Type.Shape[0]))))
	case "cross_entropy":
		b.acc(a[0], b.op("cross_entropy_grad", t(b.val(a[0])), t(b.val(a[1])), t(g)))
	case "mse":
		d := b.op("mul", t(b.op("sub", t(b.val(a[0])), t(b.val(a[1])))), t(b.op("mul", t(g), n(2/float64(a[0].Type.Numel())))))
		b.acc(a[0], d)
		b.acc(a[1], b.op("neg", t(d)))
	case "minimum", "maximum":
		// the gradient goes to the operand that was chosen; ties go to the
		// second (relu_grad is 1 only for a strictly positive difference)
		d := b.op("sub", t(b.val(a[1])), t(b.val(a[0])))
		if v.Op == "maximum" {
			d = b.op("neg", t(d))
		}
		first := b.op("relu_grad", t(d))
		b.acc(a[0], b.unbroadcast(b.op("mul", t(g), t(first)), a[0].Type.Shape))
		b.acc(a[1], b.unbroadcast(b.op("mul", t(g), t(b.op("sub", n(1), t(first)))), a[1].Type.Shape))
	case "where":
		b.acc(a[1], b.unbroadcast(b.op("where", t(b.val(a[0])), t(g), n(0)), a[1].Type.Shape))
		b.acc(a[2], b.unbroadcast(b.op("where", t(b.val(a[0])), n(0), t(g)), a[2].Type.Shape))
	case "nonfinite":
		// piecewise constant: no gradient flows
	case "to":
		b.acc(a[0], g)
	case "cast":
		b.acc(a[0], b.op("cast", t(g), operand{str: strp(a[0].Type.DType.String())}))
	case "const":
	default:
		return fmt.Errorf("no gradient for %s (second derivatives are not supported)", v.Op)
	}
	return nil
}

// matmul: dA = g·Bᵀ and dB = Aᵀ·g, summed over batch dims an operand
// lacks. A batched A against a 2-D B folds the batch into rows for dB.
func (b *vjp) matmul(A, B, g *Value) {
	swap := func(x *Value) *Value { return b.op("transpose", t(b.val(x))) }
	b.acc(A, b.unbroadcast(b.op("matmul", t(g), t(swap(B))), A.Type.Shape))
	if !b.active[B] {
		return
	}
	if B.Type.Rank() == 2 && A.Type.Rank() > 2 {
		k, nn := A.Type.Shape[A.Type.Rank()-1], g.Type.Shape[g.Type.Rank()-1]
		a2 := b.op("reshape", t(b.val(A)), n(-1), n(float64(k)))
		g2 := b.op("reshape", t(g), n(-1), n(float64(nn)))
		b.acc(B, b.op("matmul", t(swap(a2)), t(g2)))
		return
	}
	b.acc(B, b.unbroadcast(b.op("matmul", t(swap(A)), t(g)), B.Type.Shape))
}
