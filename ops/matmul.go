package ops

import (
	"github.com/meshrun/meshrun/ir"
)

// Matmul Y[..., m, n] = A[..., m, k] · B[..., k, n], with batch dims. B may
// have fewer batch dims than A (a shared weight); batch dims it has must
// match A's trailing batch dims. The rules follow from the einsum form:
// a split batch dim splits everything that has it, a split free dim (m or n)
// splits that side's output, a split contracting dim on both sides gives a
// partial sum, and one partial operand against a replicated one stays partial.

func init() {
	Register(Op{Name: "matmul", Family: "matmul", Type: matmulOp, Placement: Rule{Sigs: matmulSigs}, Grad: matmulVJP, FLOPs: matmulFLOPs,
		Doc: Doc{Rows: []Row{{"`a @ b`, `matmul(a, b)`", "`[..., m, k] @ [..., k, n] → [..., m, n]`; rank ≥ 2; batch dims equal or missing on one side (a size-1 batch dim does not broadcast against a larger one, unlike NumPy: use `broadcast_to`)", "batched GEMM (BLAS); a 2-D `b` is shared by all batches"}},
			Examples: []Example{{"Y[m,n] = A[m,k] @ B[k,n]", OpDesc{In: [][]int{{4, 4}, {4, 4}}, Out: []int{4, 4}}}, {"Y[b,m,n] = A[b,m,k] @ B[k,n]", OpDesc{In: [][]int{{4, 4, 4}, {4, 4}}, Out: []int{4, 4, 4}}}}}})
}

func matmulSigs(d *OpDesc) []Sig {
	a, b := d.In[0], d.In[1]
	ra, rb, ro := len(a), len(b), len(d.Out)
	var out []Sig
	// batch dims of the output
	for j := 0; j < ro-2; j++ {
		ka := j - (ro - ra)
		kb := j - (ro - rb)
		sa, sb := B, B
		if ka >= 0 {
			sa = S(ka)
		}
		if kb >= 0 && kb < rb-2 {
			sb = S(kb)
		}
		out = append(out, Sig{In: []SBP{sa, sb}, Out: S(j), Why: "batch dim split: each device multiplies its own batches"})
	}
	out = append(out,
		Sig{In: []SBP{S(ra - 2), B}, Out: S(ro - 2), Why: "rows of A split: each device computes its rows of Y"},
		Sig{In: []SBP{B, S(rb - 1)}, Out: S(ro - 1), Why: "columns of B split: each device computes its columns of Y"},
		Sig{In: []SBP{S(ra - 1), S(rb - 2)}, Out: P, Why: "contracting dim split on both sides: each device holds a partial sum"},
		Sig{In: []SBP{P, B}, Out: P, Why: "matmul is linear in A: partial A gives partial Y"},
		Sig{In: []SBP{B, P}, Out: P, Why: "matmul is linear in B: partial B gives partial Y"},
		Sig{In: []SBP{B, B}, Out: B, Why: "replicated in, replicated out"},
	)
	return out
}

func matmulOp(b *Call) *ir.Value {
	if !b.NArgs(2, 2) {
		return nil
	}
	x, y := b.Tensor(0, nil), b.Tensor(1, nil)
	if !b.floatTensor(x) || !b.floatTensor(y) || !b.sameDType(x, y) {
		return nil
	}
	xs, ys := x.Type.Shape, y.Type.Shape
	if len(xs) < 2 || len(ys) < 2 {
		return b.Failf("matmul needs operands of rank >= 2, got %s @ %s", ir.ShapeString(xs), ir.ShapeString(ys))
	}
	if xs[len(xs)-1] != ys[len(ys)-2] {
		return b.Failf("shape mismatch in matmul: %s @ %s (inner dims %d and %d differ)", ir.ShapeString(xs), ir.ShapeString(ys), xs[len(xs)-1], ys[len(ys)-2])
	}
	xb, yb := xs[:len(xs)-2], ys[:len(ys)-2]
	n := max(len(xb), len(yb))
	batch := make([]int, n)
	for i := 0; i < n; i++ {
		bx, by := -1, -1
		if j := i - (n - len(xb)); j >= 0 {
			bx = xb[j]
		}
		if j := i - (n - len(yb)); j >= 0 {
			by = yb[j]
		}
		if bx >= 0 && by >= 0 && bx != by {
			return b.Failf("shape mismatch in matmul: batch dims %s and %s differ", ir.ShapeString(xb), ir.ShapeString(yb))
		}
		batch[i] = max(bx, by)
	}
	out := append(batch, xs[len(xs)-2], ys[len(ys)-1])
	return b.NewValue(ir.Type{DType: x.Type.DType, Shape: out}, x, y)
}

// matmulVJP is the gradient of matmul.
func matmulVJP(b *Grad) {
	g, a := b.G, b.V.Args
	matmulBoth(b, a[0], a[1], g)
}

// matmul: dA = g·Bᵀ and dB = Aᵀ·g, summed over batch dims an operand
// lacks. A batched A against a 2-D B folds the batch into rows for dB.
func matmulBoth(b *Grad, A, B, g *ir.Value) {
	swap := func(x *ir.Value) *ir.Value { return b.op("transpose", T(b.val(x))) }
	b.acc(A, b.unbroadcast(b.op("matmul", T(g), T(swap(B))), A.Type.Shape))
	if !b.Active(B) {
		return
	}
	if B.Type.Rank() == 2 && A.Type.Rank() > 2 {
		k, nn := A.Type.Shape[A.Type.Rank()-1], g.Type.Shape[g.Type.Rank()-1]
		a2 := b.op("reshape", T(b.val(A)), N(-1), N(float64(k)))
		g2 := b.op("reshape", T(g), N(-1), N(float64(nn)))
		b.acc(B, b.op("matmul", T(swap(a2)), T(g2)))
		return
	}
	b.acc(B, b.unbroadcast(b.op("matmul", T(swap(A)), T(g)), B.Type.Shape))
}

// matmulFLOPs is a multiply and an add per output element per term of the
// contracting dim.
func matmulFLOPs(out []int, in [][]int) float64 {
	a := in[0]
	return 2 * float64(numel(out)) * float64(a[len(a)-1])
}
