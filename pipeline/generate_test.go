package pipeline

import (
	"strings"
	"testing"
)

var (
	sweepRanks = []int{1, 2, 3, 4, 8}
	sweepMicro = []int{1, 2, 3, 4, 8, 12}
)

// sweepCase is one point of the generator sweep.
type sweepCase struct {
	name        string
	ranks, m, v int
}

func sweep() []sweepCase {
	var out []sweepCase
	for _, name := range Names {
		vs := []int{0}
		if name == "interleaved" {
			vs = []int{2, 3}
		}
		for _, k := range sweepRanks {
			for _, m := range sweepMicro {
				for _, v := range vs {
					out = append(out, sweepCase{name, k, m, v})
				}
			}
		}
	}
	return out
}

// Every generator at every size of the sweep either gives a schedule that
// validates and runs to the end, or refuses with a message naming the
// schedule. The sweep's interleaved sizes all satisfy M % max(1, M/K) == 0,
// so nothing in it may be refused; the refusals are tested separately.
func TestGeneratorsSweep(t *testing.T) {
	for _, c := range sweep() {
		s, err := Generate(c.name, c.ranks, c.m, c.v)
		if err != nil {
			t.Errorf("%+v refused: %v", c, err)
			continue
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
		wantStages := c.ranks * max(1, c.v)
		if c.name == "zbv" {
			wantStages = 2 * c.ranks
		}
		if s.Stages != wantStages || s.Ranks != c.ranks || s.Micro != c.m {
			t.Errorf("%+v: got %d ranks, %d stages, %d micro", c, s.Ranks, s.Stages, s.Micro)
		}
		if _, err := Simulate(s, Cost{F: 1, I: 1, W: 1, Comm: 0.25}); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
		if _, err := s.WithComm(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestGenerateRefuses(t *testing.T) {
	cases := []struct {
		name        string
		ranks, m, v int
		want        string // part of the message
	}{
		{"interleaved", 2, 5, 2, "cannot be split into 2 equal rounds"},
		{"interleaved", 4, 9, 2, "cannot be split into 2 equal rounds"},
		{"interleaved", 4, 14, 2, "cannot be split into 3 equal rounds"},
		{"interleaved", 3, 7, 2, "cannot be split into 2 equal rounds"},
		{"interleaved", 4, 8, 1, "needs v ≥ 2"},
		{"1f1b", 4, 8, 2, "one stage per rank"},
		{"zbv", 4, 8, 3, "exactly 2 stages per rank"},
		{"pipedream", 4, 8, 0, "unknown schedule"},
		{"gpipe", 0, 8, 0, "at least one rank"},
		{"gpipe", 4, 0, 0, "at least one rank and one micro-batch"},
	}
	for _, c := range cases {
		_, err := Generate(c.name, c.ranks, c.m, c.v)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Generate(%q, %d, %d, %d) = %v, want an error containing %q", c.name, c.ranks, c.m, c.v, err, c.want)
		}
	}
}

// The smallest schedules, written out by hand from the pictures in the
// GPipe, PipeDream-flush (1F1B), Megatron (interleaved) and zero-bubble
// papers: warm-up forwards K−1−r, one-forward-one-backward, cool-down.
func TestGoldenActions(t *testing.T) {
	cases := []struct {
		name        string
		ranks, m, v int
		want        string
	}{
		{"naive", 2, 2, 0, `
rank 0: 0F0 0B0 0F1 0B1
rank 1: 1F0 1B0 1F1 1B1`},
		{"gpipe", 2, 2, 0, `
rank 0: 0F0 0F1 0B0 0B1
rank 1: 1F0 1F1 1B0 1B1`},
		{"1f1b", 2, 3, 0, `
rank 0: 0F0 0F1 0B0 0F2 0B1 0B2
rank 1: 1F0 1B0 1F1 1B1 1F2 1B2`},
		{"1f1b", 4, 4, 0, `
rank 0: 0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3
rank 1: 1F0 1F1 1F2 1B0 1F3 1B1 1B2 1B3
rank 2: 2F0 2F1 2B0 2F2 2B1 2F3 2B2 2B3
rank 3: 3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3`},
		// Megatron's interleaving with M = K: rank 0 fills both of its
		// chunks before its first backward; the last rank alternates as
		// soon as its second chunk has work.
		{"interleaved", 2, 2, 2, `
rank 0: 0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1
rank 1: 1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1`},
		// K = M = 4, v = 2 (one round of four): rank r warms up with
		// (v−1)·4 + 2(K−1−r) forwards, capped at v·M = 8, so ranks 0 and
		// 1 run every forward first; chunk by chunk, backwards from the
		// last chunk.
		{"interleaved", 4, 4, 2, `
rank 0: 0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 4B0 4B1 4B2 4B3 0B0 0B1 0B2 0B3
rank 1: 1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 5B0 5B1 5B2 5B3 1B0 1B1 1B2 1B3
rank 2: 2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 6B2 6B3 2B0 2B1 2B2 2B3
rank 3: 3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3B0 3B1 3B2 3B3`},
		// ZB-H1: 1F1B's order with B split; the last rank defers its
		// first W so that its I reaches rank 0 sooner.
		{"zb1p", 2, 2, 0, `
rank 0: 0F0 0F1 0I0 0W0 0I1 0W1
rank 1: 1F0 1I0 1F1 1I1 1W0 1W1`},
		// ZB-V, K = 2, M = 3 (= 2K−1, so nothing is dropped). Rank 0
		// holds stages 0 and 3: three forwards down the V, then two
		// (F I W) of stage 3 while the V turns, one steady round, and the
		// cool-down (I W) of stage 0. Rank 1 holds stages 1 and 2 at the
		// bottom of the V, where forwards alternate between its stages.
		{"zbv", 2, 3, 0, `
rank 0: 0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 3F2 3I2 3W2 0I1 0W1 0I2 0W2
rank 1: 1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1I1 2I2 1I2 1W1 2W2 1W2`},
		// ZB-V on one rank: both halves of the V, stage 1's (F I W) as
		// soon as stage 0's forward is done.
		{"zbv", 1, 2, 0, `
rank 0: 0F0 1F0 1I0 1W0 0F1 0I0 0W0 1F1 1I1 1W1 0I1 0W1`},
	}
	for _, c := range cases {
		s, err := Generate(c.name, c.ranks, c.m, c.v)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ParseSchedule(c.want)
		if err != nil {
			t.Fatal(err)
		}
		for r := range want.Actions {
			got, exp := actionsText(s.Actions[r]), actionsText(want.Actions[r])
			if got != exp {
				t.Errorf("%s K=%d M=%d v=%d rank %d:\n got  %s\n want %s", c.name, c.ranks, c.m, c.v, r, got, exp)
			}
		}
	}
}

func actionsText(acts []Action) string {
	parts := make([]string, len(acts))
	for i, a := range acts {
		parts[i] = a.String()
	}
	return strings.Join(parts, " ")
}

func TestPlacement(t *testing.T) {
	s, err := Generate("interleaved", 4, 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.StagesOf(1); len(got) != 3 || got[0] != 1 || got[1] != 5 || got[2] != 9 {
		t.Errorf("interleaved rank 1 holds %v, want [1 5 9]", got)
	}
	v, err := Generate("zbv", 4, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	for r, want := range [][2]int{{0, 7}, {1, 6}, {2, 5}, {3, 4}} {
		if got := v.StagesOf(r); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("zbv rank %d holds %v, want %v", r, got, want)
		}
	}
}
