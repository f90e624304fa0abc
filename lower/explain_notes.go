package lower

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/sbp"
	"github.com/meshrun/meshrun/train"
)

// Notes are explain's warnings about combinations that multiply
// communication, each with the figure read from the plan's collectives
// (the bytes a device sends per step, or per run without training, summed
// over the inserted steps; on a pipeline, on the pipeline rank that sends
// the most). ZeRO with
// pipelines is noted in the pipeline section (explain_pipe.go calls
// zeroPipelineNote).
func explainNotes(p *Plan, r *Report) []string {
	t := p.Graph.Train
	steps := planSteps(p)
	var notes []string
	if t != nil && p.Pipe == nil {
		if n := accumulateNote(t.Zero, t.Accumulate, steps); n != "" {
			notes = append(notes, n)
		}
		if n := regatherNote(t.Zero, t.Accumulate, steps); n != "" {
			notes = append(notes, n)
		}
	}
	if n := slowLinkNote(p, r, steps); n != "" {
		notes = append(notes, n)
	}
	return notes
}

// noteStep is one communicating collective step of the plan and the
// pipeline rank whose devices run it (0 without a pipeline).
type noteStep struct {
	kind  sbp.Collective
	axis  int
	value string
	cause string
	bytes float64
	rank  int
}

func planSteps(p *Plan) []noteStep {
	rankOf := convRanks(p)
	var out []noteStep
	for _, c := range p.Convs {
		for _, s := range c.Path.Steps {
			if s.Kind.Communicates() {
				out = append(out, noteStep{kind: s.Kind, axis: s.Axis, value: c.Value.Label(), cause: c.Cause, bytes: s.Bytes, rank: rankOf(c)})
			}
		}
	}
	return out
}

// convRanks says which pipeline rank runs a conversion: the program
// builder (spmd.go) emits it once, with the first value that reads it in
// program order (an output, a carried value last), and the pipeline pass
// gives that instruction its reader's stage. A reader outside the stages
// falls back to the converted value's stage.
func convRanks(p *Plan) func(*Conversion) int {
	if p.Pipe == nil {
		return func(*Conversion) int { return 0 }
	}
	reader := make([]*ir.Value, len(p.Convs)) // by Conversion.ID
	read := func(c *Conversion, v *ir.Value) {
		if c != nil && reader[c.ID] == nil {
			reader[c.ID] = v
		}
	}
	for _, v := range p.Values {
		if ch := p.choiceOf(v); ch != nil {
			for _, c := range ch.ArgConv {
				read(c, v)
			}
		}
	}
	for _, o := range p.Outputs {
		read(o.Conv, o.Output.Value)
	}
	for _, c := range p.Carry {
		read(c.Conv, c.Next)
	}
	stage := func(v *ir.Value) int {
		if v == nil { // a conversion nothing reads
			return -1
		}
		return p.Pipe.Stages.Stage(v)
	}
	return func(c *Conversion) int {
		st := stage(reader[c.ID])
		if st < 0 {
			if st = stage(c.Value); st < 0 {
				return 0
			}
		}
		return p.Pipe.Schedule.StageRank[st]
	}
}

// busiest sums, per pipeline rank, the bytes of the steps keep selects and
// returns the largest sum and its rank (the lowest rank among equals).
func busiest(steps []noteStep, keep func(noteStep) bool) (float64, int) {
	per := map[int]float64{}
	for _, s := range steps {
		if keep(s) {
			per[s.rank] += s.bytes
		}
	}
	best, rank := 0.0, 0
	for r, b := range per {
		if b > best || (b == best && r < rank) {
			best, rank = b, r
		}
	}
	return best, rank
}

// A gradient's reduce-scatter (ZeRO ≥ 1 stores the reduced gradient
// split) and a ZeRO-3 parameter's gathers: for the forward (cause "to
// W.gathered") and again for a backward ("regather").
func isGradScatter(s noteStep) bool {
	return s.kind == sbp.ReduceScatter && strings.HasPrefix(s.cause, "to ") && strings.HasSuffix(s.cause, ".grad")
}
func isForwardGather(s noteStep) bool {
	return s.kind == sbp.AllGather && strings.HasPrefix(s.cause, "to ") && strings.HasSuffix(s.cause, ".gathered")
}
func isRegather(s noteStep) bool { return s.kind == sbp.AllGather && s.cause == "regather" }

// perMicroFigures says what ZeRO ≥ 2 sends per step because it reduces
// (and ZeRO-3 gathers for the backward) once per micro-batch: the bytes on
// the rank that sends the most of them, and the M-th part one reduction
// after the last micro-batch would send.
func perMicroFigures(zero, micro int, steps []noteStep, pipelined bool) string {
	repeated := func(s noteStep) bool { return isGradScatter(s) || (zero == 3 && isRegather(s)) }
	_, rank := busiest(steps, repeated)
	grads, _ := busiest(steps, func(s noteStep) bool { return isGradScatter(s) && s.rank == rank })
	if grads == 0 {
		return ""
	}
	who := "per device per step"
	if pipelined {
		who = fmt.Sprintf("per device per step on pipeline rank %d", rank)
	}
	s := fmt.Sprintf("%s of gradient reduce-scatters %s, %d× the %s of one reduce-scatter after the last micro-batch (zero = 1 sends that, holding full gradients until then)",
		HumanBytes(grads), who, micro, HumanBytes(grads/float64(micro)))
	if zero == 3 {
		if again, _ := busiest(steps, func(s noteStep) bool { return isRegather(s) && s.rank == rank }); again > 0 {
			s += fmt.Sprintf(", and %s of the backward's gathers, %d× the %s of gathering once for all of them", HumanBytes(again), micro, HumanBytes(again/float64(micro)))
		}
		if !pipelined {
			if fwd, _ := busiest(steps, func(s noteStep) bool { return isForwardGather(s) && s.rank == rank }); fwd > 0 {
				s += fmt.Sprintf(", and %s of the forward's gathers (each micro-batch gathers the parameters again, so no full parameter is kept across micro-batches), %d× the %s of gathering once",
					HumanBytes(fwd), micro, HumanBytes(fwd/float64(micro)))
			}
		}
	}
	return s
}

// accumulateNote: from ZeRO-2 on, a gradient is reduce-scattered as soon
// as a backward completes it, so with gradient accumulation once per
// micro-batch, M times what one reduction after the last micro-batch
// would send (ZeRO-1 does that, keeping the full gradients instead);
// ZeRO-3 also gathers the parameters again in every micro-batch's
// backward.
func accumulateNote(zero, micro int, steps []noteStep) string {
	if zero < 2 || micro < 2 {
		return ""
	}
	f := perMicroFigures(zero, micro, steps, false)
	if f == "" {
		return ""
	}
	what := "gradients are reduce-scattered"
	if zero == 3 {
		what += ", the parameters gathered for the forward and those a backward reads gathered again,"
	}
	note := fmt.Sprintf("ZeRO-%d with accumulate = %d: %s once per micro-batch: %s", zero, micro, what, f)
	if zero == 3 {
		note += " (the forward's gathers are made once and kept for all the micro-batches)"
	}
	return note
}

// zeroPipelineNote is the pipeline section's note on ZeRO ≥ 2: a pipeline
// runs every micro-batch's backward separately, so the reductions (and
// ZeRO-3's backward gathers) happen once per micro-batch.
func zeroPipelineNote(p *Plan, micro int) string {
	z := p.Graph.Train.Zero
	if z < 2 || micro < 2 {
		return ""
	}
	what := "gradients are reduce-scattered once per micro-batch"
	if z == 3 {
		what += " and every parameter a backward reads is all-gathered again in every micro-batch's backward (the forward's gather is made once and kept for the step)"
	}
	note := fmt.Sprintf("ZeRO-%d on a pipeline: %s, %d times a step instead of once", z, what, micro)
	if f := perMicroFigures(z, micro, planSteps(p), true); f != "" {
		note += ": " + f
	}
	return note + " — DeepSpeed refuses ZeRO ≥ 2 with pipelines for this reason; the collectives above list each"
}

// regatherNote puts ZeRO-3's traffic next to plain data parallelism's
// (one all-reduce of the gradients after the last micro-batch: twice the
// bytes of one reduce-scatter of them) and explains a figure below the
// paper's: a parameter whose backward does not read it (the first layer's
// weight when its input needs no gradient, a bias) is gathered for the
// forward only.
func regatherNote(zero, micro int, steps []noteStep) string {
	if zero != 3 {
		return ""
	}
	gathered, again := map[string]bool{}, map[string]bool{}
	for _, s := range steps {
		if isForwardGather(s) {
			gathered[s.value] = true
		}
		if isRegather(s) {
			again[s.value] = true
		}
	}
	var once []string
	for name := range gathered {
		if !again[name] {
			once = append(once, name)
		}
	}
	if len(once) == 0 {
		return ""
	}
	sort.Strings(once)
	var sent, scattered float64
	for _, s := range steps {
		if s.kind == sbp.AllGather || s.kind == sbp.ReduceScatter {
			sent += s.bytes
		}
		if isGradScatter(s) {
			scattered += s.bytes
		}
	}
	micro = max(micro, 1)
	dp := 2 * scattered / float64(micro)
	paper := "the paper's 1.5× gathers every parameter again for the backward"
	if micro > 1 {
		paper = fmt.Sprintf("with %d micro-batches the paper's accounting, every parameter gathered for each forward and again for each backward and every gradient reduce-scattered each time, gives 3·%d/2 = %.1f×", micro, micro, 1.5*float64(micro))
	}
	return fmt.Sprintf("ZeRO-3 sends %s of gathers and reduce-scatters per device, %.2f× the %s a plain data-parallel all-reduce of these gradients would send (%s): %s %s gathered for the forward only, since the backward does not read %s",
		HumanBytes(sent), sent/dp, HumanBytes(dp), paper, strings.Join(once, ", "), isAre(len(once)), itThem(len(once)))
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

func itThem(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// slowLinkNote warns when a model-parallel axis (any axis but the
// data-parallel one; a pipeline's axis is not among the stage mesh's)
// has the slowest link of the mesh and carries collectives every step
// (or run, in a program without training):
// tensor parallelism's reductions sit on the critical path of every
// layer, so they belong on the fastest link.
func slowLinkNote(p *Plan, r *Report, steps []noteStep) string {
	t := p.Graph.Train
	data, per := -1, "per run"
	if t != nil {
		data, per = t.DataAxis, "per step"
	}
	if t == nil || t.Zero == 0 {
		// DataAxis is set only with zero or data_axis; otherwise (and
		// in a program without training) infer it as the checker would.
		ax, err := train.DataAxis(p.Graph, "", 0)
		if err != nil {
			return ""
		}
		data = ax
	}
	axes := r.Mesh.Axes
	if data < 0 || data >= len(axes) || len(axes) < 2 {
		return ""
	}
	slow := 0
	for i, a := range axes {
		if a.GBPerSec < axes[slow].GBPerSec {
			slow = i
		}
	}
	if slow == data || axes[slow].GBPerSec >= axes[data].GBPerSec {
		return ""
	}
	onSlow := func(s noteStep) bool { return s.axis == slow }
	sent, rank := busiest(steps, onSlow)
	if sent == 0 {
		return ""
	}
	kinds := map[sbp.Collective]int{}
	for _, s := range steps {
		if onSlow(s) && s.rank == rank {
			kinds[s.kind]++
		}
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%d %s", n, k))
	}
	slices.Sort(ks)
	who := "per device " + per
	if p.Pipe != nil {
		who += fmt.Sprintf(" on pipeline rank %d", rank)
	}
	return fmt.Sprintf("tensor parallelism over the slowest link: %s sends %s %s (%s) over its %g GB/s link; %s (data parallel) has %g GB/s — put %s on the fast link (Megatron keeps it inside a node)",
		axes[slow].Name, HumanBytes(sent), who, strings.Join(ks, ", "), axes[slow].GBPerSec, axes[data].Name, axes[data].GBPerSec, axes[slow].Name)
}
