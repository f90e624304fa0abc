package ops

import (
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
)

// Neural-network ops.
// softmax / log_softmax along Axis need whole rows: any split on another dim
// passes; a split along Axis or a partial input must be converted first.
// layernorm normalises the last dim: splits on earlier dims pass, gamma and
// beta are replicated.
// embedding(W[V,H], idx) → [..., H]: split indices give split rows; a
// vocab-split table gives a partial result (each device looks up the rows it
// has and writes zeros for the rest, Megatron's vocab-parallel embedding); a
// hidden-split table gives an output split on its last dim.
// cross_entropy(logits[N,C], labels[N]) and mse(a, b) are means over all
// elements: split rows give partial sums of the per-row losses divided by the
// global count.

func init() {
	Register(Op{Name: "softmax", Family: "nn", Type: softmaxOp, Placement: Rule{Sigs: softmaxSigs}, Grad: softmaxVJP,
		Doc: Doc{Rows: []Row{{"`softmax(a, axis=-1)`, `log_softmax(a, axis=-1)`", "same shape", "max-subtracted, stable"}},
			Examples: []Example{{"Y[m,n] = softmax(A[m,n], axis=1) (also log_softmax)", OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}, Axis: 1}}}}})
	Register(Op{Name: "log_softmax", Family: "nn", Type: softmaxOp, Placement: Rule{Sigs: softmaxSigs}, Grad: logSoftmaxVJP,
		Doc: Doc{RowsWith: "softmax", RulesWith: "softmax"}})
	Register(Op{Name: "layernorm", Family: "nn", Type: layernormOp, Placement: Rule{Sigs: layernormSigs}, Grad: layernormVJP,
		Doc: Doc{Rows: []Row{{"`layernorm(x, gamma, beta, eps=1e-5)`", "`gamma`, `beta` are `[last dim]`", "normalises the last dim: `(x-μ)/√(σ²+eps)·γ+β`, biased variance (PyTorch)"}},
			Examples: []Example{{"Y[m,n] = layernorm(A[m,n], gamma[n], beta[n])", OpDesc{In: [][]int{{4, 4}, {4}, {4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "embedding", Family: "nn", Type: embeddingOp, Placement: Rule{Sigs: embeddingSigs}, Grad: embeddingVJP,
		Doc: Doc{Rows: []Row{{"`embedding(W, idx)`", "`W [V, H]` float, `idx` int → `idx.shape + [H]`", "row lookup; an index outside `[0, V)` is a run-time error"}},
			Examples: []Example{{"Y[t,h] = embedding(W[v,h], idx[t])", OpDesc{In: [][]int{{8, 4}, {4}}, Out: []int{4, 4}}}}}})
	Register(Op{Name: "cross_entropy", Family: "loss", Type: crossEntropyOp, Placement: Rule{Sigs: crossEntropySigs}, Grad: crossEntropyVJP,
		Doc: Doc{Rows: []Row{{"`cross_entropy(logits, labels)`", "`[N, C]`, int `[N]` → scalar", "mean over N of `logsumexp(row) - row[label]` (PyTorch's default reduction)"}},
			Examples: []Example{{"Y[] = cross_entropy(logits[n,c], labels[n])", OpDesc{In: [][]int{{4, 4}, {4}}, Out: []int{}}}}}})
	Register(Op{Name: "mse", Family: "loss", Type: mseOp, Placement: Rule{Sigs: mseSigs}, Grad: mseVJP,
		Doc: Doc{Rows: []Row{{"`mse(a, b)`", "equal shapes → scalar", "mean of squared differences"}},
			Examples: []Example{{"Y[] = mse(A[m,n], B[m,n])", OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{}}}}}})
}

func softmaxSigs(d *OpDesc) []Sig {
	var out []Sig
	for i := range d.In[0] {
		if i != d.Axis {
			out = append(out, Sig{In: []SBP{S(i)}, Out: S(i), Why: fmt.Sprintf("rows along dim %d are whole on every device", d.Axis)})
		}
	}
	return append(out, Sig{In: []SBP{B}, Out: B, Why: "replicated in, replicated out"})
}

func layernormSigs(d *OpDesc) []Sig {
	var out []Sig
	r := len(d.In[0])
	for i := 0; i < r-1; i++ {
		out = append(out, Sig{In: []SBP{S(i), B, B}, Out: S(i), Why: "normalised rows are whole on every device"})
	}
	return append(out, Sig{In: []SBP{B, B, B}, Out: B, Why: "replicated in, replicated out"})
}

func embeddingSigs(d *OpDesc) []Sig {
	var out []Sig
	ri := len(d.In[1])
	for i := 0; i < ri; i++ {
		out = append(out, Sig{In: []SBP{B, S(i)}, Out: S(i), Why: "indices split: each device looks up its own indices"})
	}
	return append(out,
		Sig{In: []SBP{S(0), B}, Out: P, Why: "vocab-parallel: each device looks up the rows it holds, zeros elsewhere"},
		Sig{In: []SBP{S(1), B}, Out: S(ri), Why: "hidden dim split: each device looks up its slice of every row"},
		Sig{In: []SBP{B, B}, Out: B, Why: "replicated in, replicated out"})
}

func crossEntropySigs(d *OpDesc) []Sig {
	return []Sig{
		{In: []SBP{S(0), S(0)}, Out: P, Why: "rows split: each device sums its rows' losses over the global count"},
		{In: []SBP{B, B}, Out: B, Why: "replicated in, replicated out"},
	}
}

func mseSigs(d *OpDesc) []Sig {
	var out []Sig
	for i := range d.In[0] {
		out = append(out, Sig{In: []SBP{S(i), S(i)}, Out: P, Why: "each device sums its squared errors over the global count"})
	}
	return append(out, Sig{In: []SBP{B, B}, Out: B, Why: "replicated in, replicated out"})
}

func softmaxOp(b *Call) *ir.Value {
	if !b.NArgs(1, 2) {
		return nil
	}
	x := b.Tensor(0, nil)
	if !b.floatTensor(x) {
		return nil
	}
	if x.Type.Rank() == 0 {
		return b.Failf("%s needs a tensor of rank >= 1", b.Name)
	}
	ax, ok := b.axisAttr(1, "axis", -1, x.Type.Rank(), false)
	if !ok {
		return nil
	}
	v := b.NewValue(x.Type, x)
	v.Attrs.Axis = ax
	return v
}

func layernormOp(b *Call) *ir.Value {
	if !b.NArgs(3, 3) {
		return nil
	}
	x := b.Tensor(0, nil)
	g, be := b.Tensor(1, x), b.Tensor(2, x)
	if !b.floatTensor(x) || !b.floatTensor(g) || !b.floatTensor(be) || !b.sameDType(x, g) || !b.sameDType(x, be) {
		return nil
	}
	if x.Type.Rank() == 0 {
		return b.Failf("layernorm needs a tensor of rank >= 1")
	}
	h := x.Type.Shape[x.Type.Rank()-1]
	for _, p := range []*ir.Value{g, be} {
		if !slices.Equal(p.Type.Shape, []int{h}) {
			return b.Failf("shape mismatch in layernorm: gamma and beta must be [%d] for input %s, got %s", h, ir.ShapeString(x.Type.Shape), ir.ShapeString(p.Type.Shape))
		}
	}
	eps := 1e-5
	if e, ok := b.Kw["eps"]; ok {
		delete(b.Kw, "eps")
		if e.Num == nil || *e.Num <= 0 {
			return b.Failf("layernorm: eps must be a positive number")
		}
		eps = *e.Num
	}
	v := b.NewValue(x.Type, x, g, be)
	v.Attrs.Eps = eps
	return v
}

func embeddingOp(b *Call) *ir.Value {
	if !b.NArgs(2, 2) {
		return nil
	}
	w, idx := b.Tensor(0, nil), b.Tensor(1, nil)
	if !b.floatTensor(w) || idx == nil {
		return nil
	}
	if w.Type.Rank() != 2 {
		return b.Failf("embedding table must be [vocab, hidden], got %s", ir.ShapeString(w.Type.Shape))
	}
	if !idx.Type.DType.IsInt() {
		return b.Failf("embedding indices must be i32 or i64, got %s", idx.Type.DType)
	}
	shape := append(append([]int{}, idx.Type.Shape...), w.Type.Shape[1])
	return b.NewValue(ir.Type{DType: w.Type.DType, Shape: shape}, w, idx)
}

func crossEntropyOp(b *Call) *ir.Value {
	if !b.NArgs(2, 2) {
		return nil
	}
	x, y := b.Tensor(0, nil), b.Tensor(1, nil)
	if !b.floatTensor(x) || y == nil {
		return nil
	}
	if x.Type.Rank() != 2 || y.Type.Rank() != 1 || x.Type.Shape[0] != y.Type.Shape[0] {
		return b.Failf("shape mismatch in cross_entropy: want logits [N, C] and labels [N], got %s and %s", ir.ShapeString(x.Type.Shape), ir.ShapeString(y.Type.Shape))
	}
	if !y.Type.DType.IsInt() {
		return b.Failf("cross_entropy labels must be i32 or i64, got %s", y.Type.DType)
	}
	return b.NewValue(ir.Type{DType: x.Type.DType, Shape: []int{}}, x, y)
}

func mseOp(b *Call) *ir.Value {
	if !b.NArgs(2, 2) {
		return nil
	}
	x, y := b.Tensor(0, nil), b.Tensor(1, nil)
	if !b.floatTensor(x) || !b.floatTensor(y) || !b.sameDType(x, y) {
		return nil
	}
	if !slices.Equal(x.Type.Shape, y.Type.Shape) {
		return b.Failf("shape mismatch in mse: %s and %s", ir.ShapeString(x.Type.Shape), ir.ShapeString(y.Type.Shape))
	}
	return b.NewValue(ir.Type{DType: x.Type.DType, Shape: []int{}}, x, y)
}

// softmaxVJP is the gradient of softmax.
func softmaxVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	b.acc(a[0], b.op("softmax_grad", T(b.val(v)), T(g), N(float64(v.Attrs.Axis))))
}

// logSoftmaxVJP is the gradient of log_softmax.
func logSoftmaxVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	s := b.keepdim(b.op("sum", T(g), N(float64(v.Attrs.Axis))), g, v.Attrs.Axis)
	b.acc(a[0], b.op("sub", T(g), T(b.op("mul", T(b.op("exp", T(b.val(v)))), T(s)))))
}

// layernormVJP is the gradient of layernorm.
func layernormVJP(b *Grad) {
	v, g, a := b.V, b.G, b.V.Args
	eps := map[string]Arg{"eps": N(v.Attrs.Eps)}
	xh := b.opKw("normalize", eps, T(b.val(a[0])))
	b.acc(a[1], b.sumToLast(b.op("mul", T(g), T(xh))))
	b.acc(a[2], b.sumToLast(g))
	b.acc(a[0], b.opKw("normalize_grad", map[string]Arg{"eps": N(v.Attrs.Eps)}, T(b.val(a[0])), T(b.op("mul", T(g), T(b.val(a[1]))))))
}

// embeddingVJP is the gradient of embedding.
func embeddingVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.op("embedding_grad", T(b.val(a[1])), T(g), N(float64(a[0].Type.Shape[0]))))
}

// crossEntropyVJP is the gradient of cross_entropy.
func crossEntropyVJP(b *Grad) {
	g, a := b.G, b.V.Args
	b.acc(a[0], b.op("cross_entropy_grad", T(b.val(a[0])), T(b.val(a[1])), T(g)))
}

// mseVJP is the gradient of mse.
func mseVJP(b *Grad) {
	g, a := b.G, b.V.Args
	d := b.op("mul", T(b.op("sub", T(b.val(a[0])), T(b.val(a[1])))), T(b.op("mul", T(g), N(2/float64(a[0].Type.Numel())))))
	b.acc(a[0], d)
	b.acc(a[1], b.op("neg", T(d)))
}
