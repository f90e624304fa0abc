package ops

import "fmt"

// Elementwise ops. A split passes through when every input that has the
// split dim (not broadcast) is split the same way; inputs that broadcast
// along it are B. Partial values pass only through linear maps: neg, add and
// sub of partials, mul and div by a broadcast factor.

func init() {
	register("unary", Rule{Sigs: unarySigs(false)}, "exp", "log", "sqrt", "tanh", "relu", "gelu", "sigmoid")
	register("unary", Rule{Sigs: unarySigs(true)}, "neg", "cast")
	register("binary", Rule{Sigs: binarySigs}, "add", "sub", "mul", "div", "minimum", "maximum", "where")
	register("const", Rule{Sigs: func(d *OpDesc) []Sig {
		return []Sig{{Out: B, Why: "a constant is the same everywhere"}}
	}}, "const")
}

func unarySigs(linear bool) func(d *OpDesc) []Sig {
	return func(d *OpDesc) []Sig {
		var out []Sig
		for i := range d.In[0] {
			out = append(out, Sig{In: []SBP{S(i)}, Out: S(i), Why: "elementwise: a split passes through"})
		}
		out = append(out, Sig{In: []SBP{B}, Out: B, Why: "replicated in, replicated out"})
		if linear {
			out = append(out, Sig{In: []SBP{P}, Out: P, Why: d.Op + " is linear, so partial stays partial"})
		}
		return out
	}
}

func binarySigs(d *OpDesc) []Sig {
	var out []Sig
	R := len(d.Out)
	for j := 0; j < R; j++ {
		sig := Sig{In: make([]SBP, len(d.In)), Out: S(j), Why: fmt.Sprintf("elementwise: split along dim %d passes through; broadcast inputs replicated", j)}
		any := false
		for i, s := range d.In {
			k := j - (R - len(s))
			if k >= 0 && s[k] == d.Out[j] {
				sig.In[i] = S(k)
				any = true
			} else {
				sig.In[i] = B
			}
		}
		if any {
			out = append(out, sig)
		}
	}
	out = append(out, Sig{In: repeat(B, len(d.In)), Out: B, Why: "replicated in, replicated out"})
	switch d.Op {
	case "add", "sub":
		out = append(out, Sig{In: repeat(P, len(d.In)), Out: P, Why: d.Op + " is additive: a sum of partials is the partial of the sum"})
	case "mul":
		out = append(out, Sig{In: []SBP{P, B}, Out: P, Why: "mul is linear in one argument: partial times replicated stays partial"})
		out = append(out, Sig{In: []SBP{B, P}, Out: P, Why: "mul is linear in one argument: replicated times partial stays partial"})
	case "div":
		out = append(out, Sig{In: []SBP{P, B}, Out: P, Why: "div is linear in its numerator"})
	}
	return out
}
