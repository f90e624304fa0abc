package ops

import "fmt"

// Gradient helper ops. Each is linear in its incoming gradient, so a
// partial gradient against replicated forward values stays partial — the
// placement duality of backward passes (a B value's gradient is P).

func init() {
	register("grad", Rule{Sigs: unarySigs(false)}, "relu_grad", "gelu_grad")
	register("grad", Rule{Sigs: softmaxGradSigs}, "softmax_grad")
	register("grad", Rule{Sigs: normalizeSigs}, "normalize")
	register("grad", Rule{Sigs: normalizeGradSigs}, "normalize_grad")
	register("grad", Rule{Sigs: maxGradSigs}, "max_grad")
	register("grad", Rule{Sigs: broadcastToSigs}, "broadcast_to")
	register("grad", Rule{Sigs: alongAxisSigs}, "pad")
	register("grad", Rule{Sigs: embeddingGradSigs}, "embedding_grad")
	register("grad", Rule{Sigs: crossEntropyGradSigs}, "cross_entropy_grad")
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
