package rt

import (
	"time"

	"github.com/meshrun/meshrun/pipeline"
	"github.com/meshrun/meshrun/plan"
)

// ActionSpan is when a rank ran one pipeline action. On the simulated
// clock, which charges an action's whole cost at its mark, it is the
// mark's own interval; on the wall clock it runs from the action's first
// instruction that is not a send or receive to its mark (a receive the
// action waits for midway counts as busy).
type ActionSpan struct {
	Act        pipeline.Action
	Start, End time.Duration
}

// pipeStats is a pipelined execution's timeline of actions and its
// accounting of activations: the buffers a forward action made (or
// received) that are still alive, per stage and micro-batch.
type pipeStats struct {
	spans     []ActionSpan
	simulated bool // times come from a SimClock
	started   bool
	start     time.Duration
	// first is the instruction that started the current action; at[k]
	// is span k's first and last instruction (device timing moves each
	// span onto those instructions' device spans)
	first int
	at    [][2]int
	owner map[Buffer]pipeline.Action // activation → the forward that made it
	slots map[Buffer]int             // activation → slots holding it
	live  map[pipeline.Action]int    // forward → its live activations
	bytes map[int]int64              // stage → live activation bytes
	// PeakLive and PeakBytes are, per stage, the most micro-batches with
	// live activations and the most activation bytes at any moment;
	// PeakKept the most bytes kept between actions (at their marks, when
	// an action's temporaries are gone).
	PeakLive  map[int]int
	PeakBytes map[int]int64
	PeakKept  map[int]int64
}

func newPipeStats(simulated bool) *pipeStats {
	return &pipeStats{simulated: simulated, owner: map[Buffer]pipeline.Action{}, slots: map[Buffer]int{}, live: map[pipeline.Action]int{},
		bytes: map[int]int64{}, PeakLive: map[int]int{}, PeakBytes: map[int]int64{}, PeakKept: map[int]int64{}}
}

// step notes instruction i, in, ran from t0 to t1.
func (p *pipeStats) step(i int, in *plan.Instr, t0, t1 time.Duration) {
	if in.Act == nil {
		return
	}
	if in.Kind != plan.Send && in.Kind != plan.Recv && !p.started {
		p.started, p.start, p.first = true, t0, i
	}
	if in.Kind == plan.Mark {
		for st, b := range p.bytes {
			p.PeakKept[st] = max(p.PeakKept[st], b)
		}
		start := p.start
		if p.simulated {
			start = t0
		}
		p.spans = append(p.spans, ActionSpan{Act: *in.Act, Start: start, End: t1})
		p.at = append(p.at, [2]int{p.first, i})
		p.started = false
	}
}

// made counts a buffer stored in a slot: an activation when a forward
// made it and it is not a scalar (a micro-batch's loss is kept for the
// step's total). It is alive while a slot holds it (a send in flight
// keeps the transport's copy, not an activation).
func (p *pipeStats) made(in *plan.Instr, b Buffer) {
	if _, ok := p.owner[b]; ok {
		p.slots[b]++
		return
	}
	if in.Act == nil || in.Act.Kind != pipeline.F || len(b.Dims()) == 0 {
		return
	}
	p.slots[b] = 1
	a := *in.Act
	p.owner[b] = a
	p.live[a]++
	p.bytes[a.Stage] += b.Bytes()
	p.PeakBytes[a.Stage] = max(p.PeakBytes[a.Stage], p.bytes[a.Stage])
	n := 0
	for f, c := range p.live {
		if f.Stage == a.Stage && c > 0 {
			n++
		}
	}
	p.PeakLive[a.Stage] = max(p.PeakLive[a.Stage], n)
}

// released notes a slot letting go of b; the last one uncounts it.
func (p *pipeStats) released(b Buffer) {
	a, ok := p.owner[b]
	if !ok {
		return
	}
	if p.slots[b]--; p.slots[b] > 0 {
		return
	}
	delete(p.slots, b)
	delete(p.owner, b)
	p.live[a]--
	if p.live[a] == 0 {
		delete(p.live, a)
	}
	p.bytes[a.Stage] -= b.Bytes()
}

// PipelineEvents is a pipelined run's timeline as the pipeline package
// draws and measures it: the actions of one rank per pipeline coordinate
// (the one at coordinate 0 on every other axis; the others run the same
// program), in seconds.
func PipelineEvents(p *plan.Plan, devs []DeviceStats) []pipeline.Event {
	if p.Pipe == nil {
		return nil
	}
	var out []pipeline.Event
	for _, d := range devs {
		if d.Pipe == nil || !p.LeadsStage(d.Device) {
			continue
		}
		c := p.Mesh.Coord(d.Device)
		for _, s := range d.Pipe.Actions {
			out = append(out, pipeline.Event{Rank: c[p.Pipe.Axis], Stage: s.Act.Stage, Micro: s.Act.Micro, Kind: s.Act.Kind,
				Start: s.Start.Seconds(), End: s.End.Seconds()})
		}
	}
	return out
}
