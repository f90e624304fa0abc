package lower

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/sbp"
)

// Desc builds the rule input for an op value.
func Desc(v *ir.Value) *sbp.OpDesc {
	d := &sbp.OpDesc{Op: v.Op, Out: v.Type.Shape, Axis: v.Attrs.Axis, Perm: v.Attrs.Perm, NumIn: len(v.Args)}
	for _, a := range v.Args {
		d.In = append(d.In, a.Type.Shape)
	}
	return d
}

// ndSigs is sbp.NdSigs on the plan's mesh, computed once per distinct
// description (k is descKey(d)).
func (p *Plan) ndSigs(rule *sbp.Rule, d *sbp.OpDesc, k []byte) ([]sbp.NdSig, error) {
	if sigs, ok := p.sigs[string(k)]; ok {
		return sigs, nil
	}
	sigs, err := sbp.NdSigs(rule, d, p.Mesh)
	if err != nil {
		return nil, err
	}
	if p.sigs == nil {
		p.sigs = map[string][]sbp.NdSig{}
	}
	p.sigs[string(k)] = sigs
	return sigs, nil
}

// descKey appends to b what identifies an op description: the op, its
// attributes and the shapes, as self-delimiting varints after the op's
// name.
func descKey(b []byte, d *sbp.OpDesc) []byte {
	b = append(append(b, d.Op...), 0)
	b = binary.AppendVarint(b, int64(d.Axis))
	b = binary.AppendVarint(b, int64(d.NumIn))
	ints := func(xs []int) {
		b = binary.AppendUvarint(b, uint64(len(xs)))
		for _, x := range xs {
			b = binary.AppendVarint(b, int64(x))
		}
	}
	ints(d.Perm)
	ints(d.Out)
	b = binary.AppendUvarint(b, uint64(len(d.In)))
	for _, in := range d.In {
		ints(in)
	}
	return b
}

// choiceKey appends to the description's key (descKey) everything else
// choose reads: the dtypes of the value and its arguments, the arguments'
// current placements and the placements earlier consumers convert them
// to, the placement v must end in (infer_ahead.go) and, for a gradient,
// its forward value's placement and how many micro-batches share its
// conversion (gradShare). Values with equal keys get equal choices.
func (p *Plan) choiceKey(b []byte, v *ir.Value) []byte {
	nd := func(x sbp.NdSBP) {
		b = binary.AppendUvarint(b, uint64(len(x)))
		for _, e := range x {
			b = append(b, byte(e.Kind), byte(e.Reduce))
			b = binary.AppendVarint(b, int64(e.Dim))
		}
	}
	b = append(b, byte(v.Type.DType))
	for _, a := range v.Args {
		b = append(b, byte(a.Type.DType))
		nd(p.placementOf(a))
		b = binary.AppendUvarint(b, uint64(len(p.made[a.ID])))
		for _, m := range p.made[a.ID] {
			nd(m)
		}
	}
	nd(p.dest[v.ID])
	if pv := v.Primal; pv != nil && slices.Equal(pv.Type.Shape, v.Type.Shape) {
		b = append(b, 1)
		nd(p.placementOf(pv))
		b = binary.AppendUvarint(b, uint64(p.gradShare(pv)))
	} else {
		b = append(b, 0)
	}
	return b
}

// sigScore orders candidate signatures; lower is better.
type sigScore struct {
	time     float64
	convs    int
	partials int
	splits   int
}

func (a sigScore) less(b sigScore) bool {
	if !sbp.SameCost(a.time, b.time) {
		return a.time < b.time
	}
	if a.convs != b.convs {
		return a.convs < b.convs
	}
	if a.partials != b.partials {
		return a.partials < b.partials
	}
	return a.splits > b.splits
}

func inferPlacements(p *Plan) error {
	var errs lang.ErrorList
	twins := findTwins(p.Graph)
	p.made = make([][]sbp.NdSBP, len(p.Graph.Values))
	p.dest = destinations(p)
	p.perStep = gradParts(p.Graph)
	for _, v := range p.Values {
		switch {
		case v.IsSource():
			p.place(v, p.sourcePlacement(v), nil)
			p.noteConversions(v, nil)
		case v.Op == "to":
			p.placeChosen(v, &Choice{Sig: sbp.NdSig{In: []sbp.NdSBP{v.Declared}, Out: v.Declared}, Candidates: 1})
		case isLocalOp(v):
			p.placeChosen(v, p.localChoice(v))
		default:
			if c := p.twinChoice(twins, v); c != nil {
				p.placeChosen(v, c)
				continue
			}
			c, err := p.choose(v)
			if err != nil {
				errs = append(errs, &ir.Error{Pos: v.Pos, Msg: err.Error()})
				continue
			}
			p.placeChosen(v, c)
		}
	}
	if len(errs) > 0 {
		return errs.Sort()
	}
	return nil
}

// sourcePlacement is a source value's placement: as declared, or as
// Options.Force fixes it; replicated when neither names every mesh axis.
func (p *Plan) sourcePlacement(v *ir.Value) sbp.NdSBP {
	pl := v.Declared
	if f, ok := p.Opts.Force[v.Name]; ok {
		pl = f
	}
	if n := p.Mesh.NumAxes(); len(pl) != n {
		pl = sbp.Broadcasts(n)
	}
	return pl
}

// placeChosen places v as ch chose and records the conversions ch asks of
// v's arguments and v's own to where it must end (infer_ahead.go).
func (p *Plan) placeChosen(v *ir.Value, ch *Choice) {
	p.place(v, ch.Sig.Out, ch)
	p.noteConversions(v, ch)
}

// choose prices every valid nd signature of v and keeps the cheapest.
func (p *Plan) choose(v *ir.Value) (*Choice, error) {
	rule, ok := sbp.Lookup(v.Op)
	if !ok {
		return nil, fmt.Errorf("op %s has no placement rule (this is a missing rule in package sbp)", v.Op)
	}
	for _, a := range v.Args {
		if _, ok := p.Placement[a]; !ok {
			return nil, fmt.Errorf("internal: %s used before it has a placement", a.Label())
		}
	}
	// A deep or pipelined model repeats each layer's ops, per layer and
	// per micro-batch, with the same shapes and argument placements:
	// price each distinct case once.
	// The key is built from a scratch description (nearly every value hits
	// the cache); pricing gets a fresh one, which the rules may keep.
	p.desc = sbp.OpDesc{Op: v.Op, In: p.desc.In[:0], Out: v.Type.Shape, Axis: v.Attrs.Axis, Perm: v.Attrs.Perm, NumIn: len(v.Args)}
	for _, a := range v.Args {
		p.desc.In = append(p.desc.In, a.Type.Shape)
	}
	p.keyBuf = descKey(p.keyBuf[:0], &p.desc)
	n := len(p.keyBuf)
	p.keyBuf = p.choiceKey(p.keyBuf, v)
	if c, ok := p.chosen[string(p.keyBuf)]; ok {
		return &Choice{Sig: c.Sig, Time: c.Time, Candidates: c.Candidates, ahead: c.ahead}, nil
	}
	key := string(p.keyBuf)
	sigs, err := p.ndSigs(rule, Desc(v), p.keyBuf[:n])
	if err != nil {
		return nil, fmt.Errorf("%s: %v", v.Op, err)
	}
	best, err := p.cheapest(v, sigs)
	if err != nil {
		return nil, err
	}
	best.ahead = p.looksAhead(v)
	if p.chosen == nil {
		p.chosen = map[string]Choice{}
	}
	p.chosen[key] = *best
	return best, nil
}

// twinChoice is v's choice when v's candidate twin in micro-batch 0
// (twin.go), placed before it, has v's choice key (choiceKey): nil
// otherwise. choose's result is a function of the key — the cache holds,
// per key, the result first computed for it — and the twin was placed by
// choose, so choose(v) would return the twin's choice. The key is the op
// description and dtypes (sameDesc), the arguments' placements, the
// conversions already made of them and the placement the value must end
// in (neither of the pair may have any: looksAhead, Choice.ahead) and,
// for a gradient, its forward value's placement and share (gradShare).
func (p *Plan) twinChoice(twins twinOf, v *ir.Value) *Choice {
	t := twins.twin(p.Graph, v)
	if t == nil || t.Local || !sameDesc(v, t) || p.looksAhead(v) {
		return nil
	}
	c := p.choiceOf(t)
	if c == nil || c.ahead {
		return nil
	}
	for i, a := range v.Args {
		pa := p.placementOf(a)
		if pa == nil || !pa.Equal(p.placementOf(t.Args[i])) {
			return nil
		}
	}
	dual := func(x *ir.Value) (sbp.NdSBP, bool) {
		if pv := x.Primal; pv != nil && slices.Equal(pv.Type.Shape, x.Type.Shape) {
			return p.placementOf(pv), true
		}
		return nil, false
	}
	dv, okv := dual(v)
	dt, okt := dual(t)
	if okv != okt || !dv.Equal(dt) || okv && p.gradShare(v.Primal) != p.gradShare(t.Primal) {
		return nil
	}
	return &Choice{Sig: c.Sig, Time: c.Time, Candidates: c.Candidates}
}

// cheapest prices every signature in sigs that fits v and keeps the best.
func (p *Plan) cheapest(v *ir.Value, sigs []sbp.NdSig) (*Choice, error) {
	var best *Choice
	var bestScore sigScore
	valid := 0
	for _, s := range sigs {
		if !p.sigFits(v, s) {
			continue
		}
		valid++
		sc := sigScore{}
		for i, a := range v.Args {
			cur := p.placementOf(a)
			if cur.Equal(s.In[i]) || p.converted(a, s.In[i]) {
				continue
			}
			path, err := p.Planner.Plan(a.Type.Shape, a.Type.DType.Size(), cur, s.In[i])
			if err != nil {
				sc.time = -1
				break
			}
			sc.time += path.Time
			sc.convs++
		}
		if sc.time < 0 {
			continue
		}
		for _, e := range s.Out {
			if e.IsP() {
				sc.partials++
			}
			if e.IsS() {
				sc.splits++
			}
		}
		// A gradient looks ahead to where it is headed: its forward value's
		// splits (a replicated value's gradient may stay partial). Price
		// the conversion there as if a consumer asked for it; a parameter's
		// gradient, summed over the step's micro-batches and converted
		// once, is charged its share (gradShare).
		if pv := v.Primal; pv != nil && slices.Equal(pv.Type.Shape, v.Type.Shape) {
			if dual := dualOf(p.Placement[pv], s.Out); !dual.Equal(s.Out) {
				if path, err := p.Planner.Plan(v.Type.Shape, v.Type.DType.Size(), s.Out, dual); err == nil {
					sc.time += path.Time / float64(p.gradShare(pv))
				}
			}
		}
		if d := p.dest[v.ID]; d != nil && !d.Equal(s.Out) {
			if path, err := p.Planner.Plan(v.Type.Shape, v.Type.DType.Size(), s.Out, d); err == nil {
				sc.time += path.Time
			}
		}
		if best == nil || sc.less(bestScore) {
			best, bestScore = &Choice{Sig: s, Time: sc.time}, sc
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no placement signature of %s applies to %s", v.Op, argTypes(v))
	}
	best.Candidates = valid
	return best, nil
}

// dualOf is where a gradient of a value placed primal is headed: split as
// the value is on the axes that split it; elsewhere left as out (the
// gradient of a replicated value is reduced later, however it is held).
func dualOf(primal, out sbp.NdSBP) sbp.NdSBP {
	d := out.Clone()
	for a, e := range primal {
		if e.IsS() {
			d[a] = e
		}
	}
	return d
}

// sigFits rejects signatures a value's dtype cannot take: integer tensors
// are never partial.
func (p *Plan) sigFits(v *ir.Value, s sbp.NdSig) bool {
	if v.Type.DType.IsInt() && s.Out.HasPartial() {
		return false
	}
	for i, a := range v.Args {
		if a.Type.DType.IsInt() && s.In[i].HasPartial() {
			return false
		}
	}
	return true
}

func argTypes(v *ir.Value) string {
	s := ""
	for i, a := range v.Args {
		if i > 0 {
			s += ", "
		}
		s += a.Type.String()
	}
	return s
}

// insertBoxing records a conversion for every argument whose placement
// differs from what its consumer's signature needs, and for outputs.
// Identical conversions of one value are shared.
func insertBoxing(p *Plan) error {
	// the latest conversion of each value to each target placement, by
	// value ID: a value has a few targets at most, so a scan of its own
	// short list beats building and hashing a key per argument
	type target struct {
		to sbp.NdSBP
		c  *Conversion
	}
	byValue := make([][]target, len(p.Graph.Values))
	get := func(v *ir.Value, to sbp.NdSBP, pos ir.Pos, calls []ir.Pos, cause string, share bool) (*Conversion, error) {
		from := p.placementOf(v)
		if from.Equal(to) {
			return nil, nil
		}
		have := byValue[v.ID]
		k := slices.IndexFunc(have, func(t target) bool { return t.to.Equal(to) })
		if k >= 0 && share {
			return have[k].c, nil
		}
		path, err := p.Planner.Plan(v.Type.Shape, v.Type.DType.Size(), from, to)
		if err != nil {
			return nil, &ir.Error{Pos: pos, Msg: err.Error()}
		}
		c := &Conversion{ID: len(p.Convs), Value: v, Path: path, Pos: pos, Calls: calls, Cause: cause}
		p.Convs = append(p.Convs, c)
		if k >= 0 {
			have[k].c = c
		} else {
			byValue[v.ID] = append(have, target{to, c})
		}
		return c, nil
	}
	var argConv window[*Conversion]
	for _, v := range p.Values {
		ch := p.choiceOf(v)
		if ch == nil {
			continue
		}
		ch.ArgConv = argConv.take(len(v.Args))
		for i, a := range v.Args {
			cause := v.Op
			if v.Op == "to" && v.Name != "" {
				cause = "to " + v.Name
			}
			if v.Op == "to" && v.Attrs.Regather && v.Backward {
				// ZeRO-3 gathers a parameter again for the backward rather
				// than keeping the forward's gather alive: never shared
				cause = "regather"
			}
			// ZeRO-3's gathers are one per use (the backward's, each
			// micro-batch's): sharing them would keep a full parameter alive
			share := !(v.Op == "to" && v.Attrs.Regather)
			c, err := get(a, ch.Sig.In[i], v.Pos, v.Calls, cause, share)
			if err != nil {
				return err
			}
			ch.ArgConv[i] = c
		}
	}
	for _, o := range p.Graph.Outputs {
		op := &OutputPlan{Output: o, Placement: p.Placement[o.Value]}
		if o.Placement != nil && len(o.Placement) == p.Mesh.NumAxes() {
			c, err := get(o.Value, o.Placement, o.Pos, nil, "output "+o.Name, true)
			if err != nil {
				return err
			}
			op.Conv, op.Placement = c, o.Placement
		}
		p.Outputs = append(p.Outputs, op)
	}
	if t := p.Graph.Train; t != nil {
		for _, c := range t.Carry {
			cp := &CarryPlan{Source: c.Source, Next: c.Next}
			conv, err := get(c.Next, p.Placement[c.Source], c.Next.Pos, c.Next.Calls, "next "+c.Source.Label(), true)
			if err != nil {
				return err
			}
			cp.Conv = conv
			p.Carry = append(p.Carry, cp)
		}
	}
	return nil
}
