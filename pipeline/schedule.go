package pipeline

import (
	"fmt"
	"strconv"
	"strings"
)

// Schedule is a pipeline schedule as data: for every rank, the actions it
// executes, in order.
type Schedule struct {
	Name                 string
	Ranks, Stages, Micro int
	StageRank            []int      // stage -> the rank that holds it
	Actions              [][]Action // per rank, in execution order
}

// StagesOf returns the stages held by rank r, in ascending order.
func (s *Schedule) StagesOf(r int) []int {
	var out []int
	for st, rk := range s.StageRank {
		if rk == r {
			out = append(out, st)
		}
	}
	return out
}

// HasComm reports whether any rank has a SEND or RECV action.
func (s *Schedule) HasComm() bool {
	for _, acts := range s.Actions {
		for _, a := range acts {
			if a.Kind.IsComm() {
				return true
			}
		}
	}
	return false
}

// Steps is the length of the longest rank's action list.
func (s *Schedule) Steps() int {
	n := 0
	for _, acts := range s.Actions {
		n = max(n, len(acts))
	}
	return n
}

// ComputeOnly returns a copy of s with only its compute actions.
func (s *Schedule) ComputeOnly() *Schedule {
	return s.filter(Kind.IsCompute)
}

// withoutComm returns a copy of s without SENDs and RECVs.
func (s *Schedule) withoutComm() *Schedule {
	return s.filter(func(k Kind) bool { return !k.IsComm() })
}

func (s *Schedule) filter(keep func(Kind) bool) *Schedule {
	out := s.cloneHeader()
	for r, acts := range s.Actions {
		for _, a := range acts {
			if keep(a.Kind) {
				out.Actions[r] = append(out.Actions[r], a)
			}
		}
	}
	return out
}

func (s *Schedule) cloneHeader() *Schedule {
	return &Schedule{Name: s.Name, Ranks: s.Ranks, Stages: s.Stages, Micro: s.Micro,
		StageRank: append([]int(nil), s.StageRank...), Actions: make([][]Action, s.Ranks)}
}

// String writes the text form: a header line with the name, the sizes and
// the stage placement, then one line per rank, e.g.
//
//	schedule 1f1b ranks=2 stages=2 micro=2 stage-rank=0,1
//	rank 0: 0F0 0F1 0B0 0B1
//	rank 1: 1F0 1B0 1F1 1B1
func (s *Schedule) String() string {
	var b strings.Builder
	name := s.Name
	if name == "" {
		name = "-"
	}
	place := make([]string, len(s.StageRank))
	for i, r := range s.StageRank {
		place[i] = strconv.Itoa(r)
	}
	fmt.Fprintf(&b, "schedule %s ranks=%d stages=%d micro=%d stage-rank=%s\n",
		name, s.Ranks, s.Stages, s.Micro, strings.Join(place, ","))
	for r, acts := range s.Actions {
		fmt.Fprintf(&b, "rank %d:", r)
		for _, a := range acts {
			b.WriteByte(' ')
			b.WriteString(a.String())
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// ParseSchedule reads the text form written by String. The header line is
// optional: without it the ranks are the "rank N:" lines, the stages and
// micro-batches are one more than the largest seen, and each stage is
// placed on the first rank that runs it. Peers of SEND/RECV actions are
// derived from the placement.
func ParseSchedule(text string) (*Schedule, error) {
	s := &Schedule{}
	haveHeader := false
	var rows [][]Action
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "schedule "):
			if err := s.parseHeader(line); err != nil {
				return nil, fmt.Errorf("line %d: %v", n+1, err)
			}
			haveHeader = true
		case strings.HasPrefix(line, "rank "):
			r, acts, err := parseRankLine(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n+1, err)
			}
			if r != len(rows) {
				return nil, fmt.Errorf("line %d: rank %d out of order (want rank %d)", n+1, r, len(rows))
			}
			rows = append(rows, acts)
		default:
			return nil, fmt.Errorf("line %d: want \"schedule ...\" or \"rank N: ...\", got %q", n+1, line)
		}
	}
	s.Actions = rows
	if !haveHeader {
		s.inferHeader()
	}
	if len(rows) != s.Ranks {
		return nil, fmt.Errorf("header says %d ranks, found %d rank lines", s.Ranks, len(rows))
	}
	if len(s.StageRank) != s.Stages {
		return nil, fmt.Errorf("header says %d stages, stage-rank has %d entries", s.Stages, len(s.StageRank))
	}
	s.fillPeers()
	return s, nil
}

func (s *Schedule) parseHeader(line string) error {
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return fmt.Errorf("schedule header without a name")
	}
	s.Name = fields[1]
	if s.Name == "-" {
		s.Name = ""
	}
	for _, f := range fields[2:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return fmt.Errorf("header field %q is not key=value", f)
		}
		var err error
		switch key {
		case "ranks":
			s.Ranks, err = strconv.Atoi(val)
		case "stages":
			s.Stages, err = strconv.Atoi(val)
		case "micro":
			s.Micro, err = strconv.Atoi(val)
		case "stage-rank":
			s.StageRank = nil
			for _, p := range strings.Split(val, ",") {
				r, e := strconv.Atoi(p)
				if e != nil {
					return fmt.Errorf("stage-rank %q: %v", val, e)
				}
				s.StageRank = append(s.StageRank, r)
			}
		default:
			return fmt.Errorf("unknown header field %q", key)
		}
		if err != nil {
			return fmt.Errorf("header field %q: %v", f, err)
		}
	}
	return nil
}

func parseRankLine(line string) (int, []Action, error) {
	head, body, ok := strings.Cut(line, ":")
	if !ok {
		return 0, nil, fmt.Errorf("rank line without ':'")
	}
	r, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "rank")))
	if err != nil {
		return 0, nil, fmt.Errorf("rank number: %v", err)
	}
	var acts []Action
	for _, tok := range strings.Fields(body) {
		a, err := ParseAction(tok)
		if err != nil {
			return 0, nil, err
		}
		acts = append(acts, a)
	}
	return r, acts, nil
}

// inferHeader fills sizes and placement from the actions themselves.
func (s *Schedule) inferHeader() {
	s.Ranks = len(s.Actions)
	for _, acts := range s.Actions {
		for _, a := range acts {
			s.Stages = max(s.Stages, a.Stage+1)
			s.Micro = max(s.Micro, a.Micro+1)
		}
	}
	s.StageRank = make([]int, s.Stages)
	for i := range s.StageRank {
		s.StageRank[i] = -1
	}
	for r, acts := range s.Actions {
		for _, a := range acts {
			if a.Kind.IsCompute() && a.Stage >= 0 && s.StageRank[a.Stage] < 0 {
				s.StageRank[a.Stage] = r
			}
		}
	}
}

// peerOf is the rank at the other end of a communication action, or -1.
func (s *Schedule) peerOf(a Action) int {
	other := a.Stage
	switch a.Kind {
	case SendF, RecvB:
		other++
	case RecvF, SendB:
		other--
	default:
		return -1
	}
	if other < 0 || other >= len(s.StageRank) {
		return -1
	}
	return s.StageRank[other]
}

func (s *Schedule) fillPeers() {
	for _, acts := range s.Actions {
		for i := range acts {
			acts[i].Peer = s.peerOf(acts[i])
		}
	}
}
