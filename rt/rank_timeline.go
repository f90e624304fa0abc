package rt

// A rank's timeline: an event per instruction, the ring steps drawn inside
// its collectives, the bytes its copies between tiers moved.

import (
	"fmt"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
)

// record adds instruction i's event, its span [start, start+dur) with
// sent bytes, to the timeline; a copy between the tiers also records the
// bytes it moved. The event is written in place: passed by value it was
// built and then copied twice on its way into the timeline (88 bytes, at
// every instruction).
func (x *execution) record(in *plan.Instr, i int, start, dur time.Duration, sent int64, out Buffer) {
	n := len(x.events)
	if n < cap(x.events) {
		x.events = x.events[:n+1]
	} else {
		x.events = append(x.events, Event{})
	}
	ev, l := &x.events[n], &x.w.labels[i]
	*ev = Event{Name: l.name, Kind: l.kind, Start: start, Dur: dur, Bytes: sent, Where: l.where}
	switch in.Kind {
	case plan.Offload:
		ev.Copied = out.Bytes()
		x.toHost += ev.Copied
	case plan.Fetch:
		ev.Copied = out.Bytes()
		x.toDevice += ev.Copied
	}
}

// drawRings has the rank's ring groups report their steps to this
// execution's timeline: a message-passing ring as each step ends
// (ringStep); a shared-memory one after the collective (layRing), its
// steps laid over the collective's span as the worker measured it, so
// that the collective reads no clock of its own. Under a simulated clock
// no ring step is drawn.
func (w *Worker) drawRings(x *execution) {
	if w.lateRings == nil {
		w.lateRings = make([]bool, len(w.Groups))
	}
	for gi, g := range w.Groups {
		r, ok := g.(*Ring)
		if !ok {
			continue
		}
		w.lateRings[gi] = r.stepsLater()
		if x.clk == nil && !w.lateRings[gi] {
			r.OnStep = x.ringStep // draw the ring's steps inside each collective
		}
	}
}

// layRing draws the ring steps a shared-memory collective left pending
// over its span [t0, t1], each its share in proportion to its bytes.
func (x *execution) layRing(r *Ring, t0, t1 time.Duration) {
	if x.clk != nil {
		r.laySteps(0, func(string, int, int64, time.Duration, time.Duration) {}) // drawn on no simulated timeline
		return
	}
	r.laySteps(t1-t0, func(phase string, k int, bytes int64, from, to time.Duration) {
		x.events = append(x.events, Event{Name: x.w.ringName(phase, k), Kind: "ring", Start: t0 + from, Dur: to - from, Bytes: bytes})
	})
}

// ringName names step k of a ring phase, formatted once per worker.
func (w *Worker) ringName(phase string, k int) string {
	names := &w.rings[0]
	if phase != "reduce_scatter" {
		names = &w.rings[1]
	}
	for len(*names) <= k {
		*names = append(*names, fmt.Sprintf("%s step %d", phase, len(*names)+1))
	}
	return (*names)[k]
}

// ringStep records one step of a ring collective on the timeline.
func (x *execution) ringStep(phase string, k int, bytes int64, start, end time.Time) {
	x.events = append(x.events, Event{Name: x.w.ringName(phase, k), Kind: "ring", Start: start.Sub(x.start),
		Dur: end.Sub(start), Bytes: bytes})
}

// eventLabel is what a timeline says of an instruction besides its timing:
// formatted once per worker, not once per execution.
type eventLabel struct{ name, kind, where string }

func labelsOf(prog *plan.Program) []eventLabel {
	out := make([]eventLabel, len(prog.Instrs))
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		kind := in.Kind.String()
		if in.Kind.Communicates() {
			kind = "comm"
		}
		out[i] = eventLabel{name: in.Name(), kind: kind, where: ir.FormatPos(in.Pos)}
	}
	return out
}

// event is the timeline entry of one executed instruction.
func (l eventLabel) event(start, dur time.Duration, sent int64) Event {
	return Event{Name: l.name, Kind: l.kind, Start: start, Dur: dur, Bytes: sent, Where: l.where}
}
