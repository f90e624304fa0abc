package lower

import (
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/sbp"
)

// What inference knows beyond one op's arguments. Placements are chosen
// op by op, each pricing the conversions its own arguments need; three
// facts outside that view change the price:
//
//   - A conversion an earlier consumer chose is made once and shared
//     (insertBoxing shares a value's conversions to one placement), so a
//     later consumer asking for the same placement pays nothing. Without
//     this, a partial value with several consumers is reduced once per
//     consumer's choice: the first takes the cheapest reduction for
//     itself, the next keeps the value partial to avoid paying again, and
//     the partiality is reduced later, by another collective.
//   - A parameter's gradient under gradient accumulation (accumulate,
//     a pipeline's micro-batches) is the sum of one contribution per
//     micro-batch, converted to the parameter's splits once per step:
//     each contribution is charged its share of that conversion, not all
//     of it (else a contribution pays a collective per micro-batch to
//     avoid one per step).
//   - An output declared in a placement, and a training step's new value
//     of a parameter or state, must end in a given placement (the output's,
//     the source's): the op producing it prices that last conversion, as a
//     gradient prices the one towards its forward value's splits.

// noteConversions records, once v is placed, the conversions the boxing
// pass will make and share: those v's choice (nil for a source) asks of
// its arguments, and v's own to the placement it must end in (boxing
// converts an output or a carried value there whoever else reads it, so
// a consumer asking for that placement gets it for nothing).
func (p *Plan) noteConversions(v *ir.Value, ch *Choice) {
	if d := p.dest[v.ID]; d != nil {
		p.noteMade(v, d)
	}
	if ch == nil || v.Op == "to" && v.Attrs.Regather {
		return // a source; or ZeRO-3's gather, never shared (insertBoxing)
	}
	for i, a := range v.Args {
		p.noteMade(a, ch.Sig.In[i])
	}
}

// noteMade records that a is converted to placement to, unless a is
// already there or the conversion is already recorded.
func (p *Plan) noteMade(a *ir.Value, to sbp.NdSBP) {
	if !p.placementOf(a).Equal(to) && !p.converted(a, to) {
		p.made[a.ID] = append(p.made[a.ID], to)
	}
}

// converted reports whether an earlier consumer converts a to placement to.
func (p *Plan) converted(a *ir.Value, to sbp.NdSBP) bool {
	for _, m := range p.made[a.ID] {
		if m.Equal(to) {
			return true
		}
	}
	return false
}

// destinations is, by value ID, the placement each output declared in
// one and each carried value ends in; nil elsewhere.
func destinations(p *Plan) []sbp.NdSBP {
	dest := make([]sbp.NdSBP, len(p.Graph.Values))
	for _, o := range p.Graph.Outputs {
		if o.Placement != nil && len(o.Placement) == p.Mesh.NumAxes() {
			dest[o.Value.ID] = o.Placement
		}
	}
	if t := p.Graph.Train; t != nil {
		for _, c := range t.Carry {
			dest[c.Next.ID] = p.sourcePlacement(c.Source)
		}
	}
	return dest
}

// looksAhead reports whether v's choice depends on more than its
// arguments' placements: conversions of its arguments already made, or a
// placement v must end in.
func (p *Plan) looksAhead(v *ir.Value) bool {
	if p.dest[v.ID] != nil {
		return true
	}
	for _, a := range v.Args {
		if len(p.made[a.ID]) > 0 {
			return true
		}
	}
	return false
}

// gradParts is, by value ID, how many micro-batches' gradients a
// training step sums before it converts the sum (ir.Train.Accumulate):
// those taken with respect to what the forward reads of each parameter
// (ir.Train.Seen: the parameter, its half-precision copy, or under
// offload or ZeRO the gather of its shard). What the sum then goes
// through (a cast back to f32, a conversion to the shard) runs once a
// step and is charged in full. nil without accumulation, and under ZeRO-2
// and 3, which reduce each micro-batch's gradient into its shard in the
// backward (ir.Train.Reduced).
func gradParts(g *ir.Graph) []int {
	t := g.Train
	if t == nil || t.Accumulate < 2 || t.Zero >= 2 {
		return nil
	}
	out := make([]int, len(g.Values))
	for _, w := range t.Params {
		if seen := t.Seen[w]; seen != nil {
			out[seen.ID] = t.Accumulate
		}
	}
	return out
}

// gradShare is how many gradient contributions share the conversion of a
// gradient of pv towards pv's splits: the micro-batches summed
// (gradParts), else 1.
func (p *Plan) gradShare(pv *ir.Value) int {
	if pv.ID < len(p.perStep) && p.perStep[pv.ID] > 1 {
		return p.perStep[pv.ID]
	}
	return 1
}
