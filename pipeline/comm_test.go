package pipeline

import (
	"fmt"
	"testing"
)

// 1F1B on two ranks, communication written out by hand: a SEND right after
// the producer, a RECV right before the consumer.
func TestWithCommGolden(t *testing.T) {
	s, err := Generate("1f1b", 2, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.WithComm()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
		"1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1",
	}
	for r, w := range want {
		if g := actionsText(got.Actions[r]); g != w {
			t.Errorf("rank %d:\n got  %s\n want %s", r, g, w)
		}
	}
	if p := got.Actions[0][1].Peer; p != 1 {
		t.Errorf("0SEND_F0 peer %d, want 1", p)
	}
	if p := got.Actions[0][4].Peer; p != 1 {
		t.Errorf("0RECV_B0 peer %d, want 1", p)
	}
	// Receives are waits: with transfer 0.5 and F = B = 1, rank 1 sits in
	// 1RECV_F0 from 0 until 0F0's activation arrives at 1.5, runs 1F0
	// [1.5,2.5] and 1B0 [2.5,3.5]; rank 0 sits in 0RECV_B0 from 2 (after
	// 0F1) until 1B0's gradient arrives at 4.
	evs, err := Simulate(got, Cost{F: 1, B: 1, Comm: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	recvs := map[string][2]float64{}
	for _, e := range evs {
		if e.Kind == RecvF || e.Kind == RecvB {
			recvs[e.Action().String()] = [2]float64{e.Start, e.End}
		}
	}
	for name, want := range map[string][2]float64{"1RECV_F0": {0, 1.5}, "0RECV_B0": {2, 4}} {
		if recvs[name] != want {
			t.Errorf("%s over %v, want %v", name, recvs[name], want)
		}
	}
	again, err := got.WithComm()
	if err != nil {
		t.Fatal(err)
	}
	assertSameSchedule(t, got, again) // placing afresh gives the same
}

// Stages next to each other on one rank need no messages: one rank with an
// interleaved schedule has none, and ZB-V's turn at the bottom of the V
// (stages K−1 and K, both on rank K−1) has none. Each crossing boundary
// carries, per micro-batch, one SEND_F, RECV_F, SEND_B and RECV_B.
func TestWithCommCounts(t *testing.T) {
	cases := []struct {
		name        string
		ranks, m, v int
		crossings   int // stage boundaries between different ranks
	}{
		{"interleaved", 1, 4, 3, 0},
		{"interleaved", 2, 4, 2, 3},
		{"1f1b", 4, 3, 0, 3},
		{"zbv", 2, 4, 0, 2},
		{"zbv", 3, 6, 0, 4},
		{"zbv", 1, 2, 0, 0},
	}
	for _, c := range cases {
		s, err := Generate(c.name, c.ranks, c.m, c.v)
		if err != nil {
			t.Fatal(err)
		}
		withComm, err := s.WithComm()
		if err != nil {
			t.Fatal(err)
		}
		count := map[Kind]int{}
		for _, acts := range withComm.Actions {
			for _, a := range acts {
				count[a.Kind]++
			}
		}
		for _, k := range []Kind{SendF, RecvF, SendB, RecvB} {
			if count[k] != c.crossings*c.m {
				t.Errorf("%s K=%d M=%d: %d %s, want %d", c.name, c.ranks, c.m, count[k], k, c.crossings*c.m)
			}
		}
	}
}

// The simulator gives the same times whether transfers are implicit (no
// communication actions) or explicit (WithComm's SEND/RECV), for every
// generated schedule, uneven costs and a transfer time included.
func TestWithCommSameTimeline(t *testing.T) {
	cost := Cost{Fn: unevenCost(0.5)}
	for _, c := range sweep() {
		s, err := Generate(c.name, c.ranks, c.m, c.v)
		if err != nil {
			t.Fatal(err)
		}
		withComm, err := s.WithComm()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		implicit, err := Simulate(s, cost)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		explicit, err := Simulate(withComm, cost)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		want := computeTimes(implicit)
		got := computeTimes(explicit)
		for a, tm := range want {
			if got[a] != tm {
				t.Errorf("%+v: %s at %v with communication actions, %v without", c, a, got[a], tm)
				break
			}
		}
	}
}

// unevenCost makes stages differ (stage s's work scaled by 1 + s/4) and
// the backward halves differ, so equal timelines are not a coincidence of
// symmetry.
func unevenCost(transfer float64) func(Action) float64 {
	return func(a Action) float64 {
		scale := 1 + float64(a.Stage)/4
		switch a.Kind {
		case F:
			return scale
		case I:
			return 1.25 * scale
		case W:
			return 0.75 * scale
		case B:
			return 2 * scale
		}
		return transfer
	}
}

func computeTimes(evs []Event) map[string][2]float64 {
	out := map[string][2]float64{}
	for _, e := range evs {
		if e.Kind.IsCompute() {
			out[e.Action().String()] = [2]float64{e.Start, e.End}
		}
	}
	return out
}

// An independent check of every simulated timeline: each compute event
// lasts its cost, a rank does one thing at a time in its list's order, and
// no event starts before its inputs ended (plus the transfer across ranks).
func TestSimulateRespectsDependencies(t *testing.T) {
	const transfer = 0.5
	cost := Cost{Fn: unevenCost(transfer)}
	for _, c := range sweep() {
		s, err := Generate(c.name, c.ranks, c.m, c.v)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := Simulate(s, cost)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkTimeline(s, evs, cost, transfer); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func checkTimeline(s *Schedule, evs []Event, cost Cost, transfer float64) error {
	at := map[string]Event{}
	next := make([]int, s.Ranks)
	free := make([]float64, s.Ranks)
	for i, e := range evs {
		if i > 0 && e.Start < evs[i-1].Start {
			return fmt.Errorf("events out of time order at %d", i)
		}
		a := s.Actions[e.Rank][next[e.Rank]]
		if a.Stage != e.Stage || a.Kind != e.Kind || a.Micro != e.Micro {
			return fmt.Errorf("rank %d ran %s, its list says %s", e.Rank, e.Action(), a)
		}
		next[e.Rank]++
		if e.Start < free[e.Rank] || e.End-e.Start != cost.Of(a) {
			return fmt.Errorf("%s on rank %d at [%g,%g]: rank free at %g, cost %g", a, e.Rank, e.Start, e.End, free[e.Rank], cost.Of(a))
		}
		free[e.Rank] = e.End
		at[a.String()] = e
	}
	for _, e := range evs {
		for _, in := range inputsOf(s, e.Action()) {
			p, ok := at[in.String()]
			if !ok {
				p, ok = at[Compute(in.Stage, B, in.Micro).String()] // a full backward in place of I
			}
			if !ok {
				return fmt.Errorf("%s ran, its input %s never did", e.Action(), in)
			}
			ready := p.End
			if p.Rank != e.Rank {
				ready += transfer
			}
			if e.Start < ready {
				return fmt.Errorf("%s starts at %g, before its input %s is ready at %g", e.Action(), e.Start, in, ready)
			}
		}
	}
	return nil
}

// inputsOf lists the compute actions a depends on (an I stands for "I or B").
func inputsOf(s *Schedule, a Action) []Action {
	var in []Action
	switch a.Kind {
	case F:
		if a.Stage > 0 {
			in = append(in, Compute(a.Stage-1, F, a.Micro))
		}
	case I, B:
		in = append(in, Compute(a.Stage, F, a.Micro))
		if a.Stage < s.Stages-1 {
			in = append(in, Compute(a.Stage+1, I, a.Micro))
		}
	case W:
		in = append(in, Compute(a.Stage, I, a.Micro))
	}
	return in
}
