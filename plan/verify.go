package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshrun/meshrun/ir"
)

// WellFormed checks each program on its own: indices in range, every
// instruction has the fields its kind needs, every slot is written before
// it is read, placements have one entry per mesh axis.
func (p *Plan) WellFormed() error {
	if p.Mesh == nil || p.Mesh.Size() < 1 {
		return fmt.Errorf("the plan has no mesh")
	}
	if len(p.Programs) == 0 {
		return fmt.Errorf("the plan has no program")
	}
	if p.RankProgram != nil && len(p.RankProgram) != p.Mesh.Size() {
		return fmt.Errorf("%d rank→program entries for %d ranks", len(p.RankProgram), p.Mesh.Size())
	}
	for r, q := range p.RankProgram {
		if q < 0 || q >= len(p.Programs) {
			return fmt.Errorf("rank %d runs program %d; the plan has %d", r, q, len(p.Programs))
		}
	}
	for gi, g := range p.Groups {
		for _, a := range g.Axes {
			if a < 0 || a >= p.Mesh.NumAxes() {
				return fmt.Errorf("group g%d spans axis %d; the mesh has %d", gi, a, p.Mesh.NumAxes())
			}
		}
	}
	for _, c := range p.Carry {
		if c < 0 || c >= len(p.Sources) {
			return fmt.Errorf("a carried value replaces source %d; the plan has %d", c, len(p.Sources))
		}
	}
	for i, prog := range p.Programs {
		if err := p.wellFormed(prog); err != nil {
			return fmt.Errorf("program %d: %v", i, err)
		}
	}
	return nil
}

func (p *Plan) wellFormed(prog *Program) error {
	n := prog.NumSlots()
	written := make([]bool, n)
	onHost := make([]bool, n) // the tier of each written slot
	slot := func(s int) bool { return s >= 0 && s < n }
	dead := donatedDead{} // slots whose buffer a result took (donate.go)
	sent := sharedSlots{} // slots never donated (Instr.Shared, donate.go)
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		bad := func(format string, a ...any) error {
			return fmt.Errorf("instruction %d (%s) at %s: %s", i, in.Label, ir.FormatPos(in.Pos), fmt.Sprintf(format, a...))
		}
		if len(in.Placement) != p.Mesh.NumAxes() {
			return bad("placement %s for a mesh of %d axes", in.Placement, p.Mesh.NumAxes())
		}
		for _, pl := range in.ArgPlace {
			if len(pl) != p.Mesh.NumAxes() {
				return bad("argument placement %s for a mesh of %d axes", pl, p.Mesh.NumAxes())
			}
		}
		if err := p.kindFields(in); err != nil {
			return bad("%v", err)
		}
		if err := checkJoin(prog, i); err != nil {
			return bad("%v", err)
		}
		for _, a := range in.Args {
			if !slot(a) {
				return bad("reads slot %d of %d", a, n)
			}
			if !written[a] {
				return bad("reads slot %d before it is written", a)
			}
			if want := argTier(in); onHost[a] != want {
				return bad("reads slot %d in %s memory; a %s instruction in %s memory reads %s memory", a, tierName(onHost[a]), in.Kind, tierName(in.Host), tierName(want))
			}
			if err := dead.read(a); err != nil {
				return bad("%v", err)
			}
		}
		if err := verifyDonation(in); err != nil {
			return bad("%v", err)
		}
		if err := sent.check(in); err != nil {
			return bad("%v", err)
		}
		if in.Kind == Send || in.Kind == Mark {
			if in.Out != -1 || len(in.Outs) > 0 {
				return bad("a %s writes slot %d", in.Kind, in.Out)
			}
		} else {
			if !slot(in.Out) {
				return bad("writes slot %d of %d", in.Out, n)
			}
			written[in.Out] = true
			onHost[in.Out] = in.Host
			for _, o := range in.Outs { // further results (Instr.Outs)
				switch {
				case in.Kind != Compute:
					return bad("a %s with %d results", in.Kind, 1+len(in.Outs))
				case !slot(o):
					return bad("writes slot %d of %d", o, n)
				case written[o]:
					return bad("writes slot %d as a further result, which is already written", o)
				}
				written[o], onHost[o] = true, in.Host
			}
		}
		for _, s := range in.Free {
			if !slot(s) {
				return bad("frees slot %d of %d", s, n)
			}
		}
		dead.donate(i, in)
	}
	if err := dead.kept(prog); err != nil {
		return err
	}
	for _, s := range append(slices.Clone(prog.OutputSlots), prog.CarrySlots...) {
		if s == -1 && p.Pipe != nil {
			continue // held by another pipeline rank
		}
		if !slot(s) || !written[s] {
			return fmt.Errorf("an output or carried value is in slot %d, which is never written", s)
		}
	}
	if len(prog.OutputSlots) != len(p.Outputs) {
		return fmt.Errorf("%d output slots for %d outputs", len(prog.OutputSlots), len(p.Outputs))
	}
	if len(prog.CarrySlots) != len(p.Carry) {
		return fmt.Errorf("%d carry slots for %d carried values", len(prog.CarrySlots), len(p.Carry))
	}
	return nil
}

// kindFields checks that an instruction has what its kind needs.
func (p *Plan) kindFields(in *Instr) error {
	switch in.Kind {
	case Source:
		if in.Src < 0 || in.Src >= len(p.Sources) {
			return fmt.Errorf("source %d of %d", in.Src, len(p.Sources))
		}
	case Compute:
		if in.Kernel == nil || len(in.Kernel.ArgShapes) != len(in.Args) || len(in.ArgPlace) != len(in.Args) {
			return fmt.Errorf("a compute instruction needs a kernel and one shape and placement per argument")
		}
	case Local, Collective:
		if in.Step == nil || len(in.Args) != 1 || in.Step.Axis < 0 || in.Step.Axis >= p.Mesh.NumAxes() {
			return fmt.Errorf("a boxing instruction needs a step on a mesh axis and one argument")
		}
		if in.Step.Kind.Communicates() != (in.Kind == Collective) {
			return fmt.Errorf("step %s in a %s instruction", in.Step.Kind, in.Kind)
		}
		if in.Kind == Collective && (in.Group < 0 || in.Group >= len(p.Groups)) {
			return fmt.Errorf("group g%d of %d", in.Group, len(p.Groups))
		}
	case Send, Recv:
		if (in.Kind == Send) != (len(in.Args) == 1) || (in.Kind == Recv && len(in.Args) != 0) {
			return fmt.Errorf("a send reads one slot, a recv none")
		}
		if in.Tag < 0 || in.Tag > MaxTag {
			return fmt.Errorf("tag %d is outside 0..%d", in.Tag, MaxTag)
		}
	case Mark:
		if in.Act == nil || len(in.Args) != 0 || in.Out != -1 {
			return fmt.Errorf("a mark names its action and reads and writes nothing")
		}
	case Offload, Fetch:
		if len(in.Args) != 1 || len(in.ArgPlace) != 1 || !in.ArgPlace[0].Equal(in.Placement) {
			return fmt.Errorf("a copy reads one slot and keeps its placement")
		}
		if in.Host != (in.Kind == Offload) {
			return fmt.Errorf("an offload writes host memory, a fetch device memory")
		}
	}
	if in.Host && (in.Kind == Send || in.Kind == Recv || in.Kind == Mark) {
		return fmt.Errorf("a %s does not run in host memory", in.Kind)
	}
	switch in.Kind {
	case Source, Compute, Local, Collective, Send, Recv, Mark, Offload, Fetch:
	default:
		return fmt.Errorf("unknown instruction kind %d", in.Kind)
	}
	return nil
}

// Verify checks the ranks against each other: it binds every rank's
// program and dry-runs all of them together. A collective proceeds when
// every member of its group has reached it, and they must agree on the
// step, the tensor and its placement; a send is buffered and a recv waits
// for the matching message (same pair of ranks and tag, first sent first
// received), which must have the type the recv expects. The run must end
// with every rank finished and every message received; a state where no
// rank can move is a deadlock. Errors name the ranks, the instructions and
// their source lines.
func (p *Plan) Verify() error {
	if err := p.WellFormed(); err != nil {
		return err
	}
	n := p.Mesh.Size()
	ranks := make([]*RankProgram, n)
	for r := range ranks {
		rp, err := p.Bind(r)
		if err != nil {
			return fmt.Errorf("rank %d: %v", r, err)
		}
		ranks[r] = rp
	}
	return simulate(p, ranks)
}

type msgKey struct{ from, to, tag int }

type sim struct {
	p     *Plan
	ranks []*RankProgram
	pc    []int
	queue map[msgKey][]*Instr
}

func simulate(p *Plan, ranks []*RankProgram) error {
	s := &sim{p: p, ranks: ranks, pc: make([]int, len(ranks)), queue: map[msgKey][]*Instr{}}
	for {
		moved := false
		for r := range ranks {
			m, err := s.advance(r)
			if err != nil {
				return err
			}
			moved = moved || m
		}
		if s.finished() {
			return s.leftovers()
		}
		if !moved {
			return s.deadlock()
		}
	}
}

func (s *sim) at(r int) (*Instr, *Bound) {
	rp := s.ranks[r]
	if s.pc[r] >= len(rp.Prog.Instrs) {
		return nil, nil
	}
	return &rp.Prog.Instrs[s.pc[r]], &rp.Instrs[s.pc[r]]
}

// advance runs rank r as far as it can go alone, then tries to complete
// the communication it waits at.
func (s *sim) advance(r int) (bool, error) {
	moved := false
	for {
		in, b := s.at(r)
		if in == nil {
			return moved, nil
		}
		switch in.Kind {
		case Send:
			k := msgKey{r, b.Peer, in.Tag}
			s.queue[k] = append(s.queue[k], in)
		case Recv:
			k := msgKey{b.Peer, r, in.Tag}
			q := s.queue[k]
			if len(q) == 0 {
				return moved, nil
			}
			if sent := q[0]; sent.DType != in.DType || !slices.Equal(sent.Shape, in.Shape) || !sent.Placement.Equal(in.Placement) {
				return moved, fmt.Errorf("rank %d's %s at %s expects %s%v %s; rank %d sent %s%v %s at %s",
					r, in.Name(), ir.FormatPos(in.Pos), in.DType, in.Shape, in.Placement, b.Peer, sent.DType, sent.Shape, sent.Placement, ir.FormatPos(sent.Pos))
			}
			s.queue[k] = q[1:]
		case Collective:
			done, err := s.collective(r, in, b)
			if err != nil || !done {
				return moved, err
			}
			moved = true
			continue // collective advanced every member, r included
		}
		s.pc[r]++
		moved = true
	}
}

// collective completes the collective r waits at when every member of its
// group waits at a collective on the same group.
func (s *sim) collective(r int, in *Instr, b *Bound) (bool, error) {
	for _, m := range b.Members {
		other, _ := s.at(m)
		if other == nil || other.Kind != Collective || other.Group != in.Group {
			return false, nil
		}
		if other.Step.Kind != in.Step.Kind || other.DType != in.DType || !slices.Equal(other.Shape, in.Shape) ||
			!other.Step.From.Equal(in.Step.From) || !other.Step.To.Equal(in.Step.To) {
			return false, fmt.Errorf("ranks %d and %d disagree on a collective of group g%d: rank %d runs %s %s→%s at %s, rank %d runs %s %s→%s at %s",
				r, m, in.Group, r, in.Name(), in.Step.From, in.Step.To, ir.FormatPos(in.Pos), m, other.Name(), other.Step.From, other.Step.To, ir.FormatPos(other.Pos))
		}
	}
	for _, m := range b.Members {
		s.pc[m]++
	}
	return true, nil
}

func (s *sim) finished() bool {
	for r := range s.ranks {
		if in, _ := s.at(r); in != nil {
			return false
		}
	}
	return true
}

func (s *sim) leftovers() error {
	for k, q := range s.queue {
		if len(q) > 0 {
			return fmt.Errorf("rank %d sends %s at %s to rank %d, which never receives it", k.from, q[0].Name(), ir.FormatPos(q[0].Pos), k.to)
		}
	}
	return nil
}

// deadlock describes every rank that still waits, and on whom.
func (s *sim) deadlock() error {
	var lines []string
	for r := range s.ranks {
		in, b := s.at(r)
		if in == nil {
			continue
		}
		who := ""
		switch in.Kind {
		case Recv:
			who = fmt.Sprintf("waits for rank %d", b.Peer)
		case Collective:
			var missing []string
			for _, m := range b.Members {
				if o, _ := s.at(m); o == nil || o.Kind != Collective || o.Group != in.Group {
					missing = append(missing, s.state(m))
				}
			}
			who = "waits for " + strings.Join(missing, ", ")
		}
		lines = append(lines, fmt.Sprintf("  rank %d at instruction %d, %s (%s): %s", r, s.pc[r], in.Name(), ir.FormatPos(in.Pos), who))
		if len(lines) == 8 {
			lines = append(lines, "  ...")
			break
		}
	}
	return fmt.Errorf("the ranks' programs deadlock:\n%s", strings.Join(lines, "\n"))
}

func (s *sim) state(r int) string {
	in, _ := s.at(r)
	if in == nil {
		return fmt.Sprintf("rank %d (finished)", r)
	}
	return fmt.Sprintf("rank %d (at %s, %s)", r, in.Name(), ir.FormatPos(in.Pos))
}

// argTier is the tier an instruction's arguments must be in: its own,
// except for the copies between tiers.
func argTier(in *Instr) bool {
	switch in.Kind {
	case Offload:
		return false
	case Fetch:
		return true
	}
	return in.Host
}

func tierName(host bool) string {
	if host {
		return "host"
	}
	return "device"
}
