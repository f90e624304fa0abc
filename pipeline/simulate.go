package pipeline

import (
	"fmt"
	"sort"
	"strings"
)

// Cost gives the duration of each kind of action. B defaults to I+W when
// zero. Comm is the time a tensor takes from one rank to another;
// Collective the time a rank spends in a data-parallel hook (UNSHARD,
// RESHARD, REDUCE_GRAD). Fn, when set, overrides everything: it is asked
// for every compute action and hook, and for every SEND (the transfer time
// of the tensor it carries).
type Cost struct {
	F, I, W, B, Comm, Collective float64
	Fn                           func(Action) float64
}

// Of is the time a rank is busy with action a; sends and receives take no
// time of their own (see Transfer).
func (c Cost) Of(a Action) float64 {
	if c.Fn != nil && !a.Kind.IsComm() {
		return c.Fn(a)
	}
	switch a.Kind {
	case F:
		return c.F
	case I:
		return c.I
	case W:
		return c.W
	case B:
		if c.B == 0 {
			return c.I + c.W
		}
		return c.B
	case Unshard, Reshard, ReduceGrad:
		return c.Collective
	}
	return 0
}

// Transfer is the time between a tensor leaving its producer and being
// usable on another rank; a is the SEND that carries it (whether or not
// the schedule spells its SENDs out).
func (c Cost) Transfer(a Action) float64 {
	if c.Fn != nil {
		return c.Fn(a)
	}
	return c.Comm
}

// Event is one action as it ran: on which rank, when. The runtime builds
// the same records from its clock, so the analyses below serve both.
type Event struct {
	Rank  int     `json:"rank"`
	Stage int     `json:"stage"`
	Micro int     `json:"micro"`
	Kind  Kind    `json:"kind"` // written as its name: "F", "SEND_B"
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// Action returns the event's action (without peer).
func (e Event) Action() Action { return Compute(e.Stage, e.Kind, e.Micro) }

func (e Event) String() string {
	return fmt.Sprintf("rank %d %s [%g, %g]", e.Rank, e.Action(), e.Start, e.End)
}

// grad is a pseudo-kind under which the simulator records the end of
// either backward (I or B) of a stage and micro-batch: the previous stage
// needs one of them, whichever the schedule uses.
const grad Kind = 255

type key struct {
	kind         Kind
	stage, micro int
}

// dep is an input of an action: the producer's record, and whether the
// tensor crosses ranks implicitly (adding the transfer time).
type dep struct {
	key      key
	transfer bool
}

// Simulate dry-runs s under costs c (see the package comment) and returns
// the events in order of start time, ties by rank. s must pass Validate. A
// deadlock is reported as a *DeadlockError.
func Simulate(s *Schedule, c Cost) ([]Event, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	sim := simulator{s: s, c: c, comm: s.HasComm(), done: map[key]float64{},
		pc: make([]int, s.Ranks), free: make([]float64, s.Ranks)}
	for sim.step() {
	}
	if err := sim.deadlock(); err != nil {
		return nil, err
	}
	sort.SliceStable(sim.events, func(i, j int) bool {
		a, b := sim.events[i], sim.events[j]
		if a.Start != b.Start {
			return a.Start < b.Start
		}
		return a.Rank < b.Rank
	})
	return sim.events, nil
}

type simulator struct {
	s      *Schedule
	c      Cost
	comm   bool            // the schedule has explicit SEND/RECV actions
	done   map[key]float64 // end time of every executed action
	pc     []int           // per rank, the next action
	free   []float64       // per rank, when its last action ended
	events []Event
}

// step runs every action whose inputs are done; it reports whether any ran.
func (sim *simulator) step() bool {
	ran := false
	for r, acts := range sim.s.Actions {
		for sim.pc[r] < len(acts) {
			a := acts[sim.pc[r]]
			ready, ok := sim.ready(a)
			if !ok {
				break
			}
			start := max(sim.free[r], ready)
			end := start + sim.c.Of(a)
			if a.Kind == RecvF || a.Kind == RecvB {
				start = sim.free[r] // the rank sits in the receive until the data is there
			}
			sim.record(r, a, start, end)
			sim.pc[r]++
			ran = true
		}
	}
	return ran
}

func (sim *simulator) record(r int, a Action, start, end float64) {
	sim.done[key{a.Kind, a.Stage, a.Micro}] = end
	if a.Kind.IsBackward() {
		sim.done[key{grad, a.Stage, a.Micro}] = end
	}
	sim.free[r] = end
	sim.events = append(sim.events, Event{Rank: r, Stage: a.Stage, Micro: a.Micro, Kind: a.Kind, Start: start, End: end})
}

// ready reports when all inputs of a are available, or false if one has
// not been produced yet.
func (sim *simulator) ready(a Action) (float64, bool) {
	t := 0.0
	for _, d := range sim.deps(a) {
		end, ok := sim.done[d.key]
		if !ok {
			return 0, false
		}
		if d.transfer {
			end += sim.c.Transfer(sendOf(d.key))
		}
		t = max(t, end)
	}
	return t, true
}

// sendOf is the SEND that carries the tensor produced by k across ranks,
// explicit in the schedule or not, so that Cost.Transfer is asked the same
// question either way.
func sendOf(k key) Action {
	kind := k.kind
	switch kind {
	case F:
		kind = SendF
	case grad:
		kind = SendB
	}
	return Compute(k.stage, kind, k.micro)
}

// deps lists the inputs of a (see the package comment).
func (sim *simulator) deps(a Action) []dep {
	s, st, m := sim.s, a.Stage, a.Micro
	// across is the input from stage `from`: direct on one rank, through
	// the local RECV in a schedule with communication, else implicit.
	across := func(from int, k Kind, recv Kind) dep {
		switch {
		case s.StageRank[from] == s.StageRank[st]:
			return dep{key: key{k, from, m}}
		case sim.comm:
			return dep{key: key{recv, st, m}}
		}
		return dep{key: key{k, from, m}, transfer: true}
	}
	switch a.Kind {
	case F:
		if st > 0 {
			return []dep{across(st-1, F, RecvF)}
		}
	case I, B:
		ds := []dep{{key: key{F, st, m}}}
		if st < s.Stages-1 {
			ds = append(ds, across(st+1, grad, RecvB))
		}
		return ds
	case W:
		return []dep{{key: key{I, st, m}}}
	case SendF:
		return []dep{{key: key{F, st, m}}}
	case SendB:
		return []dep{{key: key{grad, st, m}}}
	case RecvF:
		return []dep{{key: key{SendF, st - 1, m}, transfer: true}}
	case RecvB:
		return []dep{{key: key{SendB, st + 1, m}, transfer: true}}
	}
	return nil
}

// Wait is one blocked rank of a deadlock.
type Wait struct {
	Rank int
	At   Action // the rank's next action, which cannot start
	For  string // the missing input, e.g. "1SEND_B0 on rank 1"
}

// DeadlockError lists the ranks that are blocked for ever.
type DeadlockError struct {
	Schedule string
	Waits    []Wait
}

func (e *DeadlockError) Error() string {
	parts := make([]string, len(e.Waits))
	for i, w := range e.Waits {
		parts[i] = fmt.Sprintf("rank %d is stuck at %s waiting for %s", w.Rank, w.At, w.For)
	}
	return fmt.Sprintf("schedule %q deadlocks: %s", e.Schedule, strings.Join(parts, "; "))
}

func (sim *simulator) deadlock() error {
	var waits []Wait
	for r, acts := range sim.s.Actions {
		if sim.pc[r] == len(acts) {
			continue
		}
		a := acts[sim.pc[r]]
		for _, d := range sim.deps(a) {
			if _, ok := sim.done[d.key]; !ok {
				waits = append(waits, Wait{Rank: r, At: a, For: sim.describe(d.key)})
				break
			}
		}
	}
	if len(waits) == 0 {
		return nil
	}
	return &DeadlockError{Schedule: sim.s.Name, Waits: waits}
}

// describe names a missing input and the rank expected to produce it.
func (sim *simulator) describe(k key) string {
	if k.stage < 0 || k.stage >= sim.s.Stages {
		return fmt.Sprintf("stage %d, which does not exist", k.stage)
	}
	r := sim.s.StageRank[k.stage]
	if k.kind == grad {
		return fmt.Sprintf("%s or %s on rank %d", Compute(k.stage, I, k.micro), Compute(k.stage, B, k.micro), r)
	}
	if k.kind == RecvF || k.kind == RecvB {
		// A compute action waits for its own rank's RECV, which must
		// come before it in the list.
		return fmt.Sprintf("%s, which must come before it on rank %d", Compute(k.stage, k.kind, k.micro), r)
	}
	return fmt.Sprintf("%s on rank %d", Compute(k.stage, k.kind, k.micro), r)
}
