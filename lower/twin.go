package lower

import (
	"math"
	"slices"

	"github.com/meshrun/meshrun/ir"
)

// Twins: a pipelined train block's micro-batches after the first are
// copies of micro-batch 0 (lang's train_micro.go): the same ops on the
// same types at the same source positions, their arguments either the
// same values (params, constants, values made before the block) or the
// copies of micro-batch 0's, a fixed number of IDs further on. Only the
// slice that takes a micro-batch's input rows and the pad in its backward
// differ, in their Start and End. The passes after check would otherwise
// work each copy out again: infer builds and hashes the same choice key,
// spmd the same kernel key and position text, once per micro-batch.
//
// findTwins pairs each value of micro-batch k > 0 with the value of
// micro-batch 0 at the same distance from its micro-batch's start, and
// keeps the pair only where it checks, value by value, that the one is a
// copy of the other (isCopy). Nothing is trusted from the checker: a
// graph built another way simply has fewer twins. The passes then reuse
// what they made for the twin only after checking what their own result
// depends on (infer: the arguments' placements; spmd: the attributes),
// so a twin's result is, field for field, the one the pass would have
// computed (TestTwinsAreWhatThePassesCompute).

// twinsOff makes findTwins find none: the reference the tests compare the
// twins' results with.
var twinsOff bool

// twinOf is, by value ID, the ID of the micro-batch 0 value the value is
// a copy of, or -1.
type twinOf []int32

// findTwins returns g's twins (nil when it has no copied micro-batches).
func findTwins(g *ir.Graph) twinOf {
	if twinsOff || g.Train == nil || g.Train.Pipe == nil || len(g.Train.Pipe.Micro) < 2 {
		return nil
	}
	micro := g.Train.Pipe.Micro
	first := micro[0]
	tw := make(twinOf, len(g.Values))
	for i := range tw {
		tw[i] = -1
	}
	for _, m := range micro[1:] {
		off := m.Start - first.Start
		for i := m.Start; i < m.End && i < len(g.Values); i++ {
			j := i - off
			if j >= first.End {
				break
			}
			if isCopy(g.Values[i], g.Values[j], off, m.Start) {
				tw[i] = int32(j)
			}
		}
	}
	return tw
}

// twin is v's twin, or nil.
func (t twinOf) twin(g *ir.Graph, v *ir.Value) *ir.Value {
	if t == nil || v.ID < 0 || v.ID >= len(t) || t[v.ID] < 0 {
		return nil
	}
	return g.Values[t[v.ID]]
}

// isCopy reports whether v (of the micro-batch starting at ID start, off
// IDs after micro-batch 0) computes what t computes, on the copies of t's
// arguments: the same op, dtype and shape, attributes but for a slice's
// or pad's Start and End, position and call chain, and arguments and
// primal that are t's own or lie off IDs after t's, with the same types.
func isCopy(v, t *ir.Value, off, start int) bool {
	if v.Op != t.Op || v.Type.DType != t.Type.DType || !slices.Equal(v.Type.Shape, t.Type.Shape) ||
		v.Pos != t.Pos || !slices.Equal(v.Calls, t.Calls) || v.Local != t.Local || v.Backward != t.Backward ||
		len(v.Args) != len(t.Args) || !sameAttrs(&v.Attrs, &t.Attrs, true) {
		return false
	}
	mapped := func(a, b *ir.Value) bool {
		if a == nil || b == nil {
			return a == b
		}
		if a != b && (a.ID < start || a.ID-off != b.ID) {
			return false
		}
		return a.Type.DType == b.Type.DType && slices.Equal(a.Type.Shape, b.Type.Shape)
	}
	for k, a := range v.Args {
		if !mapped(a, t.Args[k]) {
			return false
		}
	}
	return mapped(v.Primal, t.Primal)
}

// sameAttrs reports whether two values' attributes are equal (but for
// Start and End when rows is set), floats bit for bit as kernelKey
// encodes them. TestSameAttrsCoversAttrs fails when
// ir.Attrs gains a field this does not compare.
func sameAttrs(a, b *ir.Attrs, rows bool) bool {
	if !rows && (a.Start != b.Start || a.End != b.End) {
		return false
	}
	return a.Axis == b.Axis && slices.Equal(a.Perm, b.Perm) && (a.Perm == nil) == (b.Perm == nil) &&
		math.Float64bits(a.Eps) == math.Float64bits(b.Eps) && math.Float64bits(a.Scalar) == math.Float64bits(b.Scalar) && a.Init == b.Init && a.Regather == b.Regather &&
		slices.Equal(a.Axes, b.Axes) && (a.Axes == nil) == (b.Axes == nil) && a.Root == b.Root &&
		slices.Equal(a.Shift, b.Shift) && (a.Shift == nil) == (b.Shift == nil) && a.Dim2 == b.Dim2 &&
		a.Place.Equal(b.Place) && (a.Place == nil) == (b.Place == nil)
}
