package ops

import (
	"github.com/meshrun/meshrun/ir"
)

// Reductions sum, mean and max over one dim (Axis), or over all dims
// (Axis = -1, giving a scalar). The reduced dim disappears, so a split on a
// later dim shifts down by one. Reducing along the split dim leaves each
// device with a partial result: P(sum) for sum and mean (mean divides by the
// global count, never the local one, so uneven shards stay right), P(max) for
// max. A partial input reduces to a partial output when the reductions agree.

func init() {
	Register(Op{Name: "sum", Family: "reduce", Type: reduceOp, Placement: Rule{Sigs: reduceSigs}, Grad: sumVJP,
		Doc: Doc{Rows: []Row{{"`sum(a)`, `mean(a)`, `max(a)`", "scalar", "over all elements"}, {"`sum(a, axis)`, `mean(a, axis)`, `max(a, axis)`", "the axis is removed", "`mean` divides by the global size of the axis"}},
			Examples: []Example{{"Y[m] = sum(A[m,n], axis=1) (also mean)", OpDesc{In: [][]int{{4, 4}}, Out: []int{4}, Axis: 1}}, {"Y[] = sum(A[m,n]) (all dims; also mean)", OpDesc{In: [][]int{{4, 4}}, Out: []int{}, Axis: -1}}}}})
	Register(Op{Name: "mean", Family: "reduce", Type: reduceOp, Placement: Rule{Sigs: reduceSigs}, Grad: sumVJP,
		Doc: Doc{RowsWith: "sum", RulesWith: "sum"}})
	Register(Op{Name: "max", Family: "reduce", Type: reduceOp, Placement: Rule{Sigs: reduceSigs}, Grad: maxVJP,
		Doc: Doc{RowsWith: "sum",
			Examples: []Example{{"Y[m] = max(A[m,n], axis=1)", OpDesc{In: [][]int{{4, 4}}, Out: []int{4}, Axis: 1}}}}})
	Register(Op{Name: "nonfinite", Family: "reduce", Type: nonfiniteOp, Placement: Rule{Sigs: reduceSigs}, NoGrad: true,
		Doc: Doc{Rows: []Row{{"`nonfinite(x)`", "scalar", "1 if any element is ±inf or NaN, else 0 (the loss scaler's overflow flag); its gradient is zero"}},
			Examples: []Example{{"Y[] = nonfinite(A[m,n])", OpDesc{In: [][]int{{4, 4}}, Out: []int{}, Axis: -1}}}}})
}

func reduceSigs(d *OpDesc) []Sig {
	part := P
	if d.Op == "max" || d.Op == "nonfinite" {
		part = PMax // any shard's overflow flags the whole: a max of 0/1 flags
	}
	var out []Sig
	for i := range d.In[0] {
		switch {
		case d.Axis < 0 || i == d.Axis:
			out = append(out, Sig{In: []SBP{S(i)}, Out: part, Why: "reducing along the split dim: each device holds a partial " + part.Reduce.String()})
		case i < d.Axis:
			out = append(out, Sig{In: []SBP{S(i)}, Out: S(i), Why: "split on another dim passes through"})
		default:
			out = append(out, Sig{In: []SBP{S(i)}, Out: S(i - 1), Why: "split on a later dim passes through, one dim lower"})
		}
	}
	out = append(out, Sig{In: []SBP{B}, Out: B, Why: "replicated in, replicated out"})
	if d.Op != "nonfinite" {
		// nonfinite is no reduction of its input's partials: a P(max)
		// device holds -inf where it owns nothing, which is not an overflow
		out = append(out, Sig{In: []SBP{part}, Out: part, Why: d.Op + " of partial " + part.Reduce.String() + "s is a partial " + part.Reduce.String()})
	}
	return out
}

func reduceOp(b *Call) *ir.Value {
	if !b.NArgs(1, 2) {
		return nil
	}
	x := b.Tensor(0, nil)
	if !b.floatTensor(x) {
		return nil
	}
	_, hasKw := b.Kw["axis"]
	if len(b.Args) < 2 && !hasKw {
		v := b.NewValue(ir.Type{DType: x.Type.DType, Shape: []int{}}, x)
		v.Attrs.Axis = -1
		return v
	}
	if x.Type.Rank() == 0 {
		return b.Failf("%s: a scalar has no axis", b.Name)
	}
	ax, ok := b.axisAttr(1, "axis", 0, x.Type.Rank(), true)
	if !ok {
		return nil
	}
	shape := append(append([]int{}, x.Type.Shape[:ax]...), x.Type.Shape[ax+1:]...)
	v := b.NewValue(ir.Type{DType: x.Type.DType, Shape: shape}, x)
	v.Attrs.Axis = ax
	return v
}

// nonfiniteOp is nonfinite(x): 1 if any element of x is inf or NaN, else 0
// (a scalar of x's dtype; the loss scaler's overflow test).
func nonfiniteOp(b *Call) *ir.Value {
	if !b.NArgs(1, 1) {
		return nil
	}
	x := b.Tensor(0, nil)
	if !b.floatTensor(x) {
		return nil
	}
	v := b.NewValue(ir.Type{DType: x.Type.DType, Shape: []int{}}, x)
	v.Attrs.Axis = -1
	return v
}

// sumVJP is the gradient of sum and mean.
func sumVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	x := a[0]
	gk := g
	count := x.Type.Numel()
	if v.Attrs.Axis >= 0 {
		gk = b.keepdim(g, x, v.Attrs.Axis)
		count = x.Type.Shape[v.Attrs.Axis]
	}
	if v.Op == "mean" {
		gk = b.op("mul", T(gk), N(1/float64(count)))
	}
	if x.Type.Rank() == 0 {
		b.acc(x, gk)
		return
	}
	b.acc(x, b.op("broadcast_to", append([]Arg{T(gk)}, Dims(x.Type.Shape)...)...))
}

// maxVJP is the gradient of max.
func maxVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	args := []Arg{T(b.val(a[0])), T(b.val(v)), T(g)}
	if v.Attrs.Axis >= 0 {
		args = append(args, N(float64(v.Attrs.Axis)))
	}
	b.acc(a[0], b.op("max_grad", args...))
}
