package ops

import "github.com/meshrun/meshrun/ir"

// Builder extends a graph with ops: what the passes over the IR (autodiff,
// the training step) build with. The checker implements it: the values it
// adds carry their call sites and checkpoint marks, and a type error (a
// bug in a pass) becomes its error, reported at the value's position, with
// an invalid value returned in place of a panic.
type Builder interface {
	Graph() *ir.Graph
	// Apply applies an op through its type rule.
	Apply(pos ir.Pos, name string, kw map[string]Arg, args ...Arg) *ir.Value
	// Add appends a value built by hand (a source, a conversion, a
	// recomputation).
	Add(v *ir.Value) *ir.Value
	// Const is a scalar constant.
	Const(f float64, dt ir.DType, pos ir.Pos) *ir.Value
}
