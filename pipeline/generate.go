package pipeline

import (
	"fmt"
	"strings"
)

// Names lists the schedules Generate knows.
var Names = []string{"naive", "gpipe", "1f1b", "interleaved", "zb1p", "zbv"}

// Generate builds the named schedule for ranks pipeline ranks and micro
// micro-batches. v is the number of stages per rank: 0 means the
// schedule's own (1, or 2 for zbv); interleaved needs v ≥ 2 and zbv
// accepts only 2. The result has no communication actions (see WithComm)
// and has passed Validate.
func Generate(name string, ranks, micro, v int) (*Schedule, error) {
	v, err := stagesPerRank(name, v)
	if err != nil {
		return nil, err
	}
	if ranks < 1 || micro < 1 {
		return nil, fmt.Errorf("%s: need at least one rank and one micro-batch (got ranks=%d, micro=%d)", name, ranks, micro)
	}
	s := &Schedule{Name: name, Ranks: ranks, Stages: ranks * v, Micro: micro,
		StageRank: loopedPlacement(ranks, v), Actions: make([][]Action, ranks)}
	switch name {
	case "naive":
		for r := range ranks {
			s.Actions[r] = naiveRank(r, micro)
		}
	case "gpipe":
		for r := range ranks {
			s.Actions[r] = gpipeRank(r, micro)
		}
	case "1f1b":
		for r := range ranks {
			s.Actions[r] = loopedRank(loopedPlan{ranks: ranks, v: 1, micro: micro, perRound: micro,
				rank: r, warmup: min(ranks-1-r, micro)})
		}
	case "interleaved":
		if err := interleavedRanks(s, v); err != nil {
			return nil, err
		}
	case "zb1p":
		for r := range ranks {
			s.Actions[r] = loopedRank(loopedPlan{ranks: ranks, v: 1, micro: micro, perRound: micro,
				rank: r, warmup: min(ranks-1-r, micro), split: true, wDelay: r})
		}
	case "zbv":
		s.StageRank = vPlacement(ranks)
		for r := range ranks {
			s.Actions[r] = zbvRank(ranks, micro, r)
		}
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%s generated an invalid schedule (a bug): %v", name, err)
	}
	return s, nil
}

// stagesPerRank resolves v for the named schedule, refusing what it can't do.
func stagesPerRank(name string, v int) (int, error) {
	switch name {
	case "naive", "gpipe", "1f1b", "zb1p":
		if v > 1 {
			return 0, fmt.Errorf("%s holds one stage per rank; v=%d needs \"interleaved\"", name, v)
		}
		return 1, nil
	case "interleaved":
		if v < 2 {
			return 0, fmt.Errorf("interleaved needs v ≥ 2 stages per rank (got %d); with one stage per rank use 1f1b", v)
		}
		return v, nil
	case "zbv":
		if v != 0 && v != 2 {
			return 0, fmt.Errorf("zbv holds exactly 2 stages per rank in a V (got v=%d)", v)
		}
		return 2, nil
	}
	return 0, fmt.Errorf("unknown schedule %q (known: %s)", name, strings.Join(Names, ", "))
}

// loopedPlacement puts stage s on rank s mod K.
func loopedPlacement(ranks, v int) []int {
	out := make([]int, ranks*v)
	for s := range out {
		out[s] = s % ranks
	}
	return out
}

// vPlacement puts stages r and 2K−1−r on rank r.
func vPlacement(ranks int) []int {
	out := make([]int, 2*ranks)
	for r := range ranks {
		out[r], out[2*ranks-1-r] = r, r
	}
	return out
}

// naiveRank runs one micro-batch at a time: its forward, then its backward.
func naiveRank(r, micro int) []Action {
	var out []Action
	for m := range micro {
		out = append(out, Compute(r, F, m), Compute(r, B, m))
	}
	return out
}

// gpipeRank runs all forwards, then all backwards.
func gpipeRank(r, micro int) []Action {
	var out []Action
	for m := range micro {
		out = append(out, Compute(r, F, m))
	}
	for m := range micro {
		out = append(out, Compute(r, B, m))
	}
	return out
}

// interleavedRanks fills the ranks of Megatron's interleaved 1F1B with
// PyTorch's relaxation of the M % K == 0 requirement: micro-batches go
// through the local stages in rounds of M/rounds, rounds = max(1, ⌊M/K⌋).
func interleavedRanks(s *Schedule, v int) error {
	k, m := s.Ranks, s.Micro
	rounds := max(1, m/k)
	if m%rounds != 0 {
		return fmt.Errorf("interleaved: M=%d micro-batches cannot be split into %d equal rounds (rounds = max(1, M/K) with K=%d); use a multiple of K, or M < 2K dividing evenly", m, rounds, k)
	}
	perRound := m / rounds
	for r := range k {
		warmup := min((v-1)*perRound+2*(k-1-r), v*m)
		s.Actions[r] = loopedRank(loopedPlan{ranks: k, v: v, micro: m, perRound: perRound,
			rank: r, warmup: warmup})
	}
	return nil
}
