package ops

import "fmt"

// Fused optimizer ops: elementwise over tensors of one shape, with scalar
// hyperparameters. Any split of the tensors passes through; the scalars
// are replicated. They are not linear in the state, so partial inputs must
// be reduced first.

func init() {
	register("optim", Rule{Sigs: fusedSigs}, "adam_moment", "adam_moment2", "adam_update")
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
