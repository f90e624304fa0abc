package ir

import (
	"fmt"
	"maps"
	"slices"
)

// Verify checks that g is well formed: every value's ID is its index,
// arguments come before their users and belong to g, types and declared
// placements are valid, a conversion keeps its argument's type, and the
// outputs and the train block refer to values of g. It reports the first
// problem at the position of the value concerned.
func Verify(g *Graph) error {
	for i, v := range g.Values {
		if v == nil {
			return fmt.Errorf("ir: value %d is nil", i)
		}
		if v.ID != i {
			return &Error{Pos: v.Pos, Msg: fmt.Sprintf("ir: %s has ID %d at index %d", v.Label(), v.ID, i)}
		}
		if err := verifyArgs(g, v); err != nil {
			return err
		}
		if err := checkValue(g, v); err != nil {
			return err
		}
	}
	for _, o := range g.Outputs {
		if !g.Has(o.Value) {
			return &Error{Pos: o.Pos, Msg: fmt.Sprintf("ir: output %s is not a value of this graph", o.Name)}
		}
		if o.Placement != nil && g.Mesh != nil && len(o.Placement) != g.Mesh.NumAxes() {
			return &Error{Pos: o.Pos, Msg: fmt.Sprintf("ir: output %s: placement %s does not fit the mesh", o.Name, o.Placement)}
		}
	}
	if g.Train != nil {
		return verifyTrain(g, g.Train)
	}
	return nil
}

// verifyArgs checks that v's arguments (and the forward value it is a
// gradient of) are earlier values of g, and that a conversion keeps its
// argument's type: to() changes only where a tensor lives.
func verifyArgs(g *Graph, v *Value) error {
	fail := func(format string, args ...any) error {
		return &Error{Pos: v.Pos, Msg: fmt.Sprintf("ir: %s: ", v.Label()) + fmt.Sprintf(format, args...)}
	}
	for i, a := range v.Args {
		if !g.Has(a) {
			return fail("argument %d is not a value of this graph", i+1)
		}
		if a.ID >= v.ID {
			return fail("argument %d (%s) comes after its user", i+1, a.Label())
		}
	}
	if v.Primal != nil && !g.Has(v.Primal) {
		return fail("the value it is a gradient of is not in this graph")
	}
	if v.Op == "to" {
		if len(v.Args) != 1 {
			return fail("to takes one argument, has %d", len(v.Args))
		}
		if a := v.Args[0].Type; a.DType != v.Type.DType || !slices.Equal(a.Shape, v.Type.Shape) {
			return fail("to changes the type from %s to %s", a, v.Type)
		}
	}
	return nil
}

// verifyTrain checks that the train block's references are values of g and
// that each carried state keeps its type from one step to the next.
func verifyTrain(g *Graph, tr *Train) error {
	fail := func(format string, args ...any) error {
		return &Error{Pos: tr.Pos, Msg: "ir: train: " + fmt.Sprintf(format, args...)}
	}
	if !g.Has(tr.Loss) {
		return fail("the loss is not a value of this graph")
	}
	if tr.Loss.Type.Rank() != 0 || !tr.Loss.Type.DType.IsFloat() {
		return fail("the loss is %s, not a float scalar", tr.Loss.Type)
	}
	type ref struct {
		what string
		v    *Value
	}
	refs := []ref{}
	if tr.FoundInf != nil {
		refs = append(refs, ref{"found_inf", tr.FoundInf})
	}
	for _, name := range slices.Sorted(maps.Keys(tr.Hyper)) {
		refs = append(refs, ref{"hyper " + name, tr.Hyper[name]})
	}
	for _, p := range tr.Params {
		refs = append(refs, ref{"param " + p.Label(), p}, ref{"the gradient of " + p.Label(), tr.Grads[p]})
	}
	for _, b := range tr.Batches {
		refs = append(refs, ref{"batch " + b.Source.Label(), b.Source}, ref{"dataset " + b.Dataset.Label(), b.Dataset})
	}
	for _, r := range refs {
		if !g.Has(r.v) {
			return fail("%s is not a value of this graph", r.what)
		}
	}
	for _, c := range tr.Carry {
		if !g.Has(c.Source) || !g.Has(c.Next) {
			return fail("a carried state is not a value of this graph")
		}
		if c.Source.Type.DType != c.Next.Type.DType || !slices.Equal(c.Source.Type.Shape, c.Next.Type.Shape) {
			return fail("%s is %s but its next value is %s", c.Source.Label(), c.Source.Type, c.Next.Type)
		}
	}
	return nil
}
