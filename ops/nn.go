package ops

import "fmt"

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
	register("nn", Rule{Sigs: softmaxSigs}, "softmax", "log_softmax")
	register("nn", Rule{Sigs: layernormSigs}, "layernorm")
	register("nn", Rule{Sigs: embeddingSigs}, "embedding")
	register("loss", Rule{Sigs: crossEntropySigs}, "cross_entropy")
	register("loss", Rule{Sigs: mseSigs}, "mse")
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
