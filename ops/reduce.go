package ops

// Reductions sum, mean and max over one dim (Axis), or over all dims
// (Axis = -1, giving a scalar). The reduced dim disappears, so a split on a
// later dim shifts down by one. Reducing along the split dim leaves each
// device with a partial result: P(sum) for sum and mean (mean divides by the
// global count, never the local one, so uneven shards stay right), P(max) for
// max. A partial input reduces to a partial output when the reductions agree.

func init() {
	register("reduce", Rule{Sigs: reduceSigs}, "sum", "mean", "max", "nonfinite")
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
	out = append(out, Sig{In: []SBP{part}, Out: part, Why: d.Op + " of partial " + part.Reduce.String() + "s is a partial " + part.Reduce.String()})
	return out
}
