package ad

import (
	"errors"
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
)

// Builder is how the pass extends the graph (ops.Builder).
type Builder = ops.Builder

// Adjoints is the backward graph of one scalar: Of maps each value to its
// adjoint (nil: the scalar does not depend on it through a float path).
type Adjoints struct {
	Of map[*ir.Value]*ir.Value
	// For maps each value the backward built to the forward value whose
	// backward it belongs to: a vjp's ops, and what that vjp needed
	// again (a recomputed activation, a repeated ZeRO-3 gather). A
	// pipeline runs it on that forward value's stage.
	For      map[*ir.Value]*ir.Value
	regather map[*ir.Value]*ir.Value // ZeRO-3 gathers repeated for the backward
	remat    map[*ir.Value]*ir.Value // checkpointed activations, recomputed
}

// Backward builds, with b, the adjoints of every value on a path from a
// float source to the scalar y. onFinal hooks run when a watched value's
// adjoint is complete (nil: none); a hook returns the adjoint to keep.
func Backward(b Builder, y *ir.Value, onFinal map[*ir.Value]func(g *ir.Value) *ir.Value) (adj *Adjoints, err error) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(failed); !ok {
				panic(r)
			}
			adj, err = nil, ErrNotBuilt
		}
	}()
	values := cone(y)
	active := activeValues(values)
	adj = &Adjoints{Of: map[*ir.Value]*ir.Value{}, For: map[*ir.Value]*ir.Value{}, regather: map[*ir.Value]*ir.Value{}, remat: map[*ir.Value]*ir.Value{}}
	adj.Of[y] = built(b.Const(1, y.Type.DType, y.Pos))
	finalAt := finalPoints(values, onFinal, func(v *ir.Value) bool { return active[v] })
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		g := adj.Of[v]
		if g != nil && active[v] && !v.IsSource() {
			bw := &vjp{b: b, v: v, g: g, adj: adj, active: active}
			if err := bw.run(); err != nil {
				return nil, err
			}
		}
		for _, w := range finalAt[v.ID] {
			if g := adj.Of[w]; g != nil {
				adj.Of[w] = built(onFinal[w](g))
			}
		}
	}
	return adj, nil
}

// ErrNotBuilt says the builder refused a value of the backward: it has
// reported why (a program past the checker's size budget), and the
// adjoints are incomplete.
var ErrNotBuilt = errors.New("the backward could not be built")

// failed unwinds the backward from the first value the builder refused:
// later gradient rules would read the shape of a value that has none.
type failed struct{}

// built returns v, or unwinds when the builder refused it (ID < 0).
func built(v *ir.Value) *ir.Value {
	if v == nil || v.ID < 0 {
		panic(failed{})
	}
	return v
}

// activeValues are the float values that depend on a float source: the
// ones that can have an adjoint.
func activeValues(values []*ir.Value) map[*ir.Value]bool {
	active := map[*ir.Value]bool{}
	for _, v := range values {
		if v.IsSource() && v.Type.DType.IsFloat() {
			active[v] = true
			continue
		}
		for _, a := range v.Args {
			if active[a] && v.Type.DType.IsFloat() {
				active[v] = true
			}
		}
	}
	return active
}

// cone is the values y depends on, y included, in program order. It is
// found from y through the arguments, so it costs the size of the cone,
// not of the graph: a training step differentiates each micro-batch's
// loss in a graph that already holds every earlier micro-batch, and a
// walk over the whole graph would make checking quadratic in their number.
// The arguments of a value in the cone are in it, so activeValues over the
// cone is exact.
func cone(y *ir.Value) []*ir.Value {
	seen := map[*ir.Value]bool{y: true}
	out := []*ir.Value{y}
	for i := 0; i < len(out); i++ {
		for _, a := range out[i].Args {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	slices.SortFunc(out, func(a, b *ir.Value) int { return a.ID - b.ID })
	return out
}

// finalPoints says where each watched value's adjoint is complete: once
// the backward (in reverse program order) has visited its first consumer
// that takes part. The hook runs there, e.g. to reduce-scatter a ZeRO-2
// gradient as soon as it exists instead of after the whole backward.
func finalPoints(values []*ir.Value, watched map[*ir.Value]func(*ir.Value) *ir.Value, takesPart func(*ir.Value) bool) map[int][]*ir.Value {
	at := map[int][]*ir.Value{}
	for w := range watched {
		first := -1
		for _, v := range values {
			if v.ID > w.ID && takesPart(v) && first < 0 && slices.Contains(v.Args, w) {
				first = v.ID
			}
		}
		if first >= 0 {
			at[first] = append(at[first], w)
		}
	}
	for _, ws := range at {
		// hooks build values: run them in program order, not map order
		slices.SortFunc(ws, func(a, b *ir.Value) int { return a.ID - b.ID })
	}
	return at
}

// vjp applies one op's vector-Jacobian product.
type vjp struct {
	b      Builder
	v      *ir.Value
	g      *ir.Value
	adj    *Adjoints
	active map[*ir.Value]bool
}

// build applies an op for the backward of b.v: at its position and call
// sites, marked as backward.
func (b *vjp) build(name string, kw map[string]ops.Arg, args ...ops.Arg) *ir.Value {
	out := built(b.b.Apply(b.v.Pos, name, kw, args...))
	out.Calls = b.v.Calls
	out.Backward = true
	b.adj.For[out] = b.v
	return out
}

// val is x as an operand of the backward: a ZeRO-3 parameter gather is
// repeated (once per backward) rather than kept alive since the forward.
func (b *vjp) val(x *ir.Value) *ir.Value {
	if x.Remat {
		return b.recompute(x)
	}
	if x.Op != "to" || !x.Attrs.Regather {
		return x
	}
	if r, ok := b.adj.regather[x]; ok {
		return r
	}
	r := built(b.b.Add(&ir.Value{Op: "to", Type: x.Type, Args: x.Args, Pos: x.Pos, Declared: x.Declared, Name: x.Name + ".again", Backward: true, Attrs: ir.Attrs{Regather: true}}))
	b.adj.regather[x] = r
	b.adj.For[r] = b.v // made for this backward: a pipeline runs it on b.v's stage
	return r
}

// recompute re-creates a checkpointed forward value (and the checkpointed
// values it needs) at its first use by the backward, so the forward's
// copies die as soon as the forward is done with them.
func (b *vjp) recompute(x *ir.Value) *ir.Value {
	if r, ok := b.adj.remat[x]; ok {
		return r
	}
	r := *x
	r.Args = make([]*ir.Value, len(x.Args))
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
	out := built(b.b.Add(&r))
	out.Calls = x.Calls
	b.adj.remat[x] = out
	b.adj.For[out] = b.v // recomputed for this backward, on its stage
	return out
}

// acc adds a contribution to x's adjoint.
func (b *vjp) acc(x, contrib *ir.Value) {
	if !b.active[x] || !x.Type.DType.IsFloat() {
		return
	}
	if contrib.Primal == nil && contrib.Backward {
		contrib.Primal = x
	}
	if prev := b.adj.Of[x]; prev != nil {
		contrib = b.build("add", nil, ops.Arg{V: prev}, ops.Arg{V: contrib})
	}
	b.adj.Of[x] = contrib
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
			Active: func(x *ir.Value) bool { return b.active[x] }})
	}
	return nil
}
