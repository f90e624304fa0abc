package lower

import (
	"fmt"
	"math"
	"sort"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
)

// Stages: which pipeline stage computes each value of a training step.
//
// The train block's body is cut into units (statements, iterations of a
// top-level for loop; the checker records their values). Units go to
// stages by the block's `stage = N` marks, or by balancing: a min-max
// dynamic program over contiguous units, a stage's time being the larger
// of its units' modelled forward and backward and the message it sends at
// its cut (see balance). Every stage must get work. Every other value
// follows from those:
//
//	param                 the first stage whose forward uses it
//	in a unit (forward)   the unit's stage
//	other forward         the latest stage among its arguments
//	backward              the stage of the forward value whose backward made it
//	                      (ad records it: a recomputation or a repeated gather
//	                      goes with the backward that needs it); else the
//	                      earliest among its arguments
//	optimizer step        the stage of its largest argument (ties: the latest):
//	                      a parameter's update stays with the parameter, scalars
//	                      of different stages (a global norm's partial sums)
//	                      meet on the last stage, which sends the result back
//
// A value no staged value feeds (inputs, constants, per-step scalars) has
// stage -1: every pipeline rank that needs it computes it itself.

// ModelFLOPS is the cost model's compute rate (an H100-class device in
// bf16), used with the link model to balance stages and to time actions.
const ModelFLOPS = 400e12

// stageOf gives every value of g its stage (-1: wherever needed).
type stageOf struct {
	g      *ir.Graph
	pipe   *ir.PipeTrain
	stages int
	unit   []int32 // value ID → unit index (every micro-batch), -1: none
	// UnitStage is each unit's stage; Auto says the cut was balanced.
	UnitStage []int
	Auto      bool
	// stage is, by value ID, the value's stage (a slice, not a map: the
	// passes ask once per value and instruction).
	stage []int
}

// Stage is v's stage (-1: wherever needed).
func (s *stageOf) Stage(v *ir.Value) int { return s.stage[v.ID] }

func assignStages(g *ir.Graph, stages int, unitCost func(u int) (compute, sent float64)) (*stageOf, error) {
	pipe := g.Train.Pipe
	s := &stageOf{g: g, pipe: pipe, stages: stages, unit: make([]int32, len(g.Values)), stage: make([]int, len(g.Values))}
	for i := range s.unit {
		s.unit[i] = -1
	}
	for _, units := range pipe.Units {
		for u, r := range units {
			for id := r.Start; id < r.End; id++ {
				s.unit[id] = int32(u)
			}
		}
	}
	if err := s.cutUnits(unitCost); err != nil {
		return nil, err
	}
	params := s.paramStages()
	first := pipe.Micro[0].Start
	last := pipe.Micro[len(pipe.Micro)-1].End
	for _, v := range g.Values {
		st := -1
		phase := s.phaseOf(v.ID)
		switch {
		case v.Op == "param":
			if p, ok := params[v]; ok {
				st = p
			}
		case v.IsSource() || len(v.Args) == 0:
		case phase == 'F' && s.hasUnit(v.ID):
			st = s.UnitStage[s.unit[v.ID]]
		case phase == 'B':
			if f, ok := pipe.BackwardOf[v]; ok && s.stage[f.ID] >= 0 {
				st = s.stage[f.ID]
			} else {
				st = s.earliest(v.Args)
			}
		case v.ID >= last || (v.ID >= first && phase == 0):
			st = s.largest(v.Args)
		default:
			st = s.latest(v.Args)
		}
		s.stage[v.ID] = st
	}
	// an optimizer state lives where its update is computed (its first
	// reader that has a stage, which its other arguments decide), also
	// when it reaches that reader through values of no stage: momentum's
	// buf·μ reads only the state and a constant
	waiting := map[int][]*ir.Value{} // unstaged value ID → unstaged states it reads
	for _, v := range g.Values {
		var states []*ir.Value
		for _, a := range v.Args {
			switch {
			case a.Op == "state" && s.stage[a.ID] < 0:
				states = append(states, a)
			case s.stage[a.ID] < 0:
				states = append(states, waiting[a.ID]...)
			}
		}
		if len(states) == 0 || v.Op == "state" {
			continue
		}
		if st := s.stage[v.ID]; st >= 0 {
			for _, a := range states {
				if s.stage[a.ID] < 0 {
					s.stage[a.ID] = st
				}
			}
		} else {
			waiting[v.ID] = states
		}
	}
	return s, nil
}

func (s *stageOf) hasUnit(id int) bool { return id >= 0 && id < len(s.unit) && s.unit[id] >= 0 }

// phaseOf is 'F' or 'B' for a value of a micro-batch's forward or backward,
// 0 elsewhere (before the first micro-batch, between them, in the step).
func (s *stageOf) phaseOf(id int) byte {
	i := s.microOf(id)
	switch {
	case i < 0:
		return 0
	case id < s.pipe.Micro[i].Backward:
		return 'F'
	}
	return 'B'
}

// microOf is the micro-batch a value belongs to, or -1.
func (s *stageOf) microOf(id int) int {
	// the ranges are in value order: the last one starting at or before id
	ms := s.pipe.Micro
	i := sort.Search(len(ms), func(i int) bool { return ms[i].Start > id }) - 1
	if i < 0 || id >= ms[i].End {
		return -1
	}
	return i
}

func (s *stageOf) latest(args []*ir.Value) int {
	st := -1
	for _, a := range args {
		st = max(st, s.stage[a.ID])
	}
	return st
}

func (s *stageOf) earliest(args []*ir.Value) int {
	st := -1
	for _, a := range args {
		if t := s.stage[a.ID]; t >= 0 && (st < 0 || t < st) {
			st = t
		}
	}
	return st
}

// largest is the stage of the biggest staged argument (ties: the
// latest). Scalars from different stages (a global norm's partial sums)
// meet on the last stage, so every stage sends its share there at once
// rather than along a chain.
func (s *stageOf) largest(args []*ir.Value) int {
	st, size, mixed := -1, -1, false
	for _, a := range args {
		t := s.stage[a.ID]
		if t < 0 {
			continue
		}
		mixed = mixed || st >= 0 && t != st
		if n := a.Type.Numel(); n > size || n == size && t > st {
			st, size = t, n
		}
	}
	if mixed && size <= 1 {
		return s.stages - 1
	}
	return st
}

// paramStages puts each param on the first stage whose forward reads it, directly or through the
// values the block builds before its first micro-batch (half-precision
// views, ZeRO-3 gathers).
func (s *stageOf) paramStages() map[*ir.Value]int {
	pre := s.pipe.Micro[0].Start
	out := map[*ir.Value]int{}
	seen := map[*ir.Value]int{}
	var visit func(a *ir.Value, st int)
	visit = func(a *ir.Value, st int) {
		if a.ID >= pre {
			return
		}
		if old, ok := seen[a]; ok && old <= st {
			return
		}
		seen[a] = st
		if a.Op == "param" {
			out[a] = st
			return
		}
		for _, b := range a.Args {
			visit(b, st)
		}
	}
	for u, r := range s.pipe.Units[0] {
		for id := r.Start; id < r.End; id++ {
			for _, a := range s.g.Values[id].Args {
				visit(a, s.UnitStage[u])
			}
		}
	}
	return out
}

// cutUnits gives every unit its stage: from the marks (an unmarked unit
// follows the one before it), or balanced.
func (s *stageOf) cutUnits(cost func(u int) (float64, float64)) error {
	pipe := s.pipe
	n := len(pipe.UnitStage)
	computes := 0 // units with work
	for u := range n {
		if c, _ := cost(u); c > 0 {
			computes++
		}
	}
	marked := false
	for _, m := range pipe.UnitStage {
		marked = marked || m >= 0
	}
	if !marked {
		if computes < s.stages {
			return &ir.Error{Pos: pipe.Pos, Msg: fmt.Sprintf("%d pipeline stages need at least as many units in the train block that compute (statements, loop iterations); it has %d", s.stages, computes)}
		}
		s.Auto = true
		s.UnitStage = balance(n, s.stages, cost)
		return nil
	}
	s.UnitStage = make([]int, n)
	cur := 0
	for u, m := range pipe.UnitStage {
		if m >= s.stages {
			return &ir.Error{Pos: pipe.UnitPos[u], Msg: fmt.Sprintf("stage = %d, but %s on %d pipeline ranks has stages 0 to %d", m, pipe.Schedule, s.stages/max(1, pipe.V), s.stages-1)}
		}
		if m >= 0 {
			if m < cur {
				return &ir.Error{Pos: pipe.UnitPos[u], Msg: fmt.Sprintf("stage = %d after stage %d: stages run forward in order", m, cur)}
			}
			cur = m
		}
		s.UnitStage[u] = cur
	}
	work := make([]bool, s.stages)
	for u, st := range s.UnitStage {
		if c, _ := cost(u); c > 0 {
			work[st] = true
		}
	}
	for st, ok := range work {
		if !ok {
			return &ir.Error{Pos: pipe.Pos, Msg: fmt.Sprintf("the stage = marks give stage %d no work: each of the %d stages needs a unit that computes", st, s.stages)}
		}
	}
	return nil
}

// balance cuts n units with the given costs into k contiguous non-empty
// stages minimising the slowest stage, and among equally slow cuts the one
// whose largest compute is least (a latency-bound link makes every cut
// cost the same message). A stage's time is the larger of its compute and
// the activation it sends at its end: sends are buffered, so a message
// overlaps the stage's next action.
// best[j][i] is the best (slowest, largest compute) for the first i units
// on j stages.
func balance(n, k int, cost func(u int) (float64, float64)) []int {
	comp, sent := make([]float64, n), make([]float64, n)
	for u := range n {
		comp[u], sent[u] = cost(u)
	}
	prefix := make([]float64, n+1)
	for u := range n {
		prefix[u+1] = prefix[u] + comp[u]
	}
	type score struct{ slowest, compute float64 }
	better := func(a, b score) bool {
		const eps = 1e-9
		if a.slowest < b.slowest*(1-eps) {
			return true
		}
		return a.slowest <= b.slowest*(1+eps) && a.compute < b.compute*(1-eps)
	}
	inf := score{math.Inf(1), math.Inf(1)}
	stage := func(i, j int) score { // units [i, j)
		c := prefix[j] - prefix[i]
		if c <= 0 {
			return inf // a stage that computes nothing is no stage (cutUnits made sure one exists)
		}
		t := c
		if j < n {
			t = max(t, sent[j-1])
		}
		return score{t, c}
	}
	best := make([][]score, k+1)
	from := make([][]int, k+1)
	for j := range best {
		best[j] = make([]score, n+1)
		from[j] = make([]int, n+1)
		for i := range best[j] {
			best[j][i] = inf
		}
	}
	best[0][0] = score{}
	for j := 1; j <= k; j++ {
		for i := j; i <= n; i++ {
			for m := j - 1; m < i; m++ {
				prev, st := best[j-1][m], stage(m, i)
				c := score{max(prev.slowest, st.slowest), max(prev.compute, st.compute)}
				if better(c, best[j][i]) {
					best[j][i], from[j][i] = c, m
				}
			}
		}
	}
	out := make([]int, n)
	i := n
	for j := k; j >= 1; j-- {
		m := from[j][i]
		for u := m; u < i; u++ {
			out[u] = j - 1
		}
		i = m
	}
	return out
}

// unitWork is, per unit of micro-batch 0, the FLOPs of its forward and
// of the backward of its values (ad's record), and the bytes a cut after
// it would send: the forward values made up to it that later units read.
// The pass reads it twice (balancing, stage times), so it is computed once.
type unitWork struct {
	flops, crossing []float64
}

func newUnitWork(g *ir.Graph) *unitWork {
	pipe := g.Train.Pipe
	units := pipe.Units[0]
	first := pipe.Micro[0].Start
	lo, hi := units[0].Start, units[len(units)-1].End
	back := map[*ir.Value]float64{}
	for b, f := range pipe.BackwardOf {
		if f.ID >= lo && f.ID < hi { // only micro-batch 0's units are read
			back[f] += ops.FLOPs(b)
		}
	}
	// crossing[c]: bytes made in units ≤ c (or before them in the
	// micro-batch) and read in a unit > c, each value once
	unitOf := func(id int) int {
		for u, r := range units {
			if id < r.End {
				return u
			}
		}
		return len(units)
	}
	// values made from inputs and constants alone have no stage: every
	// rank makes its own, nothing is sent
	data := map[*ir.Value]bool{}
	for _, v := range g.Values[:hi] {
		d := v.Op != "param" && v.Op != "state"
		for _, a := range v.Args {
			d = d && data[a]
		}
		data[v] = d
	}
	lastRead := map[*ir.Value]int{}
	for u, r := range units {
		for id := r.Start; id < r.End; id++ {
			for _, a := range g.Values[id].Args {
				if a.ID >= first && !data[a] {
					lastRead[a] = max(lastRead[a], u)
				}
			}
		}
	}
	w := &unitWork{flops: make([]float64, len(units)), crossing: make([]float64, len(units))}
	for a, last := range lastRead {
		for c := unitOf(a.ID); c < last; c++ {
			w.crossing[c] += float64(a.Type.Bytes())
		}
	}
	for u, r := range units {
		for id := r.Start; id < r.End; id++ {
			v := g.Values[id]
			w.flops[u] += ops.FLOPs(v) + back[v]
		}
	}
	return w
}

// costs models unit u's compute at ModelFLOPS and the time to send, over
// link, what a cut after it sends.
func (w *unitWork) costs(linkTime func(bytes float64) float64) func(u int) (float64, float64) {
	return func(u int) (float64, float64) {
		return w.flops[u] / ModelFLOPS, linkTime(w.crossing[u])
	}
}
