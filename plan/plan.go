// Package plan is the runtime contract: what every rank of a mesh executes,
// self-contained (it refers to nothing in the compiler's IR) so that it can
// be encoded, shipped to another process and run there.
//
// A Plan holds a mesh, the communication groups every rank creates once at
// start-up, the distinct Programs, and which program each rank runs. A
// program is written once for all ranks that run it: it names global
// shapes and placements, never a rank's local block, so the ranks whose
// work differs only by their mesh coordinate share one program and Bind
// computes a rank's local shapes, shard offsets, group members and peers
// from its coordinate. An SPMD program on a 4096-device mesh is therefore
// one program, not 4096 copies; pipeline stages are a handful.
//
// Instructions are straight-line over numbered slots: materialise a source,
// run a kernel, a local boxing step (slice, make_partial), a collective on
// a declared group (a group may span several mesh axes), or a tagged
// point-to-point send/recv with a peer given as a shift along mesh axes,
// or a copy of a slot between the rank's device memory and its host
// memory (offload, fetch: ZeRO-Offload's host tier, where instructions
// marked Host run). A compute instruction may write a result into the
// buffer of an argument that dies there (Instr.Donate, donate.go), which
// the memory replay counts as no allocation.
// Verify checks the ranks' programs against each other by simulating all
// of them (see verify.go); Encode and Decode round-trip a plan.
package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/pipeline"
	"github.com/meshrun/meshrun/sbp"
)

// Kind says what an instruction does.
type Kind uint8

const (
	Source     Kind = iota // materialise this rank's block of a source tensor
	Compute                // run an op's kernel on local blocks
	Local                  // a boxing step without communication (slice, make_partial)
	Collective             // a boxing step on a group: all-gather, reduce-scatter, ...
	Send                   // send a slot to a peer, with a tag
	Recv                   // receive a tensor from a peer, with a tag
	Mark                   // a pipeline action (Act) is complete: timelines and the simulated clock
	Offload                // copy a device slot into host memory (ZeRO-Offload's host tier)
	Fetch                  // copy a host slot into device memory
)

var kindNames = [...]string{"source", "compute", "local", "collective", "send", "recv", "mark", "offload", "fetch"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Communicates reports whether the instruction waits for other ranks.
func (k Kind) Communicates() bool { return k == Collective || k == Send || k == Recv }

// Plan is everything the ranks of one mesh execute.
type Plan struct {
	Mesh *mesh.Mesh
	// Groups are created once at start-up, in this order, by every rank.
	Groups []Group
	// Programs are the distinct programs; RankProgram[r] is rank r's
	// (nil: every rank runs Programs[0]).
	Programs    []*Program
	RankProgram []int
	Sources     []Tensor // every source a program materialises (Instr.Src)
	Outputs     []Tensor // the program's outputs, in Program.OutputSlots order
	// Carry lists, for a training step, which source each carried value
	// replaces in the next step (indices into Sources), in
	// Program.CarrySlots order.
	Carry []int
	// Pipe is set when the mesh has a pipeline axis: each coordinate on it
	// runs its own program (its stages, in the schedule's order).
	Pipe *Pipe
}

// Pipe describes a pipelined plan.
type Pipe struct {
	Axis     int    // the pipeline axis
	Schedule string // the schedule in pipeline's text form
}

// LeadsStage reports whether rank r is at coordinate 0 on every axis but
// the pipeline's: the rank that stands for its pipeline coordinate (the
// others of its stage run the same program).
func (p *Plan) LeadsStage(r int) bool {
	for a, x := range p.Mesh.Coord(r) {
		if (p.Pipe == nil || a != p.Pipe.Axis) && x != 0 {
			return false
		}
	}
	return true
}

// HeldBy reports whether rank r holds tensor t: without a pipeline every
// rank does; with one, only the ranks on t's Home coordinate (-1: all).
func (p *Plan) HeldBy(t *Tensor, r int) bool {
	if p.Pipe == nil || t.Home < 0 {
		return true
	}
	return p.Mesh.Coord(r)[p.Pipe.Axis] == t.Home
}

// Group is a set of mesh axes: rank r's group is the ranks that share r's
// coordinates on every other axis, in row-major order of their coordinates
// on these axes (the ring order of the collectives).
type Group struct {
	Axes []int
}

// Tensor describes a logical tensor: its name, type and placement.
type Tensor struct {
	Name      string
	Role      string // sources: "input", "param", "state", "hyper"
	DType     ir.DType
	Shape     []int
	Placement sbp.NdSBP
	Init      *ir.Init // sources: how they get their values
	// Host says the tensor lives in the host tier (see Instr.Host).
	Host bool
	// Home is, in a pipelined plan, the pipeline coordinate that holds
	// the tensor (-1: every coordinate that needs it makes its own).
	Home int
}

// Program is one straight-line instruction list over numbered slots.
type Program struct {
	Instrs      []Instr
	SlotType    []ir.DType
	OutputSlots []int // per Plan.Outputs
	CarrySlots  []int // per Plan.Carry
}

// NumSlots is how many slots the program uses.
func (p *Program) NumSlots() int { return len(p.SlotType) }

// Instr is one instruction. Shapes and placements are global; a rank's
// local blocks follow from its coordinate (Bind).
type Instr struct {
	Kind  Kind
	Label string // the value it computes or moves, for humans ("W1", "matmul#12")
	// Kernel is the op a Compute instruction runs.
	Kernel *Kernel
	// Src indexes Plan.Sources for a Source instruction.
	Src int
	// Step is the boxing step of a Local or Collective instruction.
	Step *sbp.Step
	// Group indexes Plan.Groups for a Collective.
	Group int
	// Peer and Tag address a Send or Recv.
	Peer Peer
	Tag  int

	DType     ir.DType
	Shape     []int       // global shape of the result (Send: of what is sent)
	Placement sbp.NdSBP   // placement of the result (Send: of what is sent)
	ArgPlace  []sbp.NdSBP // placements of the arguments as read
	Args      []int       // slots read
	Out       int         // slot written; -1 for Send
	// Outs are the further slots a Compute instruction writes, the other
	// results of a kernel with several (lower's Adam fusion: the new
	// moments beside the new parameter), each of Out's dtype, shape and
	// placement; nil for one result. The memory replay counts each.
	Outs []int
	// Donate is buffer donation (XLA's input/output aliasing): Donate[k]
	// is the index in Args of the argument whose buffer result k (0: Out,
	// k ≥ 1: Outs[k-1]) is written into, or -1 for a fresh buffer; nil:
	// every result is fresh. A donated argument's slot dies here (it is in
	// Free) and has the result's dtype, shape, placement and tier, so the
	// memory replay counts no allocation for the result and no free for
	// the slot (see donate.go for every rule the verifier checks). The
	// kernel must be safe in place: it reads each element of the argument
	// before it writes that element of the result.
	Donate []int
	Free   []int // slots whose last use this is
	// Host says the instruction runs in, and its result lives in, the
	// rank's host memory rather than its device's (ZeRO-Offload's host
	// tier): every slot it reads is a host slot too, except that an
	// Offload reads a device slot; a Fetch reads a host slot and writes a
	// device one (Host false).
	Host bool

	Pos   ir.Pos
	Where string // Pos with the call chain, for errors
	// Act is, in a pipelined plan, the schedule action the instruction
	// belongs to (nil: before or after the schedule's actions).
	Act *pipeline.Action
	// Joins says that this collective (an all-reduce, reduce-scatter or
	// all-gather) runs in one launch with the instruction before it, one
	// of its kind (a bucket, bucket.go): DDP's gradient buckets, XLA's
	// all-reduce combiner.
	Joins bool
}

// Written calls f with each slot the instruction writes: Out, then Outs
// (none for a Send or Mark).
func (in *Instr) Written(f func(slot int)) {
	if in.Out < 0 {
		return
	}
	f(in.Out)
	for _, s := range in.Outs {
		f(s)
	}
}

// Kernel is an op application as a backend sees it: plain attributes and
// the global types of its result and arguments (a kernel on a shard needs
// the global sizes, e.g. the count a mean divides by).
type Kernel struct {
	Op        string
	Attrs     ir.Attrs
	DType     ir.DType
	Shape     []int
	ArgDTypes []ir.DType
	ArgShapes [][]int
	// TransA and TransB say that a matmul's first or second argument is
	// stored transposed (its last two dims swapped; ArgShapes are as
	// stored): lower's gemm fusion hands a transpose that fed only this
	// matmul to the GEMM's flags (lower/fuse_gemm.go).
	TransA, TransB bool
}

// AsOperands returns shapes (one per argument: ArgShapes, or the local
// blocks of them) as the op reads its arguments: a matmul's argument
// stored transposed (TransA, TransB) with its last two dims swapped back,
// a copy; the others as they are. Cost models that read a kernel's
// argument shapes (FLOPs) go through it.
func (k *Kernel) AsOperands(shapes [][]int) [][]int {
	if !k.TransA && !k.TransB {
		return shapes
	}
	out := slices.Clone(shapes)
	for i, tr := range [2]bool{k.TransA, k.TransB} {
		if s := out[i]; tr && len(s) >= 2 {
			s = slices.Clone(s)
			s[len(s)-2], s[len(s)-1] = s[len(s)-1], s[len(s)-2]
			out[i] = s
		}
	}
	return out
}

// MaxTag is the largest tag a plan's send/recv may use: MPI guarantees
// 32767, and the launchers keep the tags above this for themselves.
const MaxTag = 32000

// Peer names the other end of a send or recv relative to the sender: the
// rank whose coordinate is this rank's plus Shift on each of Axes.
type Peer struct {
	Axes  []int
	Shift []int
}

// Name describes an instruction for errors, timelines and dumps.
func (in *Instr) Name() string {
	switch in.Kind {
	case Local, Collective:
		if in.Step.Kind == sbp.RootBroadcast || in.Step.Kind == sbp.RootReduce {
			return fmt.Sprintf("%s(%s) root %d", in.Step.Kind, in.Label, in.Step.Root)
		}
		return fmt.Sprintf("%s(%s)", in.Step.Kind, in.Label)
	case Source:
		return "source " + in.Label
	case Send, Recv:
		return fmt.Sprintf("%s(%s) tag %d", in.Kind, in.Label, in.Tag)
	case Mark:
		return "end of " + in.Act.String()
	case Offload:
		return "offload " + in.Label + " to host"
	case Fetch:
		return "fetch " + in.Label + " to device"
	}
	return fmt.Sprintf("%s -> %s", in.Kernel.Op, in.Label)
}

// ProgramOf is the program rank r runs.
func (p *Plan) ProgramOf(r int) *Program {
	if p.RankProgram == nil {
		return p.Programs[0]
	}
	return p.Programs[p.RankProgram[r]]
}

// Dump prints the plan's groups and programs.
func (p *Plan) Dump() string {
	var b strings.Builder
	for i, g := range p.Groups {
		var names []string
		for _, a := range g.Axes {
			names = append(names, p.Mesh.Axes[a].Name)
		}
		fmt.Fprintf(&b, "group g%d over %s\n", i, strings.Join(names, "×"))
	}
	for i, prog := range p.Programs {
		fmt.Fprintf(&b, "program %d (%d slots", i, prog.NumSlots())
		if p.RankProgram != nil {
			fmt.Fprintf(&b, ", ranks %v", p.ranksOf(i))
		} else {
			b.WriteString(", every rank")
		}
		fmt.Fprintf(&b, "):\n%s", prog.Dump())
	}
	return b.String()
}

func (p *Plan) ranksOf(prog int) []int {
	var out []int
	for r, q := range p.RankProgram {
		if q == prog {
			out = append(out, r)
		}
	}
	return out
}

// Dump prints a program, one instruction a line.
func (prog *Program) Dump() string {
	var b strings.Builder
	for _, in := range prog.Instrs {
		if in.Kind == Mark {
			fmt.Fprintf(&b, "  -- %s\n", in.Name())
			continue
		}
		var args []string
		for i, a := range in.Args {
			args = append(args, fmt.Sprintf("s%d", a))
			if k := in.Kernel; k != nil && (i == 0 && k.TransA || i == 1 && k.TransB) {
				args[i] += "ᵀ" // read transposed (lower's gemm fusion)
			}
		}
		if in.Out >= 0 {
			fmt.Fprintf(&b, "  s%d", in.Out)
			for _, s := range in.Outs {
				fmt.Fprintf(&b, ", s%d", s)
			}
			b.WriteString(" = ")
		} else {
			b.WriteString("  ")
		}
		fmt.Fprintf(&b, "%s(%s) %s%s %s", in.Name(), strings.Join(args, ", "), in.DType, ir.ShapeString(in.Shape), in.Placement)
		if in.Host {
			b.WriteString(" host")
		}
		if in.Joins {
			b.WriteString(" joins")
		}
		switch in.Kind {
		case Collective:
			fmt.Fprintf(&b, " g%d", in.Group)
		case Send, Recv:
			fmt.Fprintf(&b, " peer%v%+v", in.Peer.Axes, in.Peer.Shift)
		}
		if len(in.Free) > 0 {
			fmt.Fprintf(&b, " free%v", in.Free)
		}
		if d := in.DonateString(); d != "" {
			b.WriteString(" " + d)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "  outputs %v\n", prog.OutputSlots)
	if len(prog.CarrySlots) > 0 {
		fmt.Fprintf(&b, "  carry %v\n", prog.CarrySlots)
	}
	return b.String()
}
