package lower

import (
	"fmt"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/sbp"
)

// Verify checks the invariants of the passes that have run so far:
//   - infer: every value has a placement with one entry per mesh axis, split
//     dims in range, integer values never partial; every op's chosen
//     signature is one its rule produces.
//   - boxing: every conversion starts at its value's placement, ends where
//     its consumer needs, and is a chain of legal one-axis steps.
//   - spmd: every device runs the same instruction sequence, reads only
//     slots already written, and its local shapes are its layout blocks.
//   - fuse: a matmul reading an operand transposed reads a slot of the
//     stored shape its kernel names, and the operands fit its result.
//   - fuseadam: a fused Adam instruction reads four tensors placed and
//     shaped as its three results, and six scalars; every donation's
//     rules, a result written only over the argument its op runs in place
//     (p' over p, m' over m, v' over v), are the plan verifier's
//     (plan/donate.go).
func Verify(p *Plan) error {
	n := p.Mesh.NumAxes()
	if p.done["infer"] {
		for _, v := range p.Values {
			pl, ok := p.Placement[v]
			if !ok {
				return fmt.Errorf("%s has no placement", v.Label())
			}
			if len(pl) != n {
				return fmt.Errorf("%s has placement %s on a %d-axis mesh", v.Label(), pl, n)
			}
			for _, e := range pl {
				if e.IsS() && e.Dim >= v.Type.Rank() {
					return fmt.Errorf("%s of rank %d has placement %s", v.Label(), v.Type.Rank(), pl)
				}
			}
			if v.Type.DType.IsInt() && pl.HasPartial() {
				return fmt.Errorf("integer value %s is partial", v.Label())
			}
			if ch := p.Choice[v]; ch != nil && v.Op != "to" && !isLocalOp(v) {
				if err := verifySig(p, v, ch.Sig); err != nil {
					return err
				}
			}
		}
	}
	if p.done["boxing"] {
		for _, v := range p.Values {
			ch := p.Choice[v]
			if ch == nil {
				continue
			}
			for i, a := range v.Args {
				c := ch.ArgConv[i]
				if c == nil {
					if !p.Placement[a].Equal(ch.Sig.In[i]) {
						return fmt.Errorf("%s arg %d: placement %s but the signature needs %s and no conversion was inserted", v.Label(), i, p.Placement[a], ch.Sig.In[i])
					}
					continue
				}
				if err := verifyConv(p, c, p.Placement[a], ch.Sig.In[i]); err != nil {
					return err
				}
			}
		}
		for _, c := range p.Carry {
			if c.Conv != nil {
				if err := verifyConv(p, c.Conv, p.Placement[c.Next], p.Placement[c.Source]); err != nil {
					return err
				}
			} else if !p.Placement[c.Next].Equal(p.Placement[c.Source]) {
				return fmt.Errorf("carry %s: %s but the next step needs %s", c.Source.Label(), p.Placement[c.Next], p.Placement[c.Source])
			}
		}
		for _, o := range p.Outputs {
			if o.Conv != nil {
				if err := verifyConv(p, o.Conv, p.Placement[o.Output.Value], o.Placement); err != nil {
					return err
				}
			}
		}
	}
	if p.done["spmd"] {
		if err := p.Exec.Verify(); err != nil {
			return err
		}
	}
	if p.done["fuse"] {
		if err := verifyFusedGemms(p); err != nil {
			return err
		}
	}
	if p.done["fuseadam"] {
		if err := verifyFusedAdams(p); err != nil {
			return err
		}
	}
	return nil
}

func verifySig(p *Plan, v *ir.Value, s sbp.NdSig) error {
	rule, ok := sbp.Lookup(v.Op)
	if !ok {
		return fmt.Errorf("%s: op %s has no rule", v.Label(), v.Op)
	}
	one := rule.Sigs(Desc(v))
	for a := 0; a < p.Mesh.NumAxes(); a++ {
		found := false
		for _, o := range one {
			match := o.Out == s.Out[a]
			for i := range o.In {
				match = match && o.In[i] == s.In[i][a]
			}
			if match {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("%s: signature on axis %d is not one of %s's rules", v.Label(), a, v.Op)
		}
	}
	return nil
}

func verifyConv(p *Plan, c *Conversion, from, to sbp.NdSBP) error {
	if !c.Path.From.Equal(from) || !c.Path.To.Equal(to) {
		return fmt.Errorf("conversion c%d goes %s → %s, needed %s → %s", c.ID, c.Path.From, c.Path.To, from, to)
	}
	cur := from
	for _, st := range c.Path.Steps {
		if !st.From.Equal(cur) {
			return fmt.Errorf("conversion c%d: step starts at %s, not %s", c.ID, st.From, cur)
		}
		if !sbp.Legal(cur, st.Axis, st.To[st.Axis]) {
			return fmt.Errorf("conversion c%d: illegal step %s", c.ID, st.Describe(p.Mesh))
		}
		for a := range cur {
			if a != st.Axis && cur[a] != st.To[a] {
				return fmt.Errorf("conversion c%d: step %s changes more than one axis", c.ID, st.Describe(p.Mesh))
			}
		}
		cur = st.To
	}
	if !cur.Equal(to) {
		return fmt.Errorf("conversion c%d ends at %s, not %s", c.ID, cur, to)
	}
	return nil
}
