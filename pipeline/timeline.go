package pipeline

import (
	"math"
	"sort"
)

// Span returns the first start and the last end over all events.
func Span(events []Event) (start, end float64) {
	if len(events) == 0 {
		return 0, 0
	}
	start, end = events[0].Start, events[0].End
	for _, e := range events {
		start, end = min(start, e.Start), max(end, e.End)
	}
	return start, end
}

// Busy returns, per rank, the length of the union of its compute intervals
// (F, I, W, B). Overlapping intervals count once, so a runtime that
// overlaps work on one rank is not credited twice.
func Busy(events []Event, ranks int) []float64 {
	per := make([][]Event, ranks)
	for _, e := range events {
		if e.Kind.IsCompute() && e.Rank >= 0 && e.Rank < ranks {
			per[e.Rank] = append(per[e.Rank], e)
		}
	}
	busy := make([]float64, ranks)
	for r, evs := range per {
		sort.Slice(evs, func(i, j int) bool { return evs[i].Start < evs[j].Start })
		var covered float64
		curStart, curEnd := 0.0, 0.0
		for i, e := range evs {
			if i == 0 || e.Start > curEnd {
				covered += curEnd - curStart
				curStart, curEnd = e.Start, e.End
				continue
			}
			curEnd = max(curEnd, e.End)
		}
		busy[r] = covered + curEnd - curStart
	}
	return busy
}

// Makespan is the time from the first compute event's start to the last
// one's end; communication events do not count (a trailing send is not
// pipeline work, and a receive posted early is waiting).
func Makespan(events []Event) float64 {
	start, end := Span(computeEvents(events, math.MaxInt))
	return end - start
}

// Bubble is the idle fraction of the timeline under the bubble/total
// convention: (ranks·T − Σ busy) / (ranks·T), T the Makespan, busy each
// rank's compute time (see Busy). Time in RECV counts as idle. An empty
// timeline has no bubble.
func Bubble(events []Event, ranks int) float64 {
	total := float64(ranks) * Makespan(events)
	if total <= 0 {
		return 0
	}
	idle := total
	for _, b := range Busy(events, ranks) {
		idle -= b
	}
	return idle / total
}

// PeakInFlight returns, per stage, the largest number of micro-batches
// whose forward has run and whose input backward (I, or the full B) has
// not: the activations the stage holds. All of a stage's actions run on
// one rank in list order, so the count needs no timing.
func PeakInFlight(s *Schedule) []int {
	return peakBetween(s, F, func(k Kind) bool { return k == I || k == B })
}

// PeakAwaitingW returns, per stage, the largest number of micro-batches
// whose I has run and whose W has not: the (smaller) state a split
// backward keeps for the weight gradient. It is zero for schedules without
// split backwards.
func PeakAwaitingW(s *Schedule) []int {
	return peakBetween(s, I, func(k Kind) bool { return k == W })
}

func peakBetween(s *Schedule, open Kind, closes func(Kind) bool) []int {
	live := make([]int, s.Stages)
	peak := make([]int, s.Stages)
	for _, acts := range s.Actions {
		for _, a := range acts {
			if a.Stage < 0 || a.Stage >= s.Stages {
				continue
			}
			switch {
			case a.Kind == open:
				live[a.Stage]++
				peak[a.Stage] = max(peak[a.Stage], live[a.Stage])
			case closes(a.Kind):
				live[a.Stage]--
			}
		}
	}
	return peak
}
