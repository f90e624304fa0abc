package pipeline

import "fmt"

// WithComm returns a copy of s with SEND and RECV actions between
// consecutive stages on different ranks: each SEND right after the action
// that produces the tensor, each RECV right before the action that
// consumes it. Existing communication actions are dropped and placed
// afresh; data-parallel hooks stay where they are. A compute schedule that cannot run to the end (some ranks wait
// on each other for ever) is refused as malformed: no placement of
// blocking receives could make it run.
func (s *Schedule) WithComm() (*Schedule, error) {
	base := s.withoutComm()
	if _, err := Simulate(base, Cost{F: 1, I: 1, W: 1, B: 1}); err != nil {
		return nil, fmt.Errorf("malformed compute schedule, cannot place sends and receives: %w", err)
	}
	out := base.cloneHeader()
	for r, acts := range base.Actions {
		for _, a := range acts {
			recv, send := base.boundaries(a)
			if recv.Kind != 0 {
				out.Actions[r] = append(out.Actions[r], recv)
			}
			out.Actions[r] = append(out.Actions[r], a)
			if send.Kind != 0 {
				out.Actions[r] = append(out.Actions[r], send)
			}
		}
	}
	return out, nil
}

// boundaries returns the RECV compute action a needs before it and the
// SEND it makes after it; a zero Action (Kind F, which no comm action has)
// where there is none.
func (s *Schedule) boundaries(a Action) (recv, send Action) {
	st, m := a.Stage, a.Micro
	crosses := func(other int) bool {
		return other >= 0 && other < s.Stages && s.StageRank[other] != s.StageRank[st]
	}
	comm := func(k Kind, stage int) Action {
		c := Compute(stage, k, m)
		c.Peer = s.peerOf(c)
		return c
	}
	switch a.Kind {
	case F:
		if crosses(st - 1) {
			recv = comm(RecvF, st)
		}
		if crosses(st + 1) {
			send = comm(SendF, st)
		}
	case I, B:
		if crosses(st + 1) {
			recv = comm(RecvB, st)
		}
		if crosses(st - 1) {
			send = comm(SendB, st)
		}
	}
	return recv, send
}
