package ops

import (
	"fmt"
	"math"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
)

// Arg is one argument of an op call: a tensor, a number folded at compile
// time (it becomes a scalar constant when an op needs a tensor) or a
// string (cast's dtype).
type Arg struct {
	V   *ir.Value
	Num *float64
	Str *string
	// Ints and Place are attributes only the compiler passes: the mesh
	// axes of a local collective, the offsets of a shift, the boundary
	// placement of to_local and from_local.
	Ints  []int
	Place sbp.NdSBP
}

// T, N, Str and Dims make arguments: a tensor, a number, a string, and a
// shape's dims as numbers.
func T(v *ir.Value) Arg { return Arg{V: v} }
func N(f float64) Arg   { return Arg{Num: &f} }
func Str(s string) Arg  { return Arg{Str: &s} }
func Dims(shape []int) []Arg {
	var out []Arg
	for _, d := range shape {
		out = append(out, N(float64(d)))
	}
	return out
}

// Call is one application of an op being type-checked. A type rule reads
// its arguments through Call's methods, which record the first problem
// (Err); keyword arguments a rule consumes are deleted from Kw, so the
// caller can report the ones left over.
type Call struct {
	Name string
	Pos  ir.Pos
	Args []Arg
	Kw   map[string]Arg
	// Const makes a scalar constant of a dtype, for a number used where a
	// tensor is needed; the caller owns the graph it joins.
	Const func(f float64, dt ir.DType) *ir.Value
	// Mesh is the program's mesh (without its pipeline axis): the local
	// view's collectives need the sizes of their axes.
	Mesh *mesh.Mesh
	err  string
}

// Err is the first problem a type rule found, or "".
func (b *Call) Err() string { return b.err }

// Failf records a problem (the first one counts) and returns nil, so a
// rule can `return b.Failf(...)`.
func (b *Call) Failf(format string, args ...any) *ir.Value {
	if b.err == "" {
		b.err = fmt.Sprintf(format, args...)
	}
	return nil
}

// NArgs checks the number of positional arguments.
func (b *Call) NArgs(lo, hi int) bool {
	if len(b.Args) < lo || len(b.Args) > hi {
		want := fmt.Sprint(lo)
		if hi != lo {
			want = fmt.Sprintf("%d to %d", lo, hi)
		}
		b.Failf("%s takes %s arguments, got %d", b.Name, want, len(b.Args))
		return false
	}
	return true
}

// Tensor returns argument i as a tensor; numbers become scalar constants
// of like's dtype (or f32 when like is nil).
func (b *Call) Tensor(i int, like *ir.Value) *ir.Value {
	a := b.Args[i]
	if a.V != nil {
		return a.V
	}
	if a.Num != nil {
		dt := ir.F32
		if like != nil {
			dt = like.Type.DType
		}
		return b.Const(*a.Num, dt)
	}
	b.Failf("argument %d of %s must be a tensor", i+1, b.Name)
	return nil
}

func (b *Call) floatTensor(v *ir.Value) bool {
	if v != nil && !v.Type.DType.IsFloat() {
		b.Failf("%s needs a float tensor, got %s", b.Name, v.Type)
		return false
	}
	return v != nil
}

// IntAttr reads an integer attribute: a positional argument i (when
// i < len(Args)) or keyword key, else def.
func (b *Call) IntAttr(i int, key string, def int, required bool) (int, bool) {
	var op Arg
	found := false
	if i >= 0 && i < len(b.Args) {
		op, found = b.Args[i], true
	} else if kv, ok := b.Kw[key]; ok {
		op, found = kv, true
		delete(b.Kw, key)
	}
	if !found {
		if required {
			b.Failf("%s needs %s", b.Name, key)
			return 0, false
		}
		return def, true
	}
	if op.Num == nil || *op.Num != math.Trunc(*op.Num) || math.Abs(*op.Num) > 1<<31 {
		b.Failf("%s: %s must be an integer constant", b.Name, key)
		return 0, false
	}
	return int(*op.Num), true
}

// axisAttr reads an axis attribute and resolves a negative one against rank.
func (b *Call) axisAttr(i int, key string, def int, rank int, required bool) (int, bool) {
	ax, ok := b.IntAttr(i, key, def, required)
	if !ok {
		return 0, false
	}
	if ax < -rank || ax >= rank { // the message names the axis as written
		b.Failf("%s: %s %d out of range for rank %d", b.Name, key, ax, rank)
		return 0, false
	}
	if ax < 0 {
		ax += rank
	}
	return ax, true
}

func (b *Call) sameDType(x, y *ir.Value) bool {
	if x.Type.DType != y.Type.DType {
		b.Failf("dtype mismatch in %s: %s and %s", b.Name, x.Type.DType, y.Type.DType)
		return false
	}
	return true
}

func (b *Call) sameShape(x, y *ir.Value) bool {
	if !slices.Equal(x.Type.Shape, y.Type.Shape) {
		b.Failf("shape mismatch in %s: %s and %s", b.Name, ir.ShapeString(x.Type.Shape), ir.ShapeString(y.Type.Shape))
		return false
	}
	return b.sameDType(x, y)
}

// NewValue is the result of this call: a value of op Name, not yet in a graph.
func (b *Call) NewValue(t ir.Type, args ...*ir.Value) *ir.Value {
	return &ir.Value{Op: b.Name, Type: t, Args: args, Pos: b.Pos}
}
