package lower

import (
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// buildPrograms emits the executable plan: one program every rank shares
// (global shapes and placements; a rank's blocks follow from its
// coordinate), the groups its collectives use, and the sources, outputs
// and carried values it names. Nothing in it points into the graph.
func buildPrograms(p *Plan) error {
	n := len(p.Values) // an instruction per value and per conversion step, allocated once
	for _, c := range p.Convs {
		n += len(c.Path.Steps)
	}
	e := &emitter{p: p, exec: &plan.Plan{Mesh: p.Mesh}, slotOf: make([]int, len(p.Graph.Values)),
		convSlot: make([]int, len(p.Convs)), groups: map[string]int{}, prog: &plan.Program{Instrs: make([]plan.Instr, 0, n)}, intern: newInterner(),
		twins: findTwins(p.Graph)}
	if e.twins != nil {
		e.kernelOf, e.whereOf = make([]*plan.Kernel, len(p.Graph.Values)), make([]string, len(p.Graph.Values))
	}
	p.SourceIndex = map[*ir.Value]int{}
	p.InstrValue = make([]*ir.Value, 0, n)
	for _, v := range p.Values {
		e.cur = v
		if err := e.value(v); err != nil {
			return err
		}
	}
	for _, o := range p.Outputs {
		e.cur = o.Output.Value
		s := e.slotOf[o.Output.Value.ID]
		if o.Conv != nil {
			s = e.convert(o.Conv)
		}
		e.prog.OutputSlots = append(e.prog.OutputSlots, s)
		e.exec.Outputs = append(e.exec.Outputs, plan.Tensor{Name: o.Output.Name, DType: o.Output.Value.Type.DType,
			Shape: slices.Clone(o.Output.Value.Type.Shape), Placement: o.Placement.Clone()})
	}
	for _, c := range p.Carry {
		e.cur = c.Next
		s := e.slotOf[c.Next.ID]
		if c.Conv != nil {
			s = e.convert(c.Conv)
		}
		e.prog.CarrySlots = append(e.prog.CarrySlots, s)
		e.exec.Carry = append(e.exec.Carry, p.SourceIndex[c.Source])
	}
	freeAfterLastUse(e.prog)
	e.exec.Programs = []*plan.Program{e.prog}
	p.Exec = e.exec
	return nil
}

type emitter struct {
	p        *Plan
	exec     *plan.Plan
	prog     *plan.Program
	slotOf   []int          // by value ID (a slice: read for every argument)
	convSlot []int          // by Conversion.ID: its result's slot + 1 once emitted
	groups   map[string]int // group axes → index in exec.Groups
	cur      *ir.Value      // the value whose instructions are being emitted
	intern   *interner      // shared Where texts and kernels
	ints     window[int]    // instructions' argument slots
	// twins (twin.go) and, by value ID, the kernel and Where emitted for
	// each compute value (only with twins): a copied micro-batch's value
	// takes its twin's instead of building and hashing the keys again
	twins    twinOf
	kernelOf []*plan.Kernel
	whereOf  []string
	oneAxis  [8]int // group over one axis a: its index + 1, 0 until declared
}

func (e *emitter) newSlot(dt ir.DType) int {
	e.prog.SlotType = append(e.prog.SlotType, dt)
	return len(e.prog.SlotType) - 1
}

func (e *emitter) emit(in plan.Instr) {
	e.prog.Instrs = append(e.prog.Instrs, in)
	e.p.InstrValue = append(e.p.InstrValue, e.cur)
}

func (e *emitter) value(v *ir.Value) error {
	p := e.p
	if v.IsSource() {
		idx := len(e.exec.Sources)
		p.SourceIndex[v] = idx
		var init *ir.Init
		if v.Attrs.Init != nil {
			c := *v.Attrs.Init
			init = &c
		}
		e.exec.Sources = append(e.exec.Sources, plan.Tensor{Name: v.Name, Role: v.Op, DType: v.Type.DType,
			Shape: slices.Clone(v.Type.Shape), Placement: p.placementOf(v).Clone(), Init: init})
		out := e.newSlot(v.Type.DType)
		e.emit(plan.Instr{Kind: plan.Source, Label: v.Label(), Src: idx, DType: v.Type.DType, Shape: v.Type.Shape,
			Placement: p.placementOf(v), Out: out, Pos: v.Pos, Where: e.intern.where(v)})
		e.slotOf[v.ID] = out
		return nil
	}
	ch := p.choiceOf(v)
	if ch == nil {
		return fmt.Errorf("%s: %s has no placement choice", v.Where(), v.Label())
	}
	args := e.ints.take(len(v.Args))
	for i, a := range v.Args {
		if c := ch.ArgConv[i]; c != nil {
			args[i] = e.convert(c)
		} else {
			args[i] = e.slotOf[a.ID]
		}
	}
	if v.Op == "to" {
		e.slotOf[v.ID] = args[0] // a conversion, already emitted; the value aliases its result
		return nil
	}
	if isLocalOp(v) && e.emitLocal(v, args) {
		return nil
	}
	out := e.newSlot(v.Type.DType)
	kernel, where := e.kernelWhere(v)
	e.emit(plan.Instr{Kind: plan.Compute, Label: v.Label(), Kernel: kernel, DType: v.Type.DType, Shape: v.Type.Shape,
		Placement: p.placementOf(v), ArgPlace: ch.Sig.In, Args: args, Out: out, Pos: v.Pos, Where: where})
	e.slotOf[v.ID] = out
	return nil
}

// kernelWhere is the interned kernel and Where of compute value v. A
// candidate twin (twin.go) at the same position with the same call chain
// has v's Where; one with v's kernel key (sameKernel) was handed the
// kernel the interner would hand v.
func (e *emitter) kernelWhere(v *ir.Value) (*plan.Kernel, string) {
	if e.twins == nil {
		return e.intern.kernel(v), e.intern.where(v)
	}
	var k *plan.Kernel
	var w string
	if t := e.twins.twin(e.p.Graph, v); t != nil && e.kernelOf[t.ID] != nil {
		if samePlace(v, t) {
			w = e.whereOf[t.ID]
		}
		if sameKernel(v, t) {
			k = e.kernelOf[t.ID]
		}
	}
	if w == "" {
		w = e.intern.where(v)
	}
	if k == nil {
		k = e.intern.kernel(v)
	}
	e.kernelOf[v.ID], e.whereOf[v.ID] = k, w
	return k, w
}

// convert emits the steps of c (once) and returns the slot holding the result.
func (e *emitter) convert(c *Conversion) int {
	if s := e.convSlot[c.ID]; s > 0 {
		return s - 1
	}
	v := c.Value
	cur := e.slotOf[v.ID]
	where := e.intern.convWhere(c)
	for i := range c.Path.Steps {
		st := c.Path.Steps[i]
		out := e.newSlot(v.Type.DType)
		in := plan.Instr{Kind: plan.Local, Label: v.Label(), Step: &st, DType: v.Type.DType, Shape: v.Type.Shape,
			Placement: st.To, ArgPlace: []sbp.NdSBP{st.From}, Args: []int{cur}, Out: out, Pos: c.Pos, Where: where}
		if st.Kind.Communicates() {
			in.Kind, in.Group = plan.Collective, e.group([]int{st.Axis})
		}
		e.emit(in)
		cur = out
	}
	e.convSlot[c.ID] = cur + 1
	return cur
}

// group returns the index of the group over axes, declaring it on first use.
func (e *emitter) group(axes []int) int {
	if len(axes) == 1 && axes[0] >= 0 && axes[0] < len(e.oneAxis) {
		// a boxing step's group, one per collective step: by its axis,
		// without formatting a key
		if g := e.oneAxis[axes[0]]; g > 0 {
			return g - 1
		}
		g := e.groupByKey(axes)
		e.oneAxis[axes[0]] = g + 1
		return g
	}
	return e.groupByKey(axes)
}

// groupByKey is group by the axes' text.
func (e *emitter) groupByKey(axes []int) int {
	k := fmt.Sprint(axes)
	if g, ok := e.groups[k]; ok {
		return g
	}
	e.exec.Groups = append(e.exec.Groups, plan.Group{Axes: slices.Clone(axes)})
	e.groups[k] = len(e.exec.Groups) - 1
	return e.groups[k]
}

// freeAfterLastUse frees each slot after its last reader (an argument of
// a bucket's member after the bucket's last member); outputs and carried
// values live to the end. It sets every instruction's Free list.
func freeAfterLastUse(prog *plan.Program) { freeAfterLastUseFrom(prog, 0) }

// freeAfterLastUseFrom is freeAfterLastUse for the instructions from start
// on (the bucket pass's tail, reordered among themselves): a slot they
// read is last read among them, and one they neither read nor write keeps
// its free before them.
func freeAfterLastUseFrom(prog *plan.Program, start int) {
	last := make([]int, prog.NumSlots())
	for i := range last {
		last[i] = -1
	}
	end := 0 // the last instruction of the bucket i is in (plan/bucket.go)
	for i := start; i < len(prog.Instrs); i++ {
		in := &prog.Instrs[i] // by pointer: an Instr is some 350 bytes, and this reads three fields
		if !in.Joins {
			end = i + prog.BucketAt(i) - 1
		}
		in.Written(func(s int) { last[s] = max(last[s], i) })
		for _, a := range in.Args {
			last[a] = max(i, end)
		}
	}
	for _, s := range append(slices.Clone(prog.OutputSlots), prog.CarrySlots...) {
		if s >= 0 { // -1: another pipeline rank's
			last[s] = len(prog.Instrs)
		}
	}
	// the lists share one array, sliced per instruction (capped: an append
	// to one list cannot run into the next)
	count := make([]int32, len(prog.Instrs))
	n := 0
	for _, i := range last {
		if i >= start && i < len(prog.Instrs) {
			count[i]++
			n++
		}
	}
	all := make([]int, n)
	next := 0
	for i := start; i < len(prog.Instrs); i++ {
		prog.Instrs[i].Free = nil
		if c := int(count[i]); c > 0 {
			prog.Instrs[i].Free = all[next : next : next+c]
			next += c
		}
	}
	for s, i := range last {
		if i >= start && i < len(prog.Instrs) {
			prog.Instrs[i].Free = append(prog.Instrs[i].Free, s)
		}
	}
}

// KernelOf is the kernel description of an op value: what a backend needs
// to run it, with nothing pointing into the graph.
func KernelOf(v *ir.Value) *plan.Kernel {
	k := &plan.Kernel{Op: v.Op, Attrs: v.Attrs, DType: v.Type.DType, Shape: slices.Clone(v.Type.Shape)}
	k.Attrs.Perm = slices.Clone(v.Attrs.Perm)
	k.Attrs.Init = nil
	for _, a := range v.Args {
		k.ArgDTypes = append(k.ArgDTypes, a.Type.DType)
		k.ArgShapes = append(k.ArgShapes, slices.Clone(a.Type.Shape))
	}
	return k
}

// hostInBudget checks, when the budget also holds the host tier
// (Options.HostInBudget), every device's peak of both tiers together.
func hostInBudget(p *Plan, budget int64) error {
	if !p.Opts.HostInBudget || p.HostPeak == nil {
		return nil
	}
	total := p.Exec.TotalPeaks()
	worst := 0
	for r := range total {
		if total[r] > total[worst] {
			worst = r
		}
	}
	if total[worst] <= budget {
		return nil
	}
	where := ""
	if n := p.Exec.Mesh.Size(); n > 1 {
		where = fmt.Sprintf(" on device %d of %d", worst, n)
	}
	return lang.ErrorList{&ir.Error{Pos: p.Graph.Train.Pos, Msg: fmt.Sprintf(
		"out of memory: with offload = %s, device and host memory together peak at %s%s (device %s, host %s), over the budget of %s, which holds both: this machine's memory shared by the devices (--memory budgets the device alone)",
		p.Graph.Train.Offload, HumanBytes(float64(total[worst])), where, HumanBytes(float64(p.Peak[worst])), HumanBytes(float64(p.HostPeak[worst])), HumanBytes(float64(budget)))}}
}

// simulateMemory replays each rank's allocations (plan.Peak). With a
// memory budget, a plan whose largest peak exceeds it is an error at the
// value whose allocation first crosses the budget on that device: the
// program would not fit, and finding out at run time costs the work done
// until then (or the process, to the kernel's out-of-memory killer).
func simulateMemory(p *Plan) error {
	if p.Peak == nil { // the Adam fusion, which replays the programs it leaves, may have
		p.Peak = p.Exec.Peaks()
	}
	worst := 0
	for r := range p.Peak {
		if p.Peak[r] > p.Peak[worst] {
			worst = r
		}
	}
	budget := p.Opts.Memory
	if budget <= 0 {
		return nil
	}
	if p.Peak[worst] <= budget {
		return hostInBudget(p, budget)
	}
	i, held, _ := p.Exec.FirstOver(worst, budget)
	in := &p.Exec.ProgramOf(worst).Instrs[i]
	where := ""
	if n := p.Exec.Mesh.Size(); n > 1 {
		where = fmt.Sprintf(" on device %d of %d", worst, n)
	}
	return lang.ErrorList{&ir.Error{Pos: in.Pos, Msg: fmt.Sprintf(
		"out of memory: %s brings the memory held%s to %s (peak %s per device), over the budget of %s (--memory)",
		in.Label, where, HumanBytes(float64(held)), HumanBytes(float64(p.Peak[worst])), HumanBytes(float64(budget)))}}
}
