package lower

import (
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/pipeline"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// rankEmit builds one pipeline rank's program.
type rankEmit struct {
	b      *pipeBuild
	r      int
	prog   *plan.Program
	done   []bool           // per source instruction: emitted here
	recvd  map[int]bool     // slots received
	staged map[int]int      // host slot → its device copy to send (tier_pipe.go)
	act    *pipeline.Action // the action being emitted (tags receives)
}

// program is rank r's instructions: what precedes the micro-batches, the
// schedule's actions in order, then the rest (the optimizer step).
func (b *pipeBuild) program(r int) (*plan.Program, error) {
	e := &rankEmit{b: b, r: r, prog: &plan.Program{SlotType: slices.Clone(b.src.SlotType), Instrs: make([]plan.Instr, 0, b.sizeHint(r))},
		done: make([]bool, len(b.src.Instrs)), recvd: map[int]bool{}, staged: map[int]int{}}
	for i := range b.src.Instrs {
		if b.pre[i] && b.act[i] == nil && b.rank(i) == r {
			if err := e.need(i); err != nil {
				return nil, err
			}
		}
	}
	for _, a := range b.sched.Actions[r] {
		if !a.Kind.IsCompute() {
			continue
		}
		key := pipeline.Compute(a.Stage, a.Kind, a.Micro)
		e.act = &key
		for _, i := range b.groups[key] {
			if err := e.need(i); err != nil {
				return nil, err
			}
		}
		// the action is done: mark it, then send what it made (as a
		// pipeline schedule's SEND follows its F or B)
		e.prog.Instrs = append(e.prog.Instrs, plan.Instr{Kind: plan.Mark, Label: key.String(), Act: &key, Out: -1,
			Placement: sbp.Broadcasts(len(b.src.Instrs[0].Placement))})
		for _, i := range b.groups[key] {
			e.sendsOf(i)
		}
	}
	e.act = nil
	for i := range b.src.Instrs {
		if b.rank(i) == r && !e.done[i] {
			if b.act[i] != nil {
				return nil, fmt.Errorf("%w: %s (%s) belongs to action %s, which rank %d's schedule never runs", ErrInternal, b.src.Instrs[i].Label, b.src.Instrs[i].Where, b.act[i], r)
			}
			if err := e.need(i); err != nil {
				return nil, err
			}
		}
	}
	// an output or carried value no stage computes (a constant) is made
	// on the first rank
	if r == 0 {
		for _, s := range append(slices.Clone(b.src.OutputSlots), b.src.CarrySlots...) {
			if j := b.prod[s]; j >= 0 && b.rank(j) < 0 {
				if err := e.need(j); err != nil {
					return nil, err
				}
			}
		}
	}
	e.finish()
	return e.prog, nil
}

// sizeHint bounds rank r's program: its own instructions, those of no
// stage, a mark per action and its sends and receives. Sizing the program
// once saves copying instructions as it grows.
func (b *pipeBuild) sizeHint(r int) int {
	n := len(b.sched.Actions[r])
	for i := range b.src.Instrs {
		if k := b.rank(i); k < 0 || k == r {
			n++
		}
	}
	for _, t := range b.xfer {
		if t.From == r || t.To == r {
			n++
		}
	}
	return n
}

// need emits instruction i after what it reads: instructions of no stage
// are emitted here on first use, values of other ranks are received.
func (e *rankEmit) need(i int) error {
	if e.done[i] {
		return nil
	}
	b := e.b
	in := b.src.Instrs[i]
	for _, s := range in.Args {
		j := b.prod[s]
		switch {
		case j < 0:
			return fmt.Errorf("%w: slot s%d of %s is never written", ErrInternal, s, in.Label)
		case e.done[j]:
		case b.rank(j) < 0:
			if err := e.need(j); err != nil {
				return err
			}
		case b.rank(j) == e.r:
			return fmt.Errorf("%w: on pipeline rank %d, %s (%s) reads %s before the schedule computes it", ErrInternal, e.r, in.Label, in.Where, b.src.Instrs[j].Label)
		default:
			e.recv(j, s)
		}
	}
	in.Act = b.act[i]
	in.Free = nil
	if len(in.Peer.Axes) > 0 {
		// a send or receive of the spmd program (a local function's shift)
		// names axes of the mesh without the pipeline axis; the pipeline's
		// own transfers, added here, name the full mesh's
		in.Peer.Axes = fullAxes(in.Peer.Axes, b.p.Pipe0Axis())
	}
	e.prog.Instrs = append(e.prog.Instrs, in)
	e.done[i] = true
	if e.act == nil {
		e.sendsOf(i) // outside the actions: at once
	}
	return nil
}

// sendsOf emits the sends of what instruction i computed.
func (e *rankEmit) sendsOf(i int) {
	b := e.b
	in := &b.src.Instrs[i]
	for _, t := range b.sends[i] {
		s := e.sendSlot(i, t.Slot) // may append a fetch: before the send's append reads the slice
		e.prog.Instrs = append(e.prog.Instrs, plan.Instr{Kind: plan.Send, Label: in.Label, DType: in.DType, Shape: in.Shape,
			Placement: in.Placement, Args: []int{s}, Out: -1, Tag: t.Tag, Act: b.act[i],
			Peer: plan.Peer{Axes: []int{b.p.Pipe0Axis()}, Shift: []int{t.To - t.From}}, Pos: in.Pos, Where: in.Where})
	}
}

// recv receives slot s, which instruction j computes on another rank.
func (e *rankEmit) recv(j, s int) {
	if e.recvd[s] {
		return
	}
	b := e.b
	t := b.xfer[[3]int{s, b.rank(j), e.r}]
	src := &b.src.Instrs[j]
	d := e.recvSlot(src, s)
	e.prog.Instrs = append(e.prog.Instrs, plan.Instr{Kind: plan.Recv, Label: src.Label, DType: src.DType, Shape: src.Shape,
		Placement: src.Placement, Out: d, Tag: t.Tag, Act: e.act,
		Peer: plan.Peer{Axes: []int{b.p.Pipe0Axis()}, Shift: []int{t.From - e.r}}, Pos: src.Pos, Where: src.Where})
	e.recvDone(src, s, d)
	e.recvd[s] = true
}

// finish sets the output and carry slots this rank holds (-1: another
// rank's).
func (e *rankEmit) finish() {
	b := e.b
	held := func(s int) int {
		if j := b.prod[s]; j >= 0 && e.done[j] && (b.rank(j) == e.r || b.rank(j) < 0 && e.r == 0) {
			return s
		}
		return -1
	}
	for _, s := range b.src.OutputSlots {
		e.prog.OutputSlots = append(e.prog.OutputSlots, held(s))
	}
	for _, s := range b.src.CarrySlots {
		e.prog.CarrySlots = append(e.prog.CarrySlots, held(s))
	}
}

// homes records which pipeline coordinate holds each source, output and
// carried value.
func (b *pipeBuild) homes(ex *plan.Plan) error {
	home := func(slot int) int {
		if j := b.prod[slot]; j >= 0 && b.rank(j) >= 0 {
			return b.rank(j)
		}
		return 0
	}
	ex.Sources = slices.Clone(ex.Sources)
	for i := range ex.Sources {
		ex.Sources[i].Home = -1
	}
	for i := range b.src.Instrs {
		in := &b.src.Instrs[i]
		if in.Kind == plan.Source && b.rank(i) >= 0 {
			ex.Sources[in.Src].Home = b.rank(i)
		}
	}
	ex.Outputs = slices.Clone(ex.Outputs)
	for k, s := range b.src.OutputSlots {
		ex.Outputs[k].Home = home(s)
	}
	for k, s := range b.src.CarrySlots {
		src := &ex.Sources[ex.Carry[k]]
		if h := home(s); src.Home != h {
			return fmt.Errorf("%w: %s is stored on pipeline rank %d but updated on %d", ErrInternal, src.Name, src.Home, h)
		}
	}
	return nil
}

// widenPlan puts the pipeline axis back into every placement (B: a stage's
// ranks hold their values whole along it) of the plan's groups, sources
// and outputs; widenProgram does the instructions of one program.
func widenPlan(ex *plan.Plan, groups []plan.Group, axis int) {
	for _, g := range groups {
		axes := make([]int, len(g.Axes))
		for i, a := range g.Axes {
			axes[i] = shiftAxis(a, axis)
		}
		ex.Groups = append(ex.Groups, plan.Group{Axes: axes})
	}
	for _, ts := range [][]plan.Tensor{ex.Sources, ex.Outputs} {
		for i := range ts {
			ts[i].Placement = widen(ts[i].Placement, axis)
		}
	}
}

// shiftAxis is mesh axis a of the mesh without the pipeline axis (at
// axis) as an axis of the full mesh.
func shiftAxis(a, axis int) int {
	if a >= axis {
		return a + 1
	}
	return a
}

// widenProgram puts the pipeline axis back into the placements of prog's
// instructions and boxing steps. Instructions share their placement
// slices (one per value, one per signature), and nothing modifies a
// placement once emitted: each distinct slice is widened once and the
// result shared, as the input shared it. Each rank's program is widened
// on its own (the ranks in parallel), with its own table of shared slices.
func widenProgram(prog *plan.Program, axis int) {
	type sliceID struct {
		first *sbp.SBP
		n     int
	}
	widened := map[sliceID]sbp.NdSBP{}
	wide := func(nd sbp.NdSBP) sbp.NdSBP {
		if len(nd) == 0 {
			return widen(nd, axis)
		}
		id := sliceID{&nd[0], len(nd)}
		w, ok := widened[id]
		if !ok {
			w = widen(nd, axis)
			widened[id] = w
		}
		return w
	}
	type argsID struct {
		first *sbp.NdSBP
		n     int
	}
	argPlaces := map[argsID][]sbp.NdSBP{}
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		in.Placement = wide(in.Placement)
		if len(in.ArgPlace) == 0 {
			in.ArgPlace = []sbp.NdSBP{}
		} else {
			id := argsID{&in.ArgPlace[0], len(in.ArgPlace)}
			args, ok := argPlaces[id]
			if !ok {
				args = make([]sbp.NdSBP, len(in.ArgPlace))
				for k, pl := range in.ArgPlace {
					args[k] = wide(pl)
				}
				argPlaces[id] = args
			}
			in.ArgPlace = args
		}
		if in.Step != nil {
			st := *in.Step
			st.Axis, st.From, st.To = shiftAxis(st.Axis, axis), widen(st.From, axis), widen(st.To, axis)
			in.Step = &st
		}
	}
}

// widen inserts B at axis.
func widen(nd sbp.NdSBP, axis int) sbp.NdSBP {
	out := make(sbp.NdSBP, 0, len(nd)+1)
	out = append(out, nd[:axis]...)
	out = append(out, sbp.B)
	return append(out, nd[axis:]...)
}

// Pipe0Axis is the pipeline axis of the declared mesh (send and receive
// peers are shifts along it).
func (p *Plan) Pipe0Axis() int { return p.Graph.Pipeline.Axis }

// fullAxes maps axes of the mesh without the pipeline axis to the full
// mesh's, where the pipeline axis sits at pipe.
func fullAxes(axes []int, pipe int) []int {
	out := make([]int, len(axes))
	for k, a := range axes {
		out[k] = a
		if a >= pipe {
			out[k] = a + 1
		}
	}
	return out
}
