package pipeline

import (
	"fmt"
	"strings"
)

// ScheduleError is a schedule that breaks a rule at one cell of the step ×
// rank grid. Step may equal the rank's length: something is missing at the
// end of that rank's list.
type ScheduleError struct {
	Rank, Step int
	Problem    string
	Grid       string // the schedule's grid with the bad cell in brackets
}

func (e *ScheduleError) Error() string {
	return fmt.Sprintf("%s (rank %d, step %d)\n%s", e.Problem, e.Rank, e.Step, e.Grid)
}

// progress records, per micro-batch of a stage, which compute actions have
// been seen so far in rank order.
type progress struct{ f, i, w, b bool }

// stageState is what Validate knows of one stage at a point of its rank's
// list.
type stageState struct {
	micro   []progress
	weights int  // micro-batches whose weight gradient is done (B or W)
	reduced bool // REDUCE_GRAD has run
	sharded bool // parameters not gathered; starts true only if the stage has an UNSHARD
}

// Validate checks the compute actions and data-parallel hooks of s (see
// the package comment for the rules). Of the communication actions it
// checks only that they cross a stage boundary between two ranks.
func (s *Schedule) Validate() error {
	if err := s.checkShape(); err != nil {
		return err
	}
	states := make([]stageState, s.Stages)
	for st := range states {
		states[st].micro = make([]progress, s.Micro)
	}
	for _, acts := range s.Actions {
		for _, a := range acts {
			if a.Kind == Unshard && a.Stage >= 0 && a.Stage < s.Stages {
				states[a.Stage].sharded = true
			}
		}
	}
	for r, acts := range s.Actions {
		for step, a := range acts {
			if problem := s.checkAction(r, a, states); problem != "" {
				return s.errorAt(r, step, problem)
			}
		}
	}
	return s.checkComplete(states)
}

func (s *Schedule) checkShape() error {
	if s.Ranks < 1 || s.Stages < 1 || s.Micro < 1 {
		return fmt.Errorf("schedule %q: need ranks, stages and micro-batches ≥ 1 (got %d, %d, %d)", s.Name, s.Ranks, s.Stages, s.Micro)
	}
	if len(s.Actions) != s.Ranks {
		return fmt.Errorf("schedule %q: %d ranks but %d action lists", s.Name, s.Ranks, len(s.Actions))
	}
	if len(s.StageRank) != s.Stages {
		return fmt.Errorf("schedule %q: %d stages but stage-rank has %d entries", s.Name, s.Stages, len(s.StageRank))
	}
	for st, r := range s.StageRank {
		if r < 0 || r >= s.Ranks {
			return fmt.Errorf("schedule %q: stage %d placed on rank %d, outside 0..%d", s.Name, st, r, s.Ranks-1)
		}
	}
	return nil
}

// checkAction applies the rules to one action and records it.
func (s *Schedule) checkAction(r int, a Action, states []stageState) string {
	if a.Stage < 0 || a.Stage >= s.Stages {
		return fmt.Sprintf("%s: stage %d outside 0..%d", a, a.Stage, s.Stages-1)
	}
	if a.Kind.IsHook() != (a.Micro == -1) {
		return fmt.Sprintf("%s: micro-batch %d; only hooks, and all of them, have -1", a, a.Micro)
	}
	if !a.Kind.IsHook() && (a.Micro < 0 || a.Micro >= s.Micro) {
		return fmt.Sprintf("%s: micro-batch %d outside 0..%d", a, a.Micro, s.Micro-1)
	}
	if owner := s.StageRank[a.Stage]; owner != r {
		return fmt.Sprintf("%s runs on rank %d, but stage %d is on rank %d: a stage must live on one rank", a, r, a.Stage, owner)
	}
	if a.Kind.IsComm() {
		return s.checkComm(a)
	}
	st := &states[a.Stage]
	if a.Kind.IsHook() {
		return s.checkHook(a, st)
	}
	if st.sharded {
		return fmt.Sprintf("%s while stage %d's parameters are sharded (UNSHARD them first)", a, a.Stage)
	}
	problem := checkCompute(a, &st.micro[a.Micro])
	if problem == "" && (a.Kind == B || a.Kind == W) {
		st.weights++
	}
	return problem
}

// checkComm checks that a SEND or RECV crosses an existing stage boundary
// between two ranks. Whether it is matched and well placed is the
// simulator's question.
func (s *Schedule) checkComm(a Action) string {
	if p := s.peerOf(a); p < 0 {
		return fmt.Sprintf("%s talks to a stage that does not exist", a)
	} else if p == s.StageRank[a.Stage] {
		return fmt.Sprintf("%s between stages on the same rank %d, which share memory", a, p)
	}
	return ""
}

// checkCompute applies the ordering rules of one micro-batch of a stage.
func checkCompute(a Action, p *progress) string {
	switch a.Kind {
	case F:
		if p.f {
			return fmt.Sprintf("second forward %s", a)
		}
		p.f = true
	case I, B:
		if !p.f {
			return fmt.Sprintf("%s before its forward %s", a, Compute(a.Stage, F, a.Micro))
		}
		if p.i || p.b {
			return fmt.Sprintf("second backward %s for micro-batch %d of stage %d", a, a.Micro, a.Stage)
		}
		p.i, p.b = a.Kind == I, a.Kind == B
	case W:
		if p.b {
			return fmt.Sprintf("%s after a full backward %s, which already computed the weight gradient", a, Compute(a.Stage, B, a.Micro))
		}
		if !p.i {
			return fmt.Sprintf("%s before its input backward %s", a, Compute(a.Stage, I, a.Micro))
		}
		if p.w {
			return fmt.Sprintf("second weight backward %s", a)
		}
		p.w = true
	}
	return ""
}

// checkHook applies the rules of the data-parallel hooks: UNSHARD and
// RESHARD alternate, starting sharded; REDUCE_GRAD runs once, after the
// weight gradients of every micro-batch.
func (s *Schedule) checkHook(a Action, st *stageState) string {
	switch a.Kind {
	case Unshard:
		if !st.sharded {
			return fmt.Sprintf("%s while stage %d's parameters are already gathered", a, a.Stage)
		}
		st.sharded = false
	case Reshard:
		if st.sharded {
			return fmt.Sprintf("%s while stage %d's parameters are not gathered", a, a.Stage)
		}
		st.sharded = true
	case ReduceGrad:
		if st.reduced {
			return fmt.Sprintf("second %s", a)
		}
		if st.weights < s.Micro {
			return fmt.Sprintf("%s after the weight gradients of %d of %d micro-batches; it must follow all of them", a, st.weights, s.Micro)
		}
		st.reduced = true
	}
	return ""
}

// checkComplete reports the first stage and micro-batch with missing work,
// marking the end of the owning rank's list.
func (s *Schedule) checkComplete(states []stageState) error {
	for st := range states {
		for m, p := range states[st].micro {
			var problem string
			switch {
			case !p.f:
				problem = fmt.Sprintf("stage %d has no forward %s", st, Compute(st, F, m))
			case !p.i && !p.b:
				problem = fmt.Sprintf("stage %d has no backward (%s or %s) for micro-batch %d", st, Compute(st, B, m), Compute(st, I, m), m)
			case p.i && !p.w:
				problem = fmt.Sprintf("stage %d has %s but no %s", st, Compute(st, I, m), Compute(st, W, m))
			default:
				continue
			}
			r := s.StageRank[st]
			return s.errorAt(r, len(s.Actions[r]), problem)
		}
	}
	return nil
}

func (s *Schedule) errorAt(r, step int, problem string) *ScheduleError {
	return &ScheduleError{Rank: r, Step: step, Problem: fmt.Sprintf("schedule %q: %s", s.Name, problem),
		Grid: s.Grid(r, step)}
}

// gridWindow is how many steps either side of a marked cell Grid shows
// when the schedule is too long to show whole.
const gridWindow = 12

// Grid draws the schedule as rows of steps and columns of ranks, with the
// cell (markRank, markStep) in brackets; pass markRank -1 for no mark. A
// mark past the end of a rank's list shows as "[?]". Long schedules are
// cut to a window around the mark.
func (s *Schedule) Grid(markRank, markStep int) string {
	steps := s.Steps()
	if markRank >= 0 {
		steps = max(steps, markStep+1)
	}
	cell := func(r, step int) string {
		text := "."
		if r < len(s.Actions) && step < len(s.Actions[r]) {
			text = s.Actions[r][step].String()
		}
		if r == markRank && step == markStep {
			if text == "." {
				text = "?"
			}
			text = "[" + text + "]"
		}
		return text
	}
	width := len("rank 00")
	for r := range s.Actions {
		for step := range steps {
			width = max(width, len(cell(r, step)))
		}
	}
	lo, hi := 0, steps
	if markRank >= 0 && steps > 2*gridWindow+1 {
		lo, hi = max(0, markStep-gridWindow), min(steps, markStep+gridWindow+1)
	}
	var b strings.Builder
	row := func(head string, cellOf func(r int) string) {
		line := head
		for r := range s.Actions {
			line += fmt.Sprintf(" %-*s", width, cellOf(r))
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	row("         ", func(r int) string { return fmt.Sprintf("rank %d", r) })
	if lo > 0 {
		b.WriteString("...\n")
	}
	for step := lo; step < hi; step++ {
		row(fmt.Sprintf("step %-4d", step), func(r int) string { return cell(r, step) })
	}
	if hi < steps {
		b.WriteString("...\n")
	}
	return b.String()
}
