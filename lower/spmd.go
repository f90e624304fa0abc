package lower

import (
	"fmt"
	"strings"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
)

// InstrKind says what an instruction does.
type InstrKind uint8

const (
	Source  InstrKind = iota // materialise this device's block of an input or param
	Compute                  // run an op's kernel on local blocks
	Box                      // one boxing step: a collective or a local conversion
)

func (k InstrKind) String() string {
	return [...]string{"source", "compute", "box"}[k]
}

// Instr is one instruction of a device program.
type Instr struct {
	Kind  InstrKind
	Value *lang.Value // Source, Compute: the value computed; Box: the value converted
	Conv  *Conversion // Box
	Step  *sbp.Step   // Box
	Args  []int       // slots read
	Out   int         // slot written
	Shape []int       // local shape of the result
	In    []sbp.Block // blocks of the arguments as read
	Block sbp.Block   // block of the result
	Group []int       // Box: the devices of this device's group, in ring order
	Rank  int         // Box: this device's index in Group
	// Lens is, for a step that gathers, scatters or exchanges along a dim,
	// every group member's block length along it (uneven splits included):
	// the From dim for an all-gather, the To dim otherwise.
	Lens []int
	Pos  lang.Pos // the source position responsible
	Free []int    // slots whose last use is this instruction
}

// Program is one device's instruction list.
type Program struct {
	Device      int
	Instrs      []Instr
	NumSlots    int
	OutputSlots []int // per Plan.Outputs
	CarrySlots  []int // per Plan.Carry
	SlotType    []lang.DType
}

// Name describes an instruction for errors, timelines and dumps.
func (in *Instr) Name() string {
	switch in.Kind {
	case Box:
		return fmt.Sprintf("%s(%s)", in.Step.Kind, in.Value.Label())
	case Source:
		return fmt.Sprintf("%s %s", in.Value.Op, in.Value.Label())
	}
	return fmt.Sprintf("%s -> %s", in.Value.Op, in.Value.Label())
}

func buildPrograms(p *Plan) error {
	for dev := 0; dev < p.Mesh.Size(); dev++ {
		p.Programs = append(p.Programs, p.program(dev))
	}
	return nil
}

func (p *Plan) program(dev int) *Program {
	m := p.Mesh
	prog := &Program{Device: dev}
	slotOf := map[*lang.Value]int{}
	convSlot := map[*Conversion]int{}
	newSlot := func(dt lang.DType) int {
		prog.SlotType = append(prog.SlotType, dt)
		prog.NumSlots++
		return prog.NumSlots - 1
	}
	layout := func(v *lang.Value, pl sbp.NdSBP) sbp.Block {
		return sbp.Layout(m, v.Type.Shape, pl, dev)
	}
	// convert emits the steps of c (once) and returns the slot holding the result.
	convert := func(c *Conversion) int {
		if s, ok := convSlot[c]; ok {
			return s
		}
		cur := slotOf[c.Value]
		for i := range c.Path.Steps {
			st := &c.Path.Steps[i]
			out := newSlot(c.Value.Type.DType)
			in := Instr{Kind: Box, Value: c.Value, Conv: c, Step: st, Args: []int{cur}, Out: out,
				In: []sbp.Block{layout(c.Value, st.From)}, Block: layout(c.Value, st.To),
				Group: m.Group(dev, st.Axis), Rank: m.Coord(dev)[st.Axis], Pos: c.Pos}
			in.Shape = in.Block.Len
			in.Lens = stepLens(m, c.Value.Type.Shape, st, in.Group)
			prog.Instrs = append(prog.Instrs, in)
			cur = out
		}
		convSlot[c] = cur
		return cur
	}
	for _, v := range p.Values {
		if v.IsSource() {
			out := newSlot(v.Type.DType)
			b := layout(v, p.Placement[v])
			prog.Instrs = append(prog.Instrs, Instr{Kind: Source, Value: v, Out: out, Shape: b.Len, Block: b, Pos: v.Pos})
			slotOf[v] = out
			continue
		}
		ch := p.Choice[v]
		args := make([]int, len(v.Args))
		blocks := make([]sbp.Block, len(v.Args))
		for i, a := range v.Args {
			if c := ch.ArgConv[i]; c != nil {
				args[i] = convert(c)
			} else {
				args[i] = slotOf[a]
			}
			blocks[i] = layout(a, ch.Sig.In[i])
		}
		if v.Op == "to" {
			slotOf[v] = args[0] // a conversion, already emitted; the value aliases its result
			continue
		}
		out := newSlot(v.Type.DType)
		b := layout(v, p.Placement[v])
		prog.Instrs = append(prog.Instrs, Instr{Kind: Compute, Value: v, Args: args, Out: out, Shape: b.Len, In: blocks, Block: b, Pos: v.Pos})
		slotOf[v] = out
	}
	for _, o := range p.Outputs {
		s := slotOf[o.Output.Value]
		if o.Conv != nil {
			s = convert(o.Conv)
		}
		prog.OutputSlots = append(prog.OutputSlots, s)
	}
	for _, c := range p.Carry {
		s := slotOf[c.Next]
		if c.Conv != nil {
			s = convert(c.Conv)
		}
		prog.CarrySlots = append(prog.CarrySlots, s)
	}
	// liveness: free each slot after its last reader; outputs and carried
	// values live to the end.
	last := make([]int, prog.NumSlots)
	for i := range last {
		last[i] = -1
	}
	for i, in := range prog.Instrs {
		last[in.Out] = max(last[in.Out], i)
		for _, a := range in.Args {
			last[a] = i
		}
	}
	for _, s := range append(append([]int{}, prog.OutputSlots...), prog.CarrySlots...) {
		last[s] = len(prog.Instrs)
	}
	for s, i := range last {
		if i >= 0 && i < len(prog.Instrs) {
			prog.Instrs[i].Free = append(prog.Instrs[i].Free, s)
		}
	}
	return prog
}

// stepLens lists the group members' block lengths along the dim a step
// cuts or joins (nil for steps that need none).
func stepLens(m *mesh.Mesh, shape []int, st *sbp.Step, group []int) []int {
	pl, dim := st.To, -1
	switch st.Kind {
	case sbp.AllGather:
		pl, dim = st.From, st.From[st.Axis].Dim
	case sbp.ReduceScatter, sbp.AllToAll:
		dim = st.To[st.Axis].Dim
	}
	if dim < 0 {
		return nil
	}
	out := make([]int, len(group))
	for i, d := range group {
		out[i] = sbp.Layout(m, shape, pl, d).Len[dim]
	}
	return out
}

// Dump prints a program.
func (prog *Program) Dump() string {
	var b strings.Builder
	for _, in := range prog.Instrs {
		var args []string
		for _, a := range in.Args {
			args = append(args, fmt.Sprintf("s%d", a))
		}
		fmt.Fprintf(&b, "  s%d = %s(%s) local%s", in.Out, in.Name(), strings.Join(args, ", "), lang.ShapeString(in.Shape))
		if in.Kind == Box {
			fmt.Fprintf(&b, " group%v", in.Group)
		}
		if len(in.Free) > 0 {
			fmt.Fprintf(&b, " free%v", in.Free)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "  outputs %v\n", prog.OutputSlots)
	return b.String()
}

// simulateMemory replays each program's allocations: every slot holds its
// local block from the instruction that writes it until its last reader.
func simulateMemory(p *Plan) error {
	p.Peak = make([]int64, len(p.Programs))
	for d, prog := range p.Programs {
		var cur, peak int64
		size := make([]int64, prog.NumSlots)
		for _, in := range prog.Instrs {
			n := int64(1)
			for _, l := range in.Shape {
				n *= int64(l)
			}
			size[in.Out] = n * int64(prog.SlotType[in.Out].Size())
			cur += size[in.Out]
			peak = max(peak, cur)
			for _, s := range in.Free {
				cur -= size[s]
			}
		}
		p.Peak[d] = peak
	}
	return nil
}
