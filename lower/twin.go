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
// findTwins names, for each value of micro-batch k > 0, its candidate
// twin: the value of micro-batch 0 at the same distance from its
// micro-batch's start (from the micro-batches' ID ranges alone, without
// reading a value). Nothing is trusted from the checker: before a pass
// reuses what it made for the candidate it compares, on the two values,
// everything its result is a function of — infer the choice key
// (twinChoice), spmd the kernel key and the position (kernelWhere) — so
// a twin's result is, field for field, the one the pass would have
// computed (TestTwinsAreWhatThePassesCompute), and a graph built another
// way simply has fewer twins.

// twinsOff makes findTwins find none: the reference the tests compare the
// twins' results with.
var twinsOff bool

// twinOf is, by value ID, the ID of the micro-batch 0 value that is the
// value's candidate twin, or -1.
type twinOf []int32

// findTwins returns g's candidate twins (nil when it has no copied
// micro-batches).
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
		for i := max(m.Start, 0); i < m.End && i < len(g.Values) && i-off < first.End; i++ {
			tw[i] = int32(i - off)
		}
	}
	return tw
}

// twin is v's candidate twin, or nil.
func (t twinOf) twin(g *ir.Graph, v *ir.Value) *ir.Value {
	if t == nil || v.ID < 0 || v.ID >= len(t) || t[v.ID] < 0 {
		return nil
	}
	return g.Values[t[v.ID]]
}

// sameDesc reports whether v and t have the same op description (descKey:
// op, result shape, axis, permutation, argument count and shapes) and
// dtypes (the value's and its arguments').
func sameDesc(v, t *ir.Value) bool {
	if v.Op != t.Op || v.Type.DType != t.Type.DType || !slices.Equal(v.Type.Shape, t.Type.Shape) ||
		v.Attrs.Axis != t.Attrs.Axis || !slices.Equal(v.Attrs.Perm, t.Attrs.Perm) || len(v.Args) != len(t.Args) {
		return false
	}
	for k, a := range v.Args {
		b := t.Args[k]
		if a.Type.DType != b.Type.DType || !slices.Equal(a.Type.Shape, b.Type.Shape) {
			return false
		}
	}
	return true
}

// sameKernel reports whether v and t have equal kernel keys (kernelKey:
// the description, every attribute but Init, and nil shapes apart from
// empty ones).
func sameKernel(v, t *ir.Value) bool {
	if !sameDesc(v, t) || (v.Type.Shape == nil) != (t.Type.Shape == nil) || !sameAttrs(&v.Attrs, &t.Attrs, false) {
		return false
	}
	for k, a := range v.Args {
		if (a.Type.Shape == nil) != (t.Args[k].Type.Shape == nil) {
			return false
		}
	}
	return true
}

// samePlace reports whether v and t are at the same position with the
// same call chain (their Where texts are equal).
func samePlace(v, t *ir.Value) bool {
	return v.Pos == t.Pos && slices.Equal(v.Calls, t.Calls)
}

// sameAttrs reports whether two values' attributes are equal (but for
// Start and End when rows is set; Init is compared as a pointer), floats
// bit for bit and nil slices apart from empty ones, as kernelKey encodes
// them. TestSameAttrsCoversAttrs fails when ir.Attrs gains a field this
// does not compare.
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
