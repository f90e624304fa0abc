package plan

import "slices"

// Held is Peak's replay of rank r's device memory kept per instruction:
// the bytes held once each instruction has allocated its output (top)
// and once it has freed what it frees (after). Package planner composes
// a pipeline rank's memory from its actions' profiles.
func (p *Plan) Held(r int) (top, after []int64) {
	return p.heldIn(r, deviceTier)
}

// HostHeld is Held for rank r's host tier (HostPeak's replay).
func (p *Plan) HostHeld(r int) (top, after []int64) {
	return p.heldIn(r, hostTier)
}

func (p *Plan) heldIn(r int, t tier) (top, after []int64) {
	n := len(p.ProgramOf(r).Instrs)
	top, after = make([]int64, n), make([]int64, n)
	p.walkTier(r, t, func(i int, t, a int64) bool {
		top[i], after[i] = t, a
		return true
	})
	return top, after
}

// TotalHeld is Held over both tiers together (TotalPeak's replay).
func (p *Plan) TotalHeld(r int) (top, after []int64) {
	return p.heldIn(r, bothTiers)
}

// Uniform reports whether no block prog allocates splits unevenly: every
// rank that runs it then holds the same bytes at every instruction, and
// one rank's replay stands for all of them.
func (p *Plan) Uniform(prog *Program) bool {
	return !slices.Contains(p.varyingAxes(prog), true)
}
