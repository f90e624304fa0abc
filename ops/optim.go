package ops

import (
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
)

// Fused optimizer ops: elementwise over tensors of one shape, with scalar
// hyperparameters. Any split of the tensors passes through; the scalars
// are replicated. They are not linear in the state, so partial inputs must
// be reduced first.

func init() {
	Register(Op{Name: "adam_moment", Family: "optim", Kind: Optim, Type: fusedOp(2), Placement: Rule{Sigs: fusedSigs},
		Doc: Doc{Rows: []Row{{"`adam_moment(m, g, beta)`", "", "beta·m + (1 − beta)·g"}},
			RulesWith: "adam_update"}})
	Register(Op{Name: "adam_moment2", Family: "optim", Kind: Optim, Type: fusedOp(2), Placement: Rule{Sigs: fusedSigs},
		Doc: Doc{Rows: []Row{{"`adam_moment2(v, g, beta)`", "", "beta·v + (1 − beta)·g²"}},
			RulesWith: "adam_update"}})
	Register(Op{Name: "adam_update", Family: "optim", Kind: Optim, Type: fusedOp(3), Placement: Rule{Sigs: fusedSigs},
		Doc: Doc{Rows: []Row{{"`adam_update(p, m, v, step, root_bc2, eps, decay)`", "", "p·decay − step·m / (√v / root_bc2 + eps)"}},
			Examples: []Example{{"P'[m,n] = adam_update(P, M, V, step, root_bc2, eps, decay) (also adam_moment, adam_moment2)", OpDesc{In: [][]int{{4, 4}, {4, 4}, {4, 4}, {}, {}, {}, {}}, Out: []int{4, 4}}}}}})
	// adam_fused is the three ops above in one kernel with three results,
	// made by lowering (lower/fuse_adam.go), never by a program: a plan
	// instruction with several results has no value of its own in the
	// graph, which keeps one value per result. Its rule is the three ops'
	// (fusedSigs: the four tensors split alike, the scalars replicated),
	// so each rank's block of every result is what the three ops compute
	// on its blocks. Its arithmetic is theirs (three per element).
	Register(Op{Name: "adam_fused", Family: "optim", Kind: Fused, Placement: Rule{Sigs: fusedSigs}, NoGrad: true, FLOPs: threePerElement, InPlace: []int{0, 1, 2},
		Doc: Doc{Rows: []Row{{"`adam_fused(p, m, v, g, beta1, beta2, step, root_bc2, eps, decay)` (lowering only)", "", "→ (p', m', v'): m' = adam_moment(m, g, beta1), v' = adam_moment2(v, g, beta2), p' = adam_update(p, m', v', step, root_bc2, eps, decay), in one pass"}},
			Examples: []Example{{"(P', M', V')[m,n] = adam_fused(P, M, V, G, beta1, beta2, step, root_bc2, eps, decay) (each result placed as Out)", OpDesc{In: [][]int{{4, 4}, {4, 4}, {4, 4}, {4, 4}, {}, {}, {}, {}, {}, {}}, Out: []int{4, 4}}}}}})
}

// threePerElement counts adam_fused as the three ops it replaces: one
// FLOP per element each (the cost model's default).
func threePerElement(out []int, _ [][]int) float64 {
	n := 1.0
	for _, d := range out {
		n *= float64(d)
	}
	return 3 * n
}

func fusedSigs(d *OpDesc) []Sig {
	var out []Sig
	for i := range d.Out {
		sig := Sig{In: make([]SBP, len(d.In)), Out: S(i), Why: fmt.Sprintf("elementwise: split along dim %d passes through; scalars replicated", i)}
		for k, s := range d.In {
			sig.In[k] = B
			if len(s) == len(d.Out) {
				sig.In[k] = S(i)
			}
		}
		out = append(out, sig)
	}
	return append(out, Sig{In: repeat(B, len(d.In)), Out: B, Why: "replicated in, replicated out"})
}

// fusedOp checks an op whose first n arguments are tensors of one shape and
// whose remaining arguments are scalars.
func fusedOp(n int) TypeRule {
	return func(b *Call) *ir.Value {
		total := map[int]int{2: 3, 3: 7}[n]
		if !b.NArgs(total, total) {
			return nil
		}
		first := b.Tensor(0, nil)
		if !b.floatTensor(first) {
			return nil
		}
		args := []*ir.Value{first}
		for i := 1; i < total; i++ {
			a := b.Tensor(i, first)
			if !b.floatTensor(a) || !b.sameDType(first, a) {
				return nil
			}
			if i < n && !slices.Equal(a.Type.Shape, first.Type.Shape) {
				return b.Failf("shape mismatch in %s: %s and %s", b.Name, ir.ShapeString(first.Type.Shape), ir.ShapeString(a.Type.Shape))
			}
			if i >= n && a.Type.Rank() != 0 {
				return b.Failf("%s: argument %d must be a scalar", b.Name, i+1)
			}
			args = append(args, a)
		}
		return b.NewValue(first.Type, args...)
	}
}
