package ops

import "github.com/meshrun/meshrun/ir"

// GradRule is an op's vector-Jacobian product: given a value v of the op
// and its adjoint g, it adds to the adjoint of each argument its share,
// written with ordinary ops and the gradient helper ops.
type GradRule func(b *Grad)

// Grad is what a gradient rule sees: the forward value, its adjoint, and
// the autodiff pass's hooks. The pass owns the graph and the adjoints;
// rules only say which ops compute a gradient.
type Grad struct {
	V, G *ir.Value
	// Build applies an op at the forward value's position, marked as
	// backward.
	Build func(name string, kw map[string]Arg, args ...Arg) *ir.Value
	// Val is a forward value as the backward reads it (a checkpointed one
	// is recomputed, a ZeRO-3 gather repeated).
	Val func(x *ir.Value) *ir.Value
	// Acc adds a contribution to x's adjoint (ignored when x needs none).
	Acc func(x, contrib *ir.Value)
	// Active reports whether x needs an adjoint.
	Active func(x *ir.Value) bool
}

func (b *Grad) op(name string, args ...Arg) *ir.Value { return b.Build(name, nil, args...) }
func (b *Grad) opKw(name string, kw map[string]Arg, args ...Arg) *ir.Value {
	return b.Build(name, kw, args...)
}
func (b *Grad) val(x *ir.Value) *ir.Value { return b.Val(x) }
func (b *Grad) acc(x, contrib *ir.Value)  { b.Acc(x, contrib) }

// unbroadcast sums g down to shape: over leading dims g has and shape
// lacks, and over dims where shape has 1 and g more.
func (b *Grad) unbroadcast(g *ir.Value, shape []int) *ir.Value {
	for g.Type.Rank() > len(shape) {
		g = b.op("sum", T(g), N(0))
	}
	for i, d := range shape {
		if d == 1 && g.Type.Shape[i] != 1 {
			keep := append([]int{}, g.Type.Shape...)
			keep[i] = 1
			g = b.op("reshape", append([]Arg{T(b.op("sum", T(g), N(float64(i))))}, Dims(keep)...)...)
		}
	}
	return g
}

// keepdim reshapes a reduction's result r of x along axis back to rank(x).
func (b *Grad) keepdim(r *ir.Value, x *ir.Value, axis int) *ir.Value {
	keep := append([]int{}, x.Type.Shape...)
	keep[axis] = 1
	return b.op("reshape", append([]Arg{T(r)}, Dims(keep)...)...)
}

// sumToLast sums every dim but the last: [.., h] → [h].
func (b *Grad) sumToLast(x *ir.Value) *ir.Value {
	for x.Type.Rank() > 1 {
		x = b.op("sum", T(x), N(0))
	}
	return x
}
