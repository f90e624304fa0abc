package pipeline

import (
	"cmp"
	"fmt"
	"slices"
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

// times holds the end time of every (kind, stage, micro-batch) that has
// run, densely: a validated schedule's keys are all in range, and a map
// costs more than the simulation itself on large schedules.
type times struct {
	stages, micro int
	end           []float64
	have          []bool
}

// kindSlots counts the real kinds plus the grad pseudo-kind.
const kindSlots = int(ReduceGrad) + 2

func newTimes(s *Schedule) times {
	n := kindSlots * s.Stages * (s.Micro + 1)
	return times{stages: s.Stages, micro: s.Micro, end: make([]float64, n), have: make([]bool, n)}
}

// index places a key; hooks (micro-batch -1) take micro slot 0.
func (t times) index(k key) int {
	slot := int(k.kind)
	if k.kind == grad {
		slot = kindSlots - 1
	}
	return (slot*t.stages+k.stage)*(t.micro+1) + k.micro + 1
}

func (t times) set(k key, end float64) {
	i := t.index(k)
	t.end[i], t.have[i] = end, true
}

func (t times) get(k key) (float64, bool) {
	i := t.index(k)
	return t.end[i], t.have[i]
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
	sim := simulator{s: s, c: c, comm: s.HasComm(), done: newTimes(s), waiting: map[key][]int{},
		pc: make([]int, s.Ranks), free: make([]float64, s.Ranks)}
	for r := range s.Ranks {
		sim.runnable = append(sim.runnable, r)
	}
	for len(sim.runnable) > 0 {
		r := sim.runnable[len(sim.runnable)-1]
		sim.runnable = sim.runnable[:len(sim.runnable)-1]
		sim.advance(r)
	}
	if err := sim.deadlock(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(sim.events, func(a, b Event) int {
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		return cmp.Compare(a.Rank, b.Rank)
	})
	return sim.events, nil
}

type simulator struct {
	s        *Schedule
	c        Cost
	comm     bool          // the schedule has explicit SEND/RECV actions
	done     times         // end time of every executed action
	waiting  map[key][]int // ranks blocked until the key's action has run
	runnable []int         // ranks to advance
	pc       []int         // per rank, the next action
	free     []float64     // per rank, when its last action ended
	events   []Event
}

// advance runs rank r's actions until one lacks an input, and parks the
// rank on that input; recording the input makes the rank runnable again.
// Each action is thus tried once per input it waits for, not once per
// pass over all ranks.
func (sim *simulator) advance(r int) {
	acts := sim.s.Actions[r]
	for sim.pc[r] < len(acts) {
		a := acts[sim.pc[r]]
		ready, missing, ok := sim.ready(a)
		if !ok {
			sim.waiting[missing] = append(sim.waiting[missing], r)
			return
		}
		start := max(sim.free[r], ready)
		end := start + sim.c.Of(a)
		if a.Kind == RecvF || a.Kind == RecvB {
			start = sim.free[r] // the rank sits in the receive until the data is there
		}
		sim.record(r, a, start, end)
		sim.pc[r]++
	}
}

func (sim *simulator) record(r int, a Action, start, end float64) {
	sim.finish(key{a.Kind, a.Stage, a.Micro}, end)
	if a.Kind.IsBackward() {
		sim.finish(key{grad, a.Stage, a.Micro}, end)
	}
	sim.free[r] = end
	sim.events = append(sim.events, Event{Rank: r, Stage: a.Stage, Micro: a.Micro, Kind: a.Kind, Start: start, End: end})
}

// finish records that k's action ended at end and wakes its waiters.
func (sim *simulator) finish(k key, end float64) {
	sim.done.set(k, end)
	sim.runnable = append(sim.runnable, sim.waiting[k]...)
	delete(sim.waiting, k)
}

// ready reports when all inputs of a are available, or false and the
// first input not produced yet.
func (sim *simulator) ready(a Action) (float64, key, bool) {
	t := 0.0
	for _, d := range sim.deps(a) {
		end, ok := sim.done.get(d.key)
		if !ok {
			return 0, d.key, false
		}
		if d.transfer {
			end += sim.c.Transfer(sendOf(d.key))
		}
		t = max(t, end)
	}
	return t, key{}, true
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
			if _, ok := sim.done.get(d.key); !ok {
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
