package ops

import (
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
)

// Gradient helper ops. Each is linear in its incoming gradient, so a
// partial gradient against replicated forward values stays partial — the
// placement duality of backward passes (a B value's gradient is P).

func init() {
	Register(Op{Name: "relu_grad", Family: "grad", Kind: Helper, Type: unaryOp, Placement: Rule{Sigs: unarySigs(false)},
		Doc: Doc{Rows: []Row{{"`relu_grad(x)`", "", "1 where x > 0, else 0"}},
			Examples: []Example{{"Y = relu_grad(A[m,n]) (also gelu_grad)", OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "gelu_grad", Family: "grad", Kind: Helper, Type: unaryOp, Placement: Rule{Sigs: unarySigs(false)},
		Doc: Doc{Rows: []Row{{"`gelu_grad(x)`", "", "Φ(x) + x·φ(x), the derivative of exact gelu"}},
			RulesWith: "relu_grad"}})
	Register(Op{Name: "softmax_grad", Family: "grad", Kind: Helper, Type: softmaxGradOp, Placement: Rule{Sigs: softmaxGradSigs},
		Doc: Doc{Rows: []Row{{"`softmax_grad(y, g, axis=-1)`", "", "y·(g − Σ_axis g·y), given softmax's output y"}},
			Examples: []Example{{"D[m,n] = softmax_grad(Y[m,n], G[m,n], axis=1)", OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}, Axis: 1}}}}})
	Register(Op{Name: "normalize", Family: "grad", Kind: Helper, Type: normalizeOp, Placement: Rule{Sigs: normalizeSigs},
		Doc: Doc{Rows: []Row{{"`normalize(x, eps=1e-5)`", "", "(x − μ)/√(σ² + eps) over the last dim"}},
			Examples: []Example{{"Y[m,n] = normalize(A[m,n])", OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "normalize_grad", Family: "grad", Kind: Helper, Type: normalizeGradOp, Placement: Rule{Sigs: normalizeGradSigs},
		Doc: Doc{Rows: []Row{{"`normalize_grad(x, d, eps=1e-5)`", "", "(d − mean(d) − x̂·mean(d·x̂))/σ, the backward of normalize"}},
			Examples: []Example{{"D[m,n] = normalize_grad(X[m,n], G[m,n])", OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "max_grad", Family: "grad", Kind: Helper, Type: maxGradOp, Placement: Rule{Sigs: maxGradSigs},
		Doc: Doc{Rows: []Row{{"`max_grad(x, y, g[, axis])`", "", "g routed to the maxima of x (y = max(x, axis)), shared equally among ties"}},
			Examples: []Example{{"D[m,n] = max_grad(X[m,n], Y[m], G[m], 1)", OpDesc{In: [][]int{{4, 4}, {4}, {4}}, Out: []int{4, 4}, Axis: 1}}}}})
	Register(Op{Name: "broadcast_to", Family: "grad", Kind: Helper, Type: broadcastToOp, Placement: Rule{Sigs: broadcastToSigs},
		Doc: Doc{Rows: []Row{{"`broadcast_to(x, d0, ...)`", "", "NumPy broadcast to a shape"}},
			Examples: []Example{{"Y[m,n] = broadcast_to(A[m,1], m, n)", OpDesc{In: [][]int{{4, 1}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "pad", Family: "grad", Kind: Helper, Type: padOp, Placement: Rule{Sigs: alongAxisSigs},
		Doc: Doc{Rows: []Row{{"`pad(x, axis, before, after)`", "", "zeros added along axis"}},
			Examples: []Example{{"Y[m,n+i+j] = pad(A[m,n], 1, i, j)", OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 7}, Axis: 1}}}}})
	Register(Op{Name: "embedding_grad", Family: "grad", Kind: Helper, Type: embeddingGradOp, Placement: Rule{Sigs: embeddingGradSigs},
		Doc: Doc{Rows: []Row{{"`embedding_grad(idx, g, vocab)`", "", "rows of g scatter-added into a [vocab, hidden] table"}},
			Examples: []Example{{"D[v,h] = embedding_grad(idx[t], G[t,h], v)", OpDesc{In: [][]int{{4}, {4, 4}}, Out: []int{8, 4}}}}}})
	Register(Op{Name: "cross_entropy_grad", Family: "grad", Kind: Helper, Type: crossEntropyGradOp, Placement: Rule{Sigs: crossEntropyGradSigs},
		Doc: Doc{Rows: []Row{{"`cross_entropy_grad(logits, labels, g)`", "", "(softmax(logits) − onehot(labels))·g/N"}},
			Examples: []Example{{"D[n,c] = cross_entropy_grad(logits[n,c], labels[n], g[])", OpDesc{In: [][]int{{4, 4}, {4}, {}}, Out: []int{4, 4}}}}}})
}

func softmaxGradSigs(d *OpDesc) []Sig {
	var out []Sig
	for i := range d.In[0] {
		if i != d.Axis {
			out = append(out, Sig{In: []SBP{S(i), S(i)}, Out: S(i), Why: fmt.Sprintf("rows along dim %d are whole on every device", d.Axis)})
		}
	}
	return append(out,
		Sig{In: []SBP{B, B}, Out: B, Why: "replicated in, replicated out"},
		Sig{In: []SBP{B, P}, Out: P, Why: "linear in the incoming gradient"})
}

func normalizeSigs(d *OpDesc) []Sig {
	var out []Sig
	for i := 0; i < len(d.In[0])-1; i++ {
		out = append(out, Sig{In: []SBP{S(i)}, Out: S(i), Why: "normalised rows are whole on every device"})
	}
	return append(out, Sig{In: []SBP{B}, Out: B, Why: "replicated in, replicated out"})
}

func normalizeGradSigs(d *OpDesc) []Sig {
	var out []Sig
	for i := 0; i < len(d.In[0])-1; i++ {
		out = append(out, Sig{In: []SBP{S(i), S(i)}, Out: S(i), Why: "normalised rows are whole on every device"})
	}
	return append(out,
		Sig{In: []SBP{B, B}, Out: B, Why: "replicated in, replicated out"},
		Sig{In: []SBP{B, P}, Out: P, Why: "linear in the incoming gradient"})
}

// maxGradSigs: x has the reduced axis; y and g do not.
func maxGradSigs(d *OpDesc) []Sig {
	var out []Sig
	if d.Axis >= 0 {
		for i := range d.In[0] {
			if i == d.Axis {
				continue
			}
			j := i
			if i > d.Axis {
				j = i - 1
			}
			out = append(out, Sig{In: []SBP{S(i), S(j), S(j)}, Out: S(i), Why: "rows along the reduced dim are whole on every device"})
		}
	}
	return append(out,
		Sig{In: []SBP{B, B, B}, Out: B, Why: "replicated in, replicated out"},
		Sig{In: []SBP{B, B, P}, Out: P, Why: "linear in the incoming gradient"})
}

// broadcastToSigs: a dim the input has (not stretched) keeps its split; a
// dim the broadcast creates or stretches can be split from a replicated
// input, each device expanding only its slice.
func broadcastToSigs(d *OpDesc) []Sig {
	in, out := d.In[0], d.Out
	off := len(out) - len(in)
	var sigs []Sig
	for o := range out {
		j := o - off
		if j >= 0 && in[j] == out[o] {
			sigs = append(sigs, Sig{In: []SBP{S(j)}, Out: S(o), Why: "a kept dim keeps its split"})
		} else {
			sigs = append(sigs, Sig{In: []SBP{B}, Out: S(o), Why: "each device expands its slice of a new dim"})
		}
	}
	return append(sigs,
		Sig{In: []SBP{B}, Out: B, Why: "replicated in, replicated out"},
		Sig{In: []SBP{P}, Out: P, Why: "broadcasting is linear"})
}

func embeddingGradSigs(d *OpDesc) []Sig {
	var out []Sig
	r := len(d.In[0])
	for i := 0; i < r; i++ {
		out = append(out, Sig{In: []SBP{S(i), S(i)}, Out: P, Why: "each device scatters its own rows: partial sums of the table gradient"})
	}
	return append(out,
		Sig{In: []SBP{B, S(r)}, Out: S(1), Why: "hidden dim split: each device scatters its slice"},
		Sig{In: []SBP{B, B}, Out: B, Why: "replicated in, replicated out"},
		Sig{In: []SBP{B, P}, Out: P, Why: "linear in the incoming gradient"})
}

func crossEntropyGradSigs(d *OpDesc) []Sig {
	return []Sig{
		{In: []SBP{S(0), S(0), B}, Out: S(0), Why: "rows split: each device differentiates its rows"},
		{In: []SBP{B, B, B}, Out: B, Why: "replicated in, replicated out"},
		{In: []SBP{B, B, P}, Out: P, Why: "linear in the incoming gradient"},
	}
}

// softmax_grad(y, g, axis=-1) = y·(g − Σ_axis g·y): the backward of softmax
// given its output y.
func softmaxGradOp(b *Call) *ir.Value {
	if !b.NArgs(2, 3) {
		return nil
	}
	y, g := b.Tensor(0, nil), b.Tensor(1, nil)
	if !b.floatTensor(y) || !b.floatTensor(g) || !b.sameShape(y, g) {
		return nil
	}
	if y.Type.Rank() == 0 {
		return b.Failf("softmax_grad needs a tensor of rank >= 1")
	}
	ax, ok := b.axisAttr(2, "axis", -1, y.Type.Rank(), false)
	if !ok {
		return nil
	}
	v := b.NewValue(y.Type, y, g)
	v.Attrs.Axis = ax
	return v
}

func (b *Call) epsAttr() (float64, bool) {
	eps := 1e-5
	if e, ok := b.Kw["eps"]; ok {
		delete(b.Kw, "eps")
		if e.Num == nil || *e.Num <= 0 {
			b.Failf("%s: eps must be a positive number", b.Name)
			return 0, false
		}
		eps = *e.Num
	}
	return eps, true
}

// normalize(x, eps=1e-5) = (x − mean)/√(var + eps) over the last dim:
// layernorm without gamma and beta.
func normalizeOp(b *Call) *ir.Value {
	if !b.NArgs(1, 1) {
		return nil
	}
	x := b.Tensor(0, nil)
	if !b.floatTensor(x) {
		return nil
	}
	if x.Type.Rank() == 0 {
		return b.Failf("normalize needs a tensor of rank >= 1")
	}
	eps, ok := b.epsAttr()
	if !ok {
		return nil
	}
	v := b.NewValue(x.Type, x)
	v.Attrs.Eps = eps
	return v
}

// normalize_grad(x, d, eps=1e-5) is the backward of normalize: with
// x̂ = normalize(x) and σ = √(var + eps), (d − mean(d) − x̂·mean(d·x̂))/σ.
func normalizeGradOp(b *Call) *ir.Value {
	if !b.NArgs(2, 2) {
		return nil
	}
	x, d := b.Tensor(0, nil), b.Tensor(1, nil)
	if !b.floatTensor(x) || !b.floatTensor(d) || !b.sameShape(x, d) {
		return nil
	}
	if x.Type.Rank() == 0 {
		return b.Failf("normalize_grad needs a tensor of rank >= 1")
	}
	eps, ok := b.epsAttr()
	if !ok {
		return nil
	}
	v := b.NewValue(x.Type, x, d)
	v.Attrs.Eps = eps
	return v
}

// max_grad(x, y, g, axis) routes g (shaped like y = max(x, axis)) to the
// positions of the maximum, shared equally among ties (like torch.amax).
// Without axis, y and g are scalars (max over all elements).
func maxGradOp(b *Call) *ir.Value {
	if !b.NArgs(3, 4) {
		return nil
	}
	x, y, g := b.Tensor(0, nil), b.Tensor(1, nil), b.Tensor(2, nil)
	if !b.floatTensor(x) || !b.floatTensor(y) || !b.floatTensor(g) || !b.sameShape(y, g) || !b.sameDType(x, y) {
		return nil
	}
	axis := -1
	if len(b.Args) == 4 {
		ax, ok := b.axisAttr(3, "axis", 0, x.Type.Rank(), true)
		if !ok {
			return nil
		}
		axis = ax
	}
	want := []int{}
	if axis >= 0 {
		want = append(append([]int{}, x.Type.Shape[:axis]...), x.Type.Shape[axis+1:]...)
	}
	if !slices.Equal(want, y.Type.Shape) {
		return b.Failf("shape mismatch in max_grad: max of %s is %s, got %s", ir.ShapeString(x.Type.Shape), ir.ShapeString(want), ir.ShapeString(y.Type.Shape))
	}
	v := b.NewValue(x.Type, x, y, g)
	v.Attrs.Axis = axis
	return v
}

// broadcast_to(x, d0, d1, ...) expands x NumPy-style to the given shape.
func broadcastToOp(b *Call) *ir.Value {
	if len(b.Args) < 1 {
		return b.Failf("broadcast_to takes x and the target dims")
	}
	x := b.Tensor(0, nil)
	if !b.floatTensor(x) {
		return nil
	}
	shape := make([]int, len(b.Args)-1)
	for i := range shape {
		d, ok := b.IntAttr(i+1, "dim", 0, true)
		if !ok {
			return nil
		}
		if d < 1 {
			return b.Failf("broadcast_to: dim %d is invalid", d)
		}
		shape[i] = d
	}
	if out, ok := Broadcast(x.Type.Shape, shape); !ok || !slices.Equal(out, shape) {
		return b.Failf("shape mismatch in broadcast_to: %s does not broadcast to %s", ir.ShapeString(x.Type.Shape), ir.ShapeString(shape))
	}
	return b.NewValue(ir.Type{DType: x.Type.DType, Shape: shape}, x)
}

// pad(x, axis, before, after) adds zeros along axis: the backward of slice.
func padOp(b *Call) *ir.Value {
	x, ax, before, after, ok := b.axisAndTwoInts("before", "after")
	if !ok {
		return nil
	}
	if before < 0 || after < 0 || before+after > 1<<30 {
		return b.Failf("pad: before and after must be >= 0")
	}
	shape := append([]int{}, x.Type.Shape...)
	shape[ax] += before + after
	v := b.NewValue(ir.Type{DType: x.Type.DType, Shape: shape}, x)
	v.Attrs.Axis, v.Attrs.Start, v.Attrs.End = ax, before, before+x.Type.Shape[ax]
	return v
}

// embedding_grad(idx, g, vocab) scatter-adds the rows of g into a
// [vocab, hidden] table: the backward of embedding with respect to W.
func embeddingGradOp(b *Call) *ir.Value {
	if !b.NArgs(3, 3) {
		return nil
	}
	idx, g := b.Tensor(0, nil), b.Tensor(1, nil)
	if idx == nil || !b.floatTensor(g) {
		return nil
	}
	if !idx.Type.DType.IsInt() {
		return b.Failf("embedding_grad indices must be i32 or i64, got %s", idx.Type.DType)
	}
	vocab, ok := b.IntAttr(2, "vocab", 0, true)
	if !ok {
		return nil
	}
	if vocab < 1 {
		return b.Failf("embedding_grad: vocab must be positive")
	}
	r := idx.Type.Rank()
	if g.Type.Rank() != r+1 || !slices.Equal(g.Type.Shape[:r], idx.Type.Shape) {
		return b.Failf("shape mismatch in embedding_grad: indices %s and gradient %s", ir.ShapeString(idx.Type.Shape), ir.ShapeString(g.Type.Shape))
	}
	return b.NewValue(ir.Type{DType: g.Type.DType, Shape: []int{vocab, g.Type.Shape[r]}}, idx, g)
}

// cross_entropy_grad(logits, labels, g) = (softmax(logits) − onehot(labels))·g/N.
func crossEntropyGradOp(b *Call) *ir.Value {
	if !b.NArgs(3, 3) {
		return nil
	}
	x, t := b.Tensor(0, nil), b.Tensor(1, nil)
	g := b.Tensor(2, x)
	if !b.floatTensor(x) || t == nil || !b.floatTensor(g) || !b.sameDType(x, g) {
		return nil
	}
	if x.Type.Rank() != 2 || t.Type.Rank() != 1 || x.Type.Shape[0] != t.Type.Shape[0] || g.Type.Rank() != 0 {
		return b.Failf("shape mismatch in cross_entropy_grad: want logits [N, C], labels [N] and a scalar gradient")
	}
	if !t.Type.DType.IsInt() {
		return b.Failf("cross_entropy_grad labels must be i32 or i64, got %s", t.Type.DType)
	}
	return b.NewValue(x.Type, x, t, g)
}
