package planner

import (
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/pipeline"
)

// Composed memory: a proxy rank's device memory profile per action, and
// its replay in a candidate's schedule order (compose.go).

// memProfile is a rank's device memory by phase: base, held before its
// first action, and the largest held then (pre); per action of its stage,
// what it leaves held (delta) and its peak above what it found (top);
// the same for the work after the actions (the optimizer step).
type memProfile struct {
	base, pre int64
	acts      map[[2]int]memStep // (micro, kind)
	post      memStep
}

type memStep struct{ delta, top int64 }

// step is the profile of an action; a B (schedules that do not split
// the backward) is the ZB-1P proxy's I then W.
func (m *memProfile) step(micro int, k pipeline.Kind) memStep {
	if k != pipeline.B {
		return m.acts[[2]int{micro, int(k)}]
	}
	i, w := m.step(micro, pipeline.I), m.step(micro, pipeline.W)
	return memStep{delta: i.delta + w.delta, top: max(i.top, i.delta+w.top)}
}

// profile reads device d's memory profile from its replay (a proxy rank
// holds one stage, so its actions are that stage's).
func profile(lp *lower.Plan, d int) *memProfile {
	prog := lp.Exec.ProgramOf(d)
	top, after := lp.Exec.Held(d)
	m := &memProfile{acts: map[[2]int]memStep{}}
	held := func(i int) int64 { // before instruction i
		if i == 0 {
			return 0
		}
		return after[i-1]
	}
	start := -1 // first instruction of the current action or phase
	var cur *pipeline.Action
	flush := func(end int) { // [start, end) was one action (cur) or the pre/post phase
		if start < 0 || end <= start {
			return
		}
		s := memStep{delta: after[end-1] - held(start)}
		for i := start; i < end; i++ {
			s.top = max(s.top, top[i]-held(start))
		}
		switch {
		case cur != nil:
			k := [2]int{cur.Micro, int(cur.Kind)}
			e := m.acts[k]
			m.acts[k] = memStep{delta: e.delta + s.delta, top: max(e.top, e.delta+s.top)}
		case len(m.acts) == 0:
			m.base, m.pre = after[end-1], held(start)+s.top
		default:
			m.post = s
		}
	}
	for i := range prog.Instrs {
		a := prog.Instrs[i].Act
		if i == 0 || (a == nil) != (cur == nil) || a != nil && *a != *cur {
			flush(i)
			start, cur = i, a
		}
	}
	flush(len(prog.Instrs))
	return m
}

// rankMemory replays a pipeline rank's memory: its units' profiles, each
// unit's actions in the candidate's schedule order, then their optimizer
// steps; the peak is the most held at any step, counting every unit's
// held bytes and the working memory of the one that runs.
type rankMemory struct {
	param, optim, grad int64
}

func (m *rankMemory) addUnit(px *proxy, pr int) {
	m.param += px.param[pr]
	m.optim += px.optim[pr]
	m.grad += px.grad[pr]
}

// rankPeak is rank r's peak: units[st] are the proxy ranks of stage st's
// units.
func rankPeak(px *proxy, sched *pipeline.Schedule, r int, units [][]int) int64 {
	var held, pre, peak int64
	pm := px.microFor(sched.Micro)
	for _, st := range sched.StagesOf(r) {
		for _, pr := range units[st] {
			held += px.mem[pr].base
			pre = max(pre, px.mem[pr].pre-px.mem[pr].base)
		}
	}
	peak = held + pre
	for _, a := range sched.Actions[r] {
		if !a.Kind.IsCompute() {
			continue
		}
		us := units[a.Stage]
		for i := range us {
			pr := us[i]
			if a.Kind != pipeline.F {
				pr = us[len(us)-1-i] // a backward runs through the units in reverse
			}
			s := px.mem[pr].step(pm(a.Micro), a.Kind)
			peak = max(peak, held+s.top)
			held += s.delta
		}
	}
	for _, st := range sched.StagesOf(r) {
		for _, pr := range units[st] {
			s := px.mem[pr].post
			peak = max(peak, held+s.top)
			held += s.delta
		}
	}
	return peak
}
