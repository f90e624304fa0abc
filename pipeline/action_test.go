package pipeline

import (
	"strings"
	"testing"
)

func TestActionText(t *testing.T) {
	cases := []struct {
		a    Action
		text string
	}{
		{Compute(1, F, 3), "1F3"},
		{Compute(2, B, 0), "2B0"},
		{Compute(0, W, 1), "0W1"},
		{Compute(1, I, 2), "1I2"},
		{Compute(12, F, 105), "12F105"},
		{Action{Stage: 1, Kind: SendF, Micro: 3, Peer: -1}, "1SEND_F3"},
		{Action{Stage: 2, Kind: RecvB, Micro: 0, Peer: -1}, "2RECV_B0"},
		{Action{Stage: 0, Kind: RecvF, Micro: 7, Peer: -1}, "0RECV_F7"},
		{Action{Stage: 3, Kind: SendB, Micro: 1, Peer: -1}, "3SEND_B1"},
	}
	for _, c := range cases {
		if got := c.a.String(); got != c.text {
			t.Errorf("%+v.String() = %q, want %q", c.a, got, c.text)
		}
		back, err := ParseAction(c.text)
		if err != nil || back != c.a {
			t.Errorf("ParseAction(%q) = %+v, %v; want %+v", c.text, back, err, c.a)
		}
	}
}

func TestParseActionRejects(t *testing.T) {
	for _, text := range []string{"", "F3", "1F", "1X3", "13", "1SEND3", "-1F3", "1 F3"} {
		if a, err := ParseAction(text); err == nil {
			t.Errorf("ParseAction(%q) = %v, want an error", text, a)
		}
	}
}

// Every generated schedule, with and without communication, survives a
// trip through its text form.
func TestScheduleTextRoundTrip(t *testing.T) {
	for _, g := range []struct {
		name        string
		ranks, m, v int
	}{{"naive", 3, 2, 0}, {"gpipe", 4, 4, 0}, {"1f1b", 4, 8, 0}, {"interleaved", 2, 4, 3},
		{"zb1p", 3, 6, 0}, {"zbv", 3, 6, 0}} {
		s, err := Generate(g.name, g.ranks, g.m, g.v)
		if err != nil {
			t.Fatal(err)
		}
		withComm, err := s.WithComm()
		if err != nil {
			t.Fatal(err)
		}
		for _, sched := range []*Schedule{s, withComm} {
			text := sched.String()
			back, err := ParseSchedule(text)
			if err != nil {
				t.Fatalf("%s: ParseSchedule: %v\n%s", g.name, err, text)
			}
			if back.String() != text {
				t.Errorf("%s: round trip changed the text:\n%s\nvs\n%s", g.name, text, back.String())
			}
			assertSameSchedule(t, sched, back)
		}
	}
}

func assertSameSchedule(t *testing.T, want, got *Schedule) {
	t.Helper()
	if got.Name != want.Name || got.Ranks != want.Ranks || got.Stages != want.Stages || got.Micro != want.Micro {
		t.Fatalf("header: got %s/%d/%d/%d, want %s/%d/%d/%d", got.Name, got.Ranks, got.Stages, got.Micro,
			want.Name, want.Ranks, want.Stages, want.Micro)
	}
	for st := range want.StageRank {
		if got.StageRank[st] != want.StageRank[st] {
			t.Fatalf("stage %d on rank %d, want %d", st, got.StageRank[st], want.StageRank[st])
		}
	}
	for r := range want.Actions {
		if len(got.Actions[r]) != len(want.Actions[r]) {
			t.Fatalf("rank %d: %d actions, want %d", r, len(got.Actions[r]), len(want.Actions[r]))
		}
		for i, a := range want.Actions[r] {
			if got.Actions[r][i] != a { // Peer included
				t.Fatalf("rank %d step %d: %+v, want %+v", r, i, got.Actions[r][i], a)
			}
		}
	}
}

func TestParseScheduleWithoutHeader(t *testing.T) {
	s, err := ParseSchedule(`
		# two ranks, two micro-batches, hand-written
		rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
		rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1
	`)
	if err != nil {
		t.Fatal(err)
	}
	if s.Ranks != 2 || s.Stages != 2 || s.Micro != 2 || s.StageRank[0] != 0 || s.StageRank[1] != 1 {
		t.Fatalf("inferred %d ranks, %d stages, %d micro, placement %v", s.Ranks, s.Stages, s.Micro, s.StageRank)
	}
	if p := s.Actions[0][1].Peer; p != 1 { // 0SEND_F0 goes to rank 1
		t.Errorf("peer of 0SEND_F0 = %d, want 1", p)
	}
	if p := s.Actions[1][3].Peer; p != 0 { // 1SEND_B0 goes to rank 0
		t.Errorf("peer of 1SEND_B0 = %d, want 0", p)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestParseScheduleRejects(t *testing.T) {
	cases := map[string]string{
		"rank out of order": "rank 1: 0F0\n",
		"bad action":        "rank 0: 0F0 0Q1\n",
		"rank count":        "schedule x ranks=2 stages=1 micro=1 stage-rank=0\nrank 0: 0F0 0B0\n",
		"placement size":    "schedule x ranks=1 stages=2 micro=1 stage-rank=0\nrank 0: 0F0 0B0\n",
		"unknown field":     "schedule x ranks=1 colour=red\nrank 0: 0F0\n",
		"stray line":        "hello\n",
	}
	for what, text := range cases {
		if _, err := ParseSchedule(text); err == nil {
			t.Errorf("%s: ParseSchedule(%q) succeeded, want an error", what, text)
		} else if strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: empty error", what)
		}
	}
}
