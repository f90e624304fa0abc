package lower

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/pipeline"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// The pipeline pass turns the spmd pass's one program (for the mesh
// without its pipeline axis) into one program per pipeline coordinate:
//
//  1. every value gets a stage (stage.go) and every instruction the
//     schedule action of its value: forward or backward of a stage on a
//     micro-batch (the backward split into input- and weight-gradient
//     work for the zero-bubble schedules); values before the first
//     micro-batch and after the last have no action;
//  2. rank r's program is its stages' instructions in the order of the
//     schedule's actions for r, after the values that precede the
//     micro-batches and before the optimizer step; an instruction of no
//     stage (a source, a constant) is emitted where it is first needed, on
//     every rank that needs it;
//  3. a value one rank computes and another reads travels by a tagged
//     send and a receive right before its first use: inside an action the
//     sends follow the action's mark (as a schedule's SEND follows its F
//     or B), outside the actions they follow the value at once —
//     activations forward, their gradients backward, a parameter several
//     stages read, and in the step the pieces of a global reduction (the
//     partial sums meet on the last stage);
//  4. the pipeline axis is put back into every placement (as B: a stage's
//     ranks each hold their value whole along it), group and peer.
//
// The schedule is deadlock-free (the pipeline package simulates it); the
// instructions outside the actions run in program order on every rank,
// which a cross-rank dry run (plan.Verify) confirms.

// PipePlan is the pipeline pass's result.
type PipePlan struct {
	Axis      int // the pipeline axis of Exec.Mesh
	Schedule  *pipeline.Schedule
	Stages    *stageOf
	StageTime []float64 // modelled seconds per micro-batch (forward and backward) per stage, on one of its devices
	Transfers []Transfer
}

// Transfer is one value sent between pipeline ranks each step.
type Transfer struct {
	Label    string
	Pos      ir.Pos
	Where    string // Pos with the call chain
	From, To int    // pipeline coordinates
	Micro    int    // -1: outside the micro-batches
	Kind     string
	Bytes    int64 // per device
	Tag      int
	Slot     int
}

// pipeBuild is the pass's working state.
type pipeBuild struct {
	p      *Plan
	src    *plan.Program
	sched  *pipeline.Schedule
	st     *stageOf
	stage  []int // per source instruction: stage, -1 none
	act    []*pipeline.Action
	pre    []bool // before the first micro-batch
	prod   []int  // slot → instruction that writes it
	groups map[pipeline.Action][]int
	xfer   map[[3]int]*Transfer // (slot, from, to)
	sends  map[int][]*Transfer  // producing instruction → its sends
	acts   map[pipeline.Action]*pipeline.Action
}

func buildPipeline(p *Plan) error {
	g := p.Graph
	if g.Pipeline == nil || p.Opts.Mesh != nil {
		return nil // no pipeline, or the single-device reference
	}
	if g.Train == nil || g.Train.Pipe == nil {
		return &ir.Error{Pos: g.Pipeline.Pos, Msg: "the mesh has a pipeline axis but the program has no train block (stages are cut from its body)"}
	}
	pipe := g.Train.Pipe
	sched, err := pipeline.Generate(pipe.Schedule, g.Pipeline.Size(), len(pipe.Micro), pipe.V)
	if err != nil {
		return &ir.Error{Pos: pipe.Pos, Msg: err.Error()}
	}
	link := mesh.DefaultLink
	work := newUnitWork(g)
	st, err := assignStages(g, sched.Stages, work.costs(func(b float64) float64 { return link.Alpha + b*link.Beta }))
	if err != nil {
		return err
	}
	b := &pipeBuild{p: p, src: p.Exec.Programs[0], sched: sched, st: st, groups: map[pipeline.Action][]int{},
		xfer: map[[3]int]*Transfer{}, sends: map[int][]*Transfer{}, acts: map[pipeline.Action]*pipeline.Action{}}
	b.classify()
	b.findTransfers()
	if n := len(b.xfer); n > plan.MaxTag {
		return &ir.Error{Pos: pipe.Pos, Msg: fmt.Sprintf("this pipeline sends %d values between stages per step (%d micro-batches); tags allow %d: use fewer micro-batches or fewer values crossing a cut", n, len(pipe.Micro), plan.MaxTag)}
	}
	full := g.Pipeline.Full
	ex := &plan.Plan{Mesh: full, Sources: p.Exec.Sources, Outputs: p.Exec.Outputs, Carry: p.Exec.Carry,
		Pipe: &plan.Pipe{Axis: g.Pipeline.Axis, Schedule: sched.String()}}
	// each rank's program reads the pass's state and writes only its own:
	// the ranks are emitted in parallel
	ex.Programs = make([]*plan.Program, sched.Ranks)
	if err := inParallel(len(ex.Programs), func(r int) (err error) {
		ex.Programs[r], err = b.program(r)
		return err
	}); err != nil {
		return err
	}
	if err := b.homes(ex); err != nil {
		return err
	}
	widenPlan(ex, p.Exec.Groups, g.Pipeline.Axis)
	inParallel(len(ex.Programs), func(r int) error {
		widenProgram(ex.Programs[r], g.Pipeline.Axis)
		freeAfterLastUse(ex.Programs[r])
		return nil
	})
	ex.RankProgram = make([]int, full.Size())
	for r := range ex.RankProgram {
		ex.RankProgram[r] = full.Coord(r)[g.Pipeline.Axis]
	}
	p.Exec = ex
	p.Pipe = &PipePlan{Axis: g.Pipeline.Axis, Schedule: sched, Stages: st, StageTime: b.stageTimes(work)}
	for _, t := range b.xfer {
		p.Pipe.Transfers = append(p.Pipe.Transfers, *t)
	}
	slices.SortFunc(p.Pipe.Transfers, func(x, y Transfer) int { return x.Tag - y.Tag })
	pipelineHostPeaks(p)
	if p.Opts.Verify {
		return ex.Verify()
	}
	return nil
}

// classify gives each instruction its stage and action.
func (b *pipeBuild) classify() {
	n := len(b.src.Instrs)
	b.stage, b.act, b.pre = make([]int, n), make([]*pipeline.Action, n), make([]bool, n)
	b.prod = make([]int, b.src.NumSlots())
	for i := range b.prod {
		b.prod[i] = -1
	}
	first := b.p.Graph.Train.Pipe.Micro[0].Start
	for i := range b.src.Instrs {
		in := &b.src.Instrs[i] // not a copy of the whole instruction per iteration
		v := b.p.InstrValue[i]
		b.stage[i] = b.st.Stage(v)
		if in.Out >= 0 {
			b.prod[in.Out] = i
		}
		b.pre[i] = v.ID < first
		if b.stage[i] < 0 {
			continue
		}
		var kind pipeline.Kind
		switch b.st.phaseOf(v.ID) {
		case 'F':
			kind = pipeline.F
		case 'B':
			kind = pipeline.B
		default:
			continue
		}
		b.act[i] = b.action(pipeline.Compute(b.stage[i], kind, b.st.microOf(v.ID)))
	}
	if b.splitsBackward() {
		b.splitIW()
	}
	for i, a := range b.act {
		if a != nil {
			k := *a
			b.groups[k] = append(b.groups[k], i)
		}
	}
}

// action is the one copy of a that the instructions point at (nothing
// writes through an instruction's Act): one per action, not per
// instruction.
func (b *pipeBuild) action(a pipeline.Action) *pipeline.Action {
	p, ok := b.acts[a]
	if !ok {
		p = &a
		b.acts[a] = p
	}
	return p
}

func (b *pipeBuild) splitsBackward() bool {
	for _, acts := range b.sched.Actions {
		for _, a := range acts {
			if a.Kind == pipeline.I {
				return true
			}
		}
	}
	return false
}

// splitIW divides each backward action into I, the instructions the
// gradient sent to the previous stage needs, and W, the rest (the weight
// gradients, which nobody downstream waits for).
func (b *pipeBuild) splitIW() {
	readers := b.readerStages()
	needI := make([]bool, len(b.act))
	for i := len(b.act) - 1; i >= 0; i-- {
		a := b.act[i]
		if a == nil || a.Kind != pipeline.B {
			continue
		}
		if out := b.src.Instrs[i].Out; out >= 0 && readsElsewhere(readers[out], b.stage[i]) {
			needI[i] = true
		}
		if !needI[i] {
			continue
		}
		for _, s := range b.src.Instrs[i].Args {
			if j := b.prod[s]; j >= 0 && b.act[j] != nil && *b.act[j] == *a {
				needI[j] = true
			}
		}
	}
	for i, a := range b.act {
		if a != nil && a.Kind == pipeline.B {
			k := pipeline.W
			if needI[i] {
				k = pipeline.I
			}
			b.act[i] = b.action(pipeline.Compute(a.Stage, k, a.Micro))
		}
	}
}

// readerStages lists, per slot, the stages of the instructions that read
// it.
func (b *pipeBuild) readerStages() [][]int {
	out := make([][]int, b.src.NumSlots())
	for j := range b.src.Instrs {
		in := &b.src.Instrs[j]
		if b.stage[j] < 0 {
			continue
		}
		for _, a := range in.Args {
			if !slices.Contains(out[a], b.stage[j]) {
				out[a] = append(out[a], b.stage[j])
			}
		}
	}
	return out
}

// readsElsewhere reports whether a stage other than st is among readers.
func readsElsewhere(readers []int, st int) bool {
	for _, r := range readers {
		if r != st {
			return true
		}
	}
	return false
}

// rank is the pipeline coordinate of instruction i (-1: any).
func (b *pipeBuild) rank(i int) int {
	if b.stage[i] < 0 {
		return -1
	}
	return b.sched.StageRank[b.stage[i]]
}

// findTransfers lists every value one rank computes and another reads, in
// program order, numbering their tags.
func (b *pipeBuild) findTransfers() {
	var order []*Transfer
	for i := range b.src.Instrs {
		in := &b.src.Instrs[i]
		to := b.rank(i)
		if to < 0 {
			continue
		}
		for _, s := range in.Args {
			j := b.prod[s]
			if j < 0 || b.rank(j) < 0 || b.rank(j) == to {
				continue
			}
			key := [3]int{s, b.rank(j), to}
			if b.xfer[key] != nil {
				continue
			}
			t := b.transfer(j, s, to)
			b.xfer[key] = t
			b.sends[j] = append(b.sends[j], t)
			order = append(order, t)
		}
	}
	for k, t := range order {
		t.Tag = 1 + k
	}
}

func (b *pipeBuild) transfer(j, slot, to int) *Transfer {
	in := &b.src.Instrs[j]
	v := b.p.InstrValue[j]
	kind := "step"
	switch {
	case b.act[j] != nil && b.act[j].Kind == pipeline.F:
		kind = "activation"
	case b.act[j] != nil:
		kind = "gradient"
	case b.pre[j]:
		kind = "parameter"
	}
	local := sbp.Layout(b.p.Mesh, in.Shape, in.Placement, 0)
	bytes := int64(in.DType.Size())
	for _, d := range local.Len {
		bytes *= int64(d)
	}
	return &Transfer{Label: in.Label, Pos: in.Pos, Where: in.Where, From: b.rank(j), To: to, Micro: b.st.microOf(v.ID),
		Kind: kind, Bytes: bytes, Slot: slot}
}

// stageTimes is the modelled time of each stage's units per micro-batch
// on one of its devices.
func (b *pipeBuild) stageTimes(work *unitWork) []float64 {
	out := make([]float64, b.sched.Stages)
	cost := work.costs(func(float64) float64 { return 0 })
	for u, s := range b.st.UnitStage {
		c, _ := cost(u)
		out[s] += c / float64(b.p.Mesh.Size()) // the stage's devices share its work
	}
	return out
}

// inParallel runs f(0) … f(n-1) on up to GOMAXPROCS goroutines and
// returns the error of the lowest i that failed, as a loop would. A panic
// in f is raised again in the caller's goroutine (where runPass turns a
// pass's panic into an internal error), not left to crash the process.
func inParallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	panics := make([]any, n)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	run := func(i int) {
		defer func() { panics[i] = recover() }()
		errs[i] = f(i)
	}
	for w := 0; w < min(n, runtime.GOMAXPROCS(0)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				run(i)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if panics[i] != nil {
			panic(panics[i])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// inBackground starts f(0) … f(n-1) (inParallel) and returns the function
// that waits for them, raising a panic of theirs in its caller.
func inBackground(n int, f func(i int)) (wait func()) {
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		inParallel(n, func(i int) error { f(i); return nil })
	}()
	return func() {
		if r := <-done; r != nil {
			panic(r)
		}
	}
}
