package pipeline

import (
	"errors"
	"testing"
)

func TestHookText(t *testing.T) {
	for text, want := range map[string]Action{
		"0UNSHARD":     Hook(0, Unshard),
		"12RESHARD":    Hook(12, Reshard),
		"3REDUCE_GRAD": Hook(3, ReduceGrad),
	} {
		got, err := ParseAction(text)
		if err != nil || got != want {
			t.Errorf("ParseAction(%q) = %+v, %v; want %+v", text, got, err, want)
		}
		if want.String() != text {
			t.Errorf("%+v.String() = %q, want %q", want, want.String(), text)
		}
	}
	for _, text := range []string{"0UNSHARD3", "1REDUCE_GRAD0", "0RECV_F", "UNSHARD"} {
		if a, err := ParseAction(text); err == nil {
			t.Errorf("ParseAction(%q) = %v, want an error", text, a)
		}
	}
}

// The hooks placed by hand: REDUCE_GRAD after a stage's last weight
// gradient (on an interleaved rank, stage 2's reduction can run while
// stage 0 still works), UNSHARD before a stage's first compute and
// RESHARD after its last.
func TestHookPlacementGolden(t *testing.T) {
	il, err := Generate("interleaved", 2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	zb, err := Generate("zb1p", 2, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		what string
		got  *Schedule
		want []string
	}{
		{"interleaved reduce", il.WithReduceGrad(), []string{
			"0F0 0F1 2F0 2F1 2B0 2B1 2REDUCE_GRAD 0B0 0B1 0REDUCE_GRAD",
			"1F0 1F1 3F0 3B0 3F1 3B1 3REDUCE_GRAD 1B0 1B1 1REDUCE_GRAD"}},
		{"zb1p reduce", zb.WithReduceGrad(), []string{
			"0F0 0F1 0I0 0W0 0I1 0W1 0REDUCE_GRAD",
			"1F0 1I0 1F1 1I1 1W0 1W1 1REDUCE_GRAD"}},
		{"interleaved unshard", il.WithUnshardReshard(), []string{
			"0UNSHARD 0F0 0F1 2UNSHARD 2F0 2F1 2B0 2B1 2RESHARD 0B0 0B1 0RESHARD",
			"1UNSHARD 1F0 1F1 3UNSHARD 3F0 3B0 3F1 3B1 3RESHARD 1B0 1B1 1RESHARD"}},
	}
	for _, c := range cases {
		for r, w := range c.want {
			if g := actionsText(c.got.Actions[r]); g != w {
				t.Errorf("%s rank %d:\n got  %s\n want %s", c.what, r, g, w)
			}
		}
		if err := c.got.Validate(); err != nil {
			t.Errorf("%s: %v", c.what, err)
		}
	}
}

func TestValidateRejectsHooks(t *testing.T) {
	cases := []struct {
		what, text string
		rank, step int
		cell       string
	}{
		{"reduce before the last weight gradient", `
rank 0: 0F0 0F1 0B0 0REDUCE_GRAD 0B1`, 0, 3, "[0REDUCE_GRAD]"},
		{"reduce twice", `
rank 0: 0F0 0B0 0REDUCE_GRAD 0REDUCE_GRAD`, 0, 3, "[0REDUCE_GRAD]"},
		{"compute before unshard", `
rank 0: 0F0 0UNSHARD 0B0`, 0, 0, "[0F0]"},
		{"compute after reshard", `
rank 0: 0UNSHARD 0F0 0RESHARD 0B0`, 0, 3, "[0B0]"},
		{"unshard twice", `
rank 0: 0UNSHARD 0F0 0UNSHARD 0B0`, 0, 2, "[0UNSHARD]"},
		{"reshard without unshard", `
rank 0: 0F0 0B0 0RESHARD 0RESHARD`, 0, 3, "[0RESHARD]"},
	}
	for _, c := range cases {
		s, err := ParseSchedule(c.text)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		var se *ScheduleError
		if err := s.Validate(); !errors.As(err, &se) {
			t.Errorf("%s: Validate() = %v, want a *ScheduleError", c.what, err)
			continue
		}
		if se.Rank != c.rank || se.Step != c.step {
			t.Errorf("%s: marked rank %d step %d, want rank %d step %d\n%v", c.what, se.Rank, se.Step, c.rank, c.step, se)
		}
		assertMarked(t, c.what, se.Grid, c.rank, c.step, c.cell)
	}
	bad := &Schedule{Name: "x", Ranks: 1, Stages: 1, Micro: 1, StageRank: []int{0},
		Actions: [][]Action{{Compute(0, F, 0), Compute(0, B, 0), {Stage: 0, Kind: ReduceGrad, Micro: 0, Peer: -1}}}}
	if err := bad.Validate(); err == nil {
		t.Errorf("a hook with micro-batch 0 validated")
	}
}

// Hooks survive WithComm and the text form, and take the collective time
// in the simulation: 1F1B, K=2, M=1, F=B=1, collective 0.5 — rank 1 runs
// F [1,2], B [2,3] and reduces over [3,3.5]; rank 0's B runs [3,4] and its
// reduction [4,4.5].
func TestHooksSimulated(t *testing.T) {
	s, err := Generate("1f1b", 2, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	s, err = s.WithReduceGrad().WithComm()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseSchedule(s.String())
	if err != nil {
		t.Fatal(err)
	}
	assertSameSchedule(t, s, back)
	evs, err := Simulate(s, Cost{F: 1, B: 1, Collective: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][2]float64{1: {3, 3.5}, 0: {4, 4.5}}
	seen := 0
	for _, e := range evs {
		if e.Kind == ReduceGrad {
			seen++
			if w := want[e.Rank]; e.Start != w[0] || e.End != w[1] || e.Micro != -1 {
				t.Errorf("rank %d reduces over [%g,%g] (micro %d), want %v", e.Rank, e.Start, e.End, e.Micro, w)
			}
		}
	}
	if seen != 2 {
		t.Errorf("%d reductions, want 2", seen)
	}
	if got := Makespan(evs); got != 4 {
		t.Errorf("makespan %g, want 4 (hooks are not pipeline compute)", got)
	}
}

// Every generated schedule takes both hook passes and still validates,
// places its messages and runs.
func TestHooksSweep(t *testing.T) {
	for _, c := range sweep() {
		s, err := Generate(c.name, c.ranks, c.m, c.v)
		if err != nil {
			t.Fatal(err)
		}
		hooked := s.WithUnshardReshard().WithReduceGrad()
		if err := hooked.Validate(); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		withComm, err := hooked.WithComm()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if _, err := Simulate(withComm, Cost{F: 1, I: 1, W: 1, Comm: 0.1, Collective: 0.3}); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		count := map[Kind]int{}
		for _, acts := range withComm.Actions {
			for _, a := range acts {
				count[a.Kind]++
			}
		}
		for _, k := range []Kind{Unshard, Reshard, ReduceGrad} {
			if count[k] != withComm.Stages {
				t.Errorf("%+v: %d %s, want one per stage (%d)", c, count[k], k, withComm.Stages)
			}
		}
	}
}
