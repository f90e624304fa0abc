// Package lower turns a checked graph into per-device programs.
//
// Lowering is a list of passes (Passes) run in order over a Plan:
//
//	check   re-check the graph's structure; a missing op rule is reported
//	        here, for every op at once, at the op's position; drop values
//	        no output needs (dead code, e.g. unused adjoints)
//	infer   give every value a placement: sources and to() keep the declared
//	        one; every op takes, among the nd signatures its rule allows, the
//	        one whose input conversions cost least under the link model
//	        (ties: fewer conversions, fewer partial outputs, more splitting);
//	        a conversion boxing makes anyway (an earlier consumer's, an
//	        output's) is free, and a value headed for a placement (a
//	        gradient, an output, a carried value) is charged the conversion
//	        there, a micro-batch's gradient of a parameter its share of the
//	        step's (infer_ahead.go)
//	boxing  insert a conversion wherever an op's chosen input placement
//	        differs from its argument's placement, and for output/to(); each
//	        is a shortest path of single-axis steps (sbp.Planner) and
//	        remembers the source position that caused it
//	spmd    emit the executable plan (package plan): a program over
//	        numbered slots with global shapes and placements, shared by
//	        every rank whose work differs only by its coordinate, the
//	        groups its collectives use, and the slots each instruction
//	        frees last; it refers to nothing in the graph
//	fuse    hand a transpose that feeds only a matmul to the GEMM's
//	        transpose flags instead of materialising it (fuse_gemm.go)
//	tier    with offload (ZeRO-Offload): mark what lives in host memory
//	        and turn the step's copies into copy instructions (tier.go)
//	pipeline  with a pipeline axis: give every value a stage and each
//	        pipeline rank its program (its stages' work in the schedule's
//	        order, send/recv between stages; see pipeline.go)
//	bucket  launch independent all-reduces over one group together, up
//	        to a cap of bytes (DDP's gradient buckets), and adjacent
//	        reduce-scatters or all-gathers (bucket.go)
//	memory  simulate each rank's allocations: per-device peak bytes; a
//	        peak over Options.Memory is an error at the value whose
//	        allocation first crosses it
//
// Results live in side tables on the Plan (placements, choices,
// conversions), never on the graph. The passes after infer read them per
// value and argument, so the placements and choices are also kept by
// value ID (a value's ID is its index, which the check pass checks); and
// what a pipelined or deep program repeats per micro-batch and layer
// (kernel descriptions, position texts, explain's strings) is made once
// and shared (intern.go, explain_memo.go). With Options.Verify a verifier checks
// the plan's invariants after every pass; Options.DumpAfter prints the plan
// after the named pass (or "all").
package lower

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// Options configure lowering.
type Options struct {
	Mesh      *mesh.Mesh     // overrides the graph's mesh (the single-device reference run)
	Topo      *mesh.Topology // link model; nil = mesh.DefaultLink on every axis
	Verify    bool           // run the verifier after every pass
	DumpAfter string         // pass name or "all"
	Dump      io.Writer      // where dumps go
	// KeepDead keeps values no output needs (the REPL shows every name).
	KeepDead bool
	// NoFuse skips the fusion passes: the Adam fusion (fuse_adam.go), and
	// the gemm fusion (fuse_gemm.go): every transpose
	// is materialised, as before it (the fused-versus-unfused tests).
	NoFuse bool
	// NoFuseAdam skips the Adam fusion alone (the fused-versus-unfused
	// Adam tests; NoFuse skips it too).
	NoFuseAdam bool
	// NoBucket launches every collective on its own (bucket.go; the
	// bucketed-versus-alone tests). BucketBytes caps a bucket's bytes per
	// device (0: DefaultBucketBytes).
	NoBucket    bool
	BucketBytes int64
	// Memory is the budget of bytes a device may hold at once; a plan
	// whose peak (memory pass) exceeds it fails to lower. 0: no budget.
	Memory int64
	// HostInBudget: Memory also holds each device's host tier (offload),
	// as when it is a share of this machine's RAM, where the CPU backend
	// keeps both tiers; the two tiers' peak together must fit.
	HostInBudget bool
	// Force fixes the placement of source values by name, overriding the
	// declaration (the brute-force validator uses it).
	Force map[string]sbp.NdSBP
}

// Plan is a lowered program.
type Plan struct {
	Graph   *ir.Graph
	Mesh    *mesh.Mesh
	Planner *sbp.Planner
	// sigs caches sbp.NdSigs by the op's description (descKey): a deep or
	// pipelined model repeats each layer's ops with the same shapes, and
	// the signatures are a function of the description and the mesh.
	// Choices share the cached slices, which nothing modifies.
	sigs map[string][]sbp.NdSig
	// chosen caches choose's result (without ArgConv) by choiceKey, and
	// keyBuf is the scratch buffer the keys are built in.
	chosen map[string]Choice
	keyBuf []byte
	desc   sbp.OpDesc // choose's scratch description
	// made, dest and perStep are what infer knows beyond an op's
	// arguments, by value ID (infer_ahead.go): the placements earlier
	// consumers convert a value to, the placement a value must end in,
	// and how many micro-batches' gradients of a value are summed before
	// they are converted (0: none).
	made    [][]sbp.NdSBP
	dest    []sbp.NdSBP
	perStep []int
	Opts    Options

	// Values are the graph's values that reach an output, in order (the
	// check pass drops the rest unless Options.KeepDead).
	Values []*ir.Value

	Placement map[*ir.Value]sbp.NdSBP
	Choice    map[*ir.Value]*Choice
	// placeByID and choiceByID hold the same by value ID (infer fills
	// both): the later passes read them per value and per argument, and on
	// a graph of a hundred thousand values a slice read costs a fraction
	// of a map lookup. See placementOf and choiceOf.
	placeByID  []sbp.NdSBP
	choiceByID []*Choice
	Convs      []*Conversion
	Outputs    []*OutputPlan
	Carry      []*CarryPlan // training: the values that replace sources each step
	// Exec is the executable plan the spmd pass emits: self-contained
	// per-rank programs (package plan); SourceIndex maps each source value
	// to its index in Exec.Sources.
	Exec        *plan.Plan
	SourceIndex map[*ir.Value]int
	// InstrValue is, per instruction of the spmd pass's program, the value
	// it serves: the value it computes, or the consumer (output, carried
	// value) a conversion is for.
	InstrValue []*ir.Value
	// Pipe is the pipeline pass's result (nil without a pipeline axis).
	Pipe *PipePlan
	Peak []int64 // per-device peak bytes (memory pass)
	// Host is, under offload (tier pass), the values kept in host memory;
	// HostPeak the per-device peak bytes of that memory (memory pass).
	Host     map[*ir.Value]bool
	HostPeak []int64

	done map[string]bool
}

// Choice is the signature inference picked for an op.
type Choice struct {
	Sig        sbp.NdSig
	Time       float64 // modelled seconds of the conversions it needs
	Candidates int     // how many nd signatures were valid
	ArgConv    []*Conversion
	// ahead: the choice read more than its arguments' placements
	// (looksAhead), so a micro-batch twin cannot simply copy it
	ahead bool
}

// Conversion is one inserted boxing: Value converted along Path.
type Conversion struct {
	ID    int // its index in Plan.Convs
	Value *ir.Value
	Path  *sbp.Path
	Pos   ir.Pos   // the source position that needs it
	Calls []ir.Pos // call sites of the functions Pos is inside, innermost first
	Cause string   // what needs it, e.g. "matmul", "output y", "to"
}

// OutputPlan is how an output is delivered.
type OutputPlan struct {
	Output    *ir.Output
	Conv      *Conversion // nil when no conversion is needed
	Placement sbp.NdSBP
}

// CarryPlan is how a training step hands a new value to the next step: Next
// converted (Conv, when needed) to Source's placement.
type CarryPlan struct {
	Source, Next *ir.Value
	Conv         *Conversion
}

// Pass is one lowering pass.
type Pass struct {
	Name     string
	Run      func(*Plan) error
	Requires []string
}

// Passes is the pass list, in order.
var Passes = []Pass{
	{Name: "check", Run: checkGraph},
	{Name: "infer", Run: inferPlacements, Requires: []string{"check"}},
	{Name: "boxing", Run: insertBoxing, Requires: []string{"infer"}},
	{Name: "spmd", Run: buildPrograms, Requires: []string{"boxing"}},
	{Name: "fuse", Run: fuseGemms, Requires: []string{"spmd"}},
	{Name: "tier", Run: assignTiers, Requires: []string{"spmd"}},
	{Name: "pipeline", Run: buildPipeline, Requires: []string{"spmd"}},
	{Name: "fuseadam", Run: fuseAdams, Requires: []string{"spmd"}},
	{Name: "bucket", Run: bucketAllReduces, Requires: []string{"spmd"}},
	{Name: "memory", Run: simulateMemory, Requires: []string{"spmd"}},
}

func init() {
	seen := map[string]bool{}
	for _, p := range Passes {
		for _, r := range p.Requires {
			if !seen[r] {
				panic(fmt.Sprintf("lower: pass %s requires %s, which does not run before it", p.Name, r))
			}
		}
		seen[p.Name] = true
	}
}

// Lower runs every pass over g.
func Lower(g *ir.Graph, opts Options) (*Plan, error) {
	p, err := newPlan(g, opts)
	if err != nil {
		return nil, err
	}
	for _, pass := range Passes {
		if err := runPass(p, pass); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// newPlan is the plan of g before any pass.
func newPlan(g *ir.Graph, opts Options) (*Plan, error) {
	m := g.Mesh
	if opts.Mesh != nil {
		m = opts.Mesh
	}
	if m == nil {
		return nil, fmt.Errorf("the program has no mesh")
	}
	if opts.Topo == nil {
		opts.Topo = mesh.Uniform(m, mesh.DefaultLink)
	}
	p := &Plan{
		Graph: g, Mesh: m, Planner: sbp.NewPlanner(m, opts.Topo), Opts: opts,
		Placement: make(map[*ir.Value]sbp.NdSBP, len(g.Values)), Choice: make(map[*ir.Value]*Choice, len(g.Values)),
		done: map[string]bool{},
	}
	return p, nil
}

// ErrInternal is wrapped by every lowering error that is a bug in meshrun
// rather than in the program: a pass that panicked, or a plan the verifier
// rejects. Callers (the fuzz test) tell the two apart with errors.Is.
var ErrInternal = errors.New("internal error in lowering")

func runPass(p *Plan, pass Pass) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w pass %s: %v", ErrInternal, pass.Name, r)
		}
	}()
	if err := pass.Run(p); err != nil {
		return err
	}
	p.done[pass.Name] = true
	if p.Opts.Verify {
		if err := Verify(p); err != nil {
			return fmt.Errorf("%w: verifier after pass %s: %w", ErrInternal, pass.Name, err)
		}
	}
	if p.Opts.Dump != nil && (p.Opts.DumpAfter == pass.Name || p.Opts.DumpAfter == "all") {
		fmt.Fprintf(p.Opts.Dump, "=== after %s ===\n%s", pass.Name, p.Dump())
	}
	return nil
}

// Dump prints the plan as far as the passes have run.
func (p *Plan) Dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mesh %s = %s\n", p.Mesh.Name, p.Mesh)
	for _, v := range p.Values {
		var args []string
		for i, a := range v.Args {
			s := fmt.Sprintf("%%%d", a.ID)
			if c := p.Choice[v]; c != nil && c.ArgConv != nil && c.ArgConv[i] != nil {
				s = fmt.Sprintf("%%%d~c%d", a.ID, c.ArgConv[i].ID)
			}
			args = append(args, s)
		}
		fmt.Fprintf(&b, "%%%d = %s(%s) : %s%s", v.ID, v.Op, strings.Join(args, ", "), v.Type, v.CollectiveAttrs())
		if pl, ok := p.Placement[v]; ok {
			fmt.Fprintf(&b, " %s", pl)
		}
		if v.Name != "" {
			fmt.Fprintf(&b, "  # %s", v.Name)
		}
		b.WriteByte('\n')
	}
	for _, c := range p.Convs {
		fmt.Fprintf(&b, "c%d: %%%d %s -> %s for %s at %s\n", c.ID, c.Value.ID, c.Path.From, c.Path.To, c.Cause, ir.FormatPos(c.Pos))
		for _, s := range c.Path.Steps {
			fmt.Fprintf(&b, "    %s  bytes=%.0f time=%.3gs\n", s.Describe(p.Mesh), s.Bytes, s.Time)
		}
	}
	for _, o := range p.Outputs {
		fmt.Fprintf(&b, "output %s %s\n", o.Output.Name, o.Placement)
	}
	if p.Pipe != nil {
		fmt.Fprintf(&b, "%s\n", p.Pipe.Schedule)
	}
	if p.done["spmd"] {
		b.WriteString(p.Exec.Dump())
	}
	if p.done["memory"] {
		fmt.Fprintf(&b, "peak bytes per device: %v\n", p.Peak)
	}
	return b.String()
}

// placementOf is p.Placement[v].
func (p *Plan) placementOf(v *ir.Value) sbp.NdSBP {
	if v.ID >= 0 && v.ID < len(p.placeByID) && p.placeByID[v.ID] != nil {
		return p.placeByID[v.ID]
	}
	return p.Placement[v]
}

// choiceOf is p.Choice[v].
func (p *Plan) choiceOf(v *ir.Value) *Choice {
	if v.ID >= 0 && v.ID < len(p.choiceByID) && p.choiceByID[v.ID] != nil {
		return p.choiceByID[v.ID]
	}
	return p.Choice[v]
}

// place records v's placement and (when not nil) its choice.
func (p *Plan) place(v *ir.Value, pl sbp.NdSBP, ch *Choice) {
	if p.placeByID == nil {
		p.placeByID = make([]sbp.NdSBP, len(p.Graph.Values))
		p.choiceByID = make([]*Choice, len(p.Graph.Values))
	}
	p.Placement[v], p.placeByID[v.ID] = pl, pl
	if ch != nil {
		p.Choice[v], p.choiceByID[v.ID] = ch, ch
	}
}
