package ir

import "fmt"

// Builder appends values to a graph, checking each before it joins: a
// value that broke the graph's order or typing would otherwise surface
// much later, in lowering or at run time, far from the code that made it.
type Builder struct {
	g *Graph
}

// NewBuilder appends to g.
func NewBuilder(g *Graph) *Builder { return &Builder{g: g} }

// Graph is the graph being built.
func (b *Builder) Graph() *Graph { return b.g }

// Add gives v the next ID and appends it. It fails, leaving the graph as it
// was, when an argument is not already a value of this graph or v's type
// or declared placement is malformed.
func (b *Builder) Add(v *Value) (*Value, error) {
	if err := b.check(v); err != nil {
		return nil, err
	}
	v.ID = len(b.g.Values)
	b.g.Values = append(b.g.Values, v)
	return v, nil
}

// check is what Add requires of a new value.
func (b *Builder) check(v *Value) error {
	if v == nil {
		return fmt.Errorf("ir: adding a nil value")
	}
	if v.Op == "" {
		return &Error{Pos: v.Pos, Msg: "ir: a value without an op"}
	}
	for i, a := range v.Args {
		if !b.g.Has(a) {
			return &Error{Pos: v.Pos, Msg: fmt.Sprintf("ir: argument %d of %s is not a value of this graph", i+1, v.Op)}
		}
	}
	return checkValue(b.g, v)
}

// Has reports whether v is one of g's values.
func (g *Graph) Has(v *Value) bool {
	return v != nil && v.ID >= 0 && v.ID < len(g.Values) && g.Values[v.ID] == v
}

// checkValue checks what a value says about itself: a valid type, a
// declared placement that fits the mesh and the tensor's rank, and the
// sources' initialisers.
func checkValue(g *Graph, v *Value) error {
	fail := func(format string, args ...any) error {
		return &Error{Pos: v.Pos, Msg: fmt.Sprintf("ir: %s: ", v.Label()) + fmt.Sprintf(format, args...)}
	}
	if v.Type.DType.Size() == 0 {
		return fail("invalid dtype")
	}
	for _, d := range v.Type.Shape {
		if d < 0 {
			return fail("negative dim in shape %s", ShapeString(v.Type.Shape))
		}
	}
	if !v.Type.Sized() {
		return fail("shape %s has more than 2^40 elements", ShapeString(v.Type.Shape))
	}
	if v.Declared != nil {
		if g.Mesh != nil && len(v.Declared) != g.Mesh.NumAxes() {
			return fail("placement %s has %d entries for a mesh of %d axes", v.Declared, len(v.Declared), g.Mesh.NumAxes())
		}
		for _, s := range v.Declared {
			if s.IsS() && (s.Dim < 0 || s.Dim >= v.Type.Rank()) {
				return fail("placement %s splits dim %d of a rank-%d tensor", v.Declared, s.Dim, v.Type.Rank())
			}
		}
	}
	if v.IsSource() {
		if len(v.Args) != 0 {
			return fail("a source has arguments")
		}
		if v.Attrs.Init == nil {
			return fail("a source has no initialiser")
		}
	}
	return nil
}
