package lower

import (
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// Local functions in lowering. A local value's type is one device's block,
// so inference places it replicated over that shape: every device holds a
// tensor of exactly that shape, and the kernels run on it unchanged. The
// boundary is where placements mean something: to_local asks for its
// argument in the declared placement (boxing converts it, as for any op)
// and its result is the device's block of it; from_local's result has the
// declared placement and its blocks are the body's results. Both alias
// their argument's slot: no instruction, no copy. The collectives are
// emitted as written, each a chain of single-axis steps on the groups of
// their axes (a group over several axes goes axis by axis, which sends
// the same bytes as one ring over all of them); a shift is a send and a
// receive with tag 0 (the pipeline's transfers use tags from 1).

// localShiftTag is the tag of a shift's send and receive; the pipeline's
// transfers use tags from 1, so the two never match each other's messages.
const localShiftTag = 0

// isLocalOp reports the values lowering places and emits by the local
// view's rules instead of the rule tables.
func isLocalOp(v *ir.Value) bool { return v.Local || v.Op == "from_local" }

// localChoice is the signature of a local value or a from_local.
func (p *Plan) localChoice(v *ir.Value) *Choice {
	n := p.Mesh.NumAxes()
	sig := sbp.NdSig{In: make([]sbp.NdSBP, len(v.Args)), Out: sbp.Broadcasts(n)}
	for i, a := range v.Args {
		sig.In[i] = sbp.Broadcasts(n)
		if a.Local {
			continue
		}
		if v.Op == "to_local" {
			sig.In[i] = v.Attrs.Place.Clone()
		} else if pl, ok := p.Placement[a]; ok && a.Op == "const" {
			sig.In[i] = pl // a scalar constant: the same on every device
		}
	}
	if v.Op == "from_local" {
		sig.Out = v.Attrs.Place.Clone()
	}
	return &Choice{Sig: sig, Candidates: 1}
}

// emitLocal emits a local value or a from_local; it reports false for the
// values that are ordinary kernels on local blocks.
func (e *emitter) emitLocal(v *ir.Value, args []int) bool {
	switch v.Op {
	case "to_local", "from_local":
		if padsBlocks(v, e.p.Mesh) {
			return false // a kernel pads (to_local) or trims (from_local) the blocks
		}
		e.slotOf[v.ID] = args[0] // the same blocks, seen differently
	case "pvary", "equal_copies":
		e.slotOf[v.ID] = args[0]
	case "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all":
		e.slotOf[v.ID] = e.localCollective(v, args[0])
	case "shift":
		e.slotOf[v.ID] = e.shift(v, args[0])
	case "arange":
		e.slotOf[v.ID] = e.sourceKernel(v, KernelOf(v), sbp.Broadcasts(e.p.Mesh.NumAxes()))
	case "axis_index":
		// the device's block of [0, 1, ..., p-1] split along the axis
		k := KernelOf(v)
		k.Shape = []int{e.p.Mesh.Axes[v.Attrs.Axes[0]].Size}
		pl := sbp.Broadcasts(e.p.Mesh.NumAxes())
		pl[v.Attrs.Axes[0]] = sbp.S(0)
		e.slotOf[v.ID] = e.sourceKernel(v, k, pl)
	default:
		return false
	}
	return true
}

// sourceKernel emits a kernel without arguments whose result has global
// shape k.Shape under pl, and returns its slot.
func (e *emitter) sourceKernel(v *ir.Value, k *plan.Kernel, pl sbp.NdSBP) int {
	out := e.newSlot(v.Type.DType)
	e.emit(plan.Instr{Kind: plan.Compute, Label: v.Label(), Kernel: k, DType: v.Type.DType, Shape: k.Shape,
		Placement: pl, Out: out, Pos: v.Pos, Where: v.Where()})
	return out
}

// padsBlocks reports a boundary whose global tensor does not split evenly:
// its local blocks are the largest block, zero-padded at the end.
func padsBlocks(v *ir.Value, m *mesh.Mesh) bool {
	global, local := v.Args[0].Type.Shape, v.Type.Shape
	if v.Op == "from_local" {
		global, local = local, global
	}
	for d := range global {
		n := 1
		for a, s := range v.Attrs.Place {
			if s.IsS() && s.Dim == d {
				n *= m.Axes[a].Size
			}
		}
		if local[d]*n != global[d] {
			return true
		}
	}
	return false
}

// localStep is one single-axis step of a local collective: the global
// shape and placements under which Bind finds the device's blocks.
type localStep struct {
	shape    []int
	from, to sbp.NdSBP
	kind     sbp.Collective
	axis     int
}

// localSteps spells a collective on local blocks as single-axis steps.
// A local block x seen as a global tensor: all_gather along dim d over
// axes (a, b) is x's global [.., d·pa·pb, ..] split S(d) on a and b,
// gathered over b (the inner axis) then a; reduce_scatter is the mirror
// (partial over a and b, scattered over a then b); all_reduce reduces over
// each axis in turn.
func localSteps(v *ir.Value, m *mesh.Mesh, n int) []localStep {
	x := v.Args[0]
	axes := v.Attrs.Axes
	var steps []localStep
	cur := sbp.Broadcasts(n)
	shape := slices.Clone(x.Type.Shape)
	switch v.Op {
	case "all_gather":
		d := v.Attrs.Axis
		shape = slices.Clone(v.Type.Shape)
		for _, a := range axes {
			cur[a] = sbp.S(d)
		}
		for i := len(axes) - 1; i >= 0; i-- {
			next := cur.Clone()
			next[axes[i]] = sbp.B
			steps = append(steps, localStep{shape, cur, next, sbp.AllGather, axes[i]})
			cur = next
		}
	case "reduce_scatter":
		d := v.Attrs.Axis
		for _, a := range axes {
			cur[a] = sbp.P
		}
		for _, a := range axes {
			next := cur.Clone()
			next[a] = sbp.S(d)
			steps = append(steps, localStep{shape, cur, next, sbp.ReduceScatter, a})
			cur = next
		}
	case "all_reduce":
		for _, a := range axes {
			from := sbp.Broadcasts(n)
			from[a] = sbp.P
			steps = append(steps, localStep{shape, from, sbp.Broadcasts(n), sbp.AllReduce, a})
		}
	case "all_to_all":
		a, s, c := axes[0], v.Attrs.Axis, v.Attrs.Dim2
		shape[c] *= m.Axes[a].Size
		from, to := sbp.Broadcasts(n), sbp.Broadcasts(n)
		from[a], to[a] = sbp.S(c), sbp.S(s)
		steps = append(steps, localStep{shape, from, to, sbp.AllToAll, a})
	case "broadcast", "reduce":
		kind := sbp.RootBroadcast
		if v.Op == "reduce" {
			kind = sbp.RootReduce
		}
		b := sbp.Broadcasts(n)
		steps = append(steps, localStep{shape, b, b, kind, axes[0]})
	}
	return steps
}

func (e *emitter) localCollective(v *ir.Value, cur int) int {
	for _, st := range localSteps(v, e.p.Mesh, e.p.Mesh.NumAxes()) {
		step := sbp.Step{Axis: st.axis, From: st.from, To: st.to, Kind: st.kind, Root: v.Attrs.Root}
		// priced as explain prices it (explain_local.go), so that the
		// planner's walk of the program counts a written collective's time
		step.Bytes, step.Time = sbp.StepCost(e.p.Mesh, e.p.Planner.Topo, st.shape, v.Type.DType.Size(), st.from, st.axis, st.kind)
		out := e.newSlot(v.Type.DType)
		e.emit(plan.Instr{Kind: plan.Collective, Label: v.Label(), Step: &step, Group: e.group([]int{st.axis}),
			DType: v.Type.DType, Shape: st.shape, Placement: st.to, ArgPlace: []sbp.NdSBP{st.from},
			Args: []int{cur}, Out: out, Pos: v.Pos, Where: v.Where()})
		cur = out
	}
	return cur
}

// shift sends the block to the device offset along the axes and receives
// from the one offset the other way.
func (e *emitter) shift(v *ir.Value, arg int) int {
	n := e.p.Mesh.NumAxes()
	back := make([]int, len(v.Attrs.Shift))
	for i, s := range v.Attrs.Shift {
		back[i] = -s
	}
	b := sbp.Broadcasts(n)
	e.emit(plan.Instr{Kind: plan.Send, Label: v.Label(), Peer: plan.Peer{Axes: slices.Clone(v.Attrs.Axes), Shift: slices.Clone(v.Attrs.Shift)},
		Tag: localShiftTag, DType: v.Type.DType, Shape: v.Type.Shape, Placement: b, Args: []int{arg}, Out: -1, Pos: v.Pos, Where: v.Where()})
	out := e.newSlot(v.Type.DType)
	e.emit(plan.Instr{Kind: plan.Recv, Label: v.Label(), Peer: plan.Peer{Axes: slices.Clone(v.Attrs.Axes), Shift: back},
		Tag: localShiftTag, DType: v.Type.DType, Shape: v.Type.Shape, Placement: b, Out: out, Pos: v.Pos, Where: v.Where()})
	return out
}
