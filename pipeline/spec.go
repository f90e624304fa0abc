package pipeline

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSpec reads a schedule as the train block writes it: a name from
// Names, with the stages per rank in parentheses for interleaved
// ("interleaved(2)"). It returns the name and v (0 when not given).
func ParseSpec(spec string) (name string, v int, err error) {
	spec = strings.TrimSpace(spec)
	name, arg, hasArg := strings.Cut(spec, "(")
	name = strings.ToLower(strings.TrimSpace(name))
	if hasArg {
		arg, closed := strings.CutSuffix(strings.TrimSpace(arg), ")")
		if !closed {
			return "", 0, fmt.Errorf("schedule %q: missing ')'", spec)
		}
		v, err = strconv.Atoi(strings.TrimSpace(arg))
		if err != nil || v < 1 {
			return "", 0, fmt.Errorf("schedule %q: stages per rank must be a positive integer", spec)
		}
	}
	if _, err := stagesPerRank(name, v); err != nil {
		return "", 0, fmt.Errorf("schedule %q: %v", spec, err)
	}
	return name, v, nil
}

// FromSpec generates the schedule a spec names (see ParseSpec).
func FromSpec(spec string, ranks, micro int) (*Schedule, error) {
	name, v, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return Generate(name, ranks, micro, v)
}

// Formula is the textbook bubble of a schedule in this package's
// bubble/total convention, for equal F and B (F, I and W for the
// zero-bubble ones; per chunk for interleaved and zbv), with the formula as
// text, e.g. "(K−1)/(M+K−1)". For zbv it is the bound the tests establish
// rather than a paper's figure. ok is false for an unknown name or where the
// formula does not hold (interleaved and zb1p need M ≥ K, zbv M ≥ 2K); the
// simulator's figure is then the reference.
func Formula(name string, ranks, micro, v int) (bubble float64, text string, ok bool) {
	k, m := float64(ranks), float64(micro)
	switch name {
	case "naive":
		return (k - 1) / k, "(K−1)/K", true
	case "gpipe", "1f1b":
		return (k - 1) / (m + k - 1), "(K−1)/(M+K−1)", true
	case "interleaved":
		return (k - 1) / (float64(v)*m + k - 1), "(K−1)/(vM+K−1)", micro >= ranks && v >= 2
	case "zb1p":
		return (k - 1) / (3*m + k - 1), "(K−1)/(3M+K−1)", micro >= ranks
	case "zbv":
		return (k - 1) / (6*m + k - 1), "≤ (K−1)/(6M+K−1)", micro >= 2*ranks
	}
	return 0, "", false
}
