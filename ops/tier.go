package ops

// Tier copies: with offload in a train block (ZeRO-Offload) the training
// step keeps some tensors in host memory. offload(x) is a copy of a device
// tensor into host memory, fetch(x) a copy of a host tensor into device
// memory. Only the training step makes them (no program can call them),
// and lowering turns them into copy instructions, not kernels. A copy
// moves each device's block as it is, so any placement passes through,
// partial ones included; no gradient flows through a copy (the step takes
// gradients with respect to the device copy of a parameter).

func init() {
	for _, name := range []string{"offload", "fetch"} {
		doc := Doc{Examples: []Example{{"Y[m,n] = offload(X) (also fetch: copies between device and host memory the training step makes)", OpDesc{In: [][]int{{4, 4}}, Out: []int{4, 4}}}}}
		if name == "fetch" {
			doc = Doc{RulesWith: "offload"}
		}
		Register(Op{Name: name, Family: "copy", Kind: Tier, Placement: Rule{Sigs: copySigs}, NoGrad: true, FLOPs: noFLOPs, Doc: doc})
	}
}

// noFLOPs: a copy does no arithmetic.
func noFLOPs([]int, [][]int) float64 { return 0 }

// copySigs: a copy moves every device's block as it is.
func copySigs(d *OpDesc) []Sig {
	var out []Sig
	for i := range d.In[0] {
		out = append(out, Sig{In: []SBP{S(i)}, Out: S(i), Why: "a copy moves each device's block as it is"})
	}
	for _, s := range []SBP{B, P, PMax} {
		out = append(out, Sig{In: []SBP{s}, Out: s, Why: "a copy moves each device's block as it is"})
	}
	return out
}
