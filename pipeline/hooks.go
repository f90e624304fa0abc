package pipeline

// WithReduceGrad returns a copy of s with a REDUCE_GRAD for every stage
// right after the action that completes its last weight gradient (the
// stage's last B or W on its rank), so that the data-parallel reduction of
// one stage can overlap the pipeline work still left on the rank's other
// stages. Existing REDUCE_GRADs are dropped and placed afresh.
func (s *Schedule) WithReduceGrad() *Schedule {
	base := s.filter(func(k Kind) bool { return k != ReduceGrad })
	last := lastIndex(base, func(a Action) bool { return a.Kind == B || a.Kind == W })
	out := base.cloneHeader()
	for r, acts := range base.Actions {
		for i, a := range acts {
			out.Actions[r] = append(out.Actions[r], a)
			if validStage(s, a.Stage) && last[a.Stage] == [2]int{r, i} {
				out.Actions[r] = append(out.Actions[r], Hook(a.Stage, ReduceGrad))
			}
		}
	}
	return out
}

// WithUnshardReshard returns a copy of s for ZeRO-3 style sharded
// parameters: an UNSHARD right before each stage's first compute action
// and a RESHARD right after its last, so a rank holding several stages
// (interleaved, ZB-V) keeps only the stages it is working on gathered at
// the ends of the step. Existing UNSHARDs and RESHARDs are dropped and
// placed afresh. Prefetching (issuing the gather earlier so it overlaps
// compute) is the runtime's business; here the hooks block.
func (s *Schedule) WithUnshardReshard() *Schedule {
	base := s.filter(func(k Kind) bool { return k != Unshard && k != Reshard })
	isCompute := func(a Action) bool { return a.Kind.IsCompute() }
	first := firstIndex(base, isCompute)
	last := lastIndex(base, isCompute)
	out := base.cloneHeader()
	for r, acts := range base.Actions {
		for i, a := range acts {
			at := [2]int{r, i}
			if !validStage(s, a.Stage) {
				out.Actions[r] = append(out.Actions[r], a)
				continue
			}
			if isCompute(a) && first[a.Stage] == at {
				out.Actions[r] = append(out.Actions[r], Hook(a.Stage, Unshard))
			}
			out.Actions[r] = append(out.Actions[r], a)
			if isCompute(a) && last[a.Stage] == at {
				out.Actions[r] = append(out.Actions[r], Hook(a.Stage, Reshard))
			}
		}
	}
	return out
}

// firstIndex gives, per stage, the (rank, index) of its first action that
// matches, or (-1, -1).
func firstIndex(s *Schedule, match func(Action) bool) [][2]int {
	pos := make([][2]int, s.Stages)
	for st := range pos {
		pos[st] = [2]int{-1, -1}
	}
	for r, acts := range s.Actions {
		for i, a := range acts {
			if match(a) && validStage(s, a.Stage) && pos[a.Stage][0] < 0 {
				pos[a.Stage] = [2]int{r, i}
			}
		}
	}
	return pos
}

// lastIndex gives, per stage, the (rank, index) of its last action that
// matches, or (-1, -1).
func lastIndex(s *Schedule, match func(Action) bool) [][2]int {
	pos := make([][2]int, s.Stages)
	for st := range pos {
		pos[st] = [2]int{-1, -1}
	}
	for r, acts := range s.Actions {
		for i, a := range acts {
			if match(a) && validStage(s, a.Stage) {
				pos[a.Stage] = [2]int{r, i}
			}
		}
	}
	return pos
}

func validStage(s *Schedule, st int) bool { return st >= 0 && st < s.Stages }
