package pipeline

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// computeEvents keeps the F, I, W and B events of ranks 0..ranks-1.
func computeEvents(events []Event, ranks int) []Event {
	var out []Event
	for _, e := range events {
		if e.Kind.IsCompute() && e.Rank >= 0 && e.Rank < ranks {
			out = append(out, e)
		}
	}
	return out
}

// eventLabel names an event in a picture: kind and micro-batch ("F3"),
// with the stage in front ("2F3") when its rank holds several stages.
func eventLabel(e Event, multiStage []bool) string {
	if multiStage[e.Rank] {
		return fmt.Sprintf("%d%s%d", e.Stage, e.Kind, e.Micro)
	}
	return fmt.Sprintf("%s%d", e.Kind, e.Micro)
}

// multiStageRanks reports which ranks ran more than one stage.
func multiStageRanks(events []Event, ranks int) []bool {
	first := make([]int, ranks)
	for i := range first {
		first[i] = -1
	}
	multi := make([]bool, ranks)
	for _, e := range events {
		switch {
		case first[e.Rank] < 0:
			first[e.Rank] = e.Stage
		case first[e.Rank] != e.Stage:
			multi[e.Rank] = true
		}
	}
	return multi
}

// Gantt draws the compute events as text: one row per rank, time running
// right over width columns. An event's cells start with its label (F0, B3,
// W1, I2; with the stage in front when the rank holds several) and are
// padded with spaces, the last always blank; idle cells are '.'. A label
// longer than its event is cut (a one-cell event shows only its kind).
// Below the rows are a time axis and the bubble. width ≤ 0 gives the
// shortest event room for the longest label and a blank, at most 240
// columns in all.
func Gantt(events []Event, ranks int, width int) string {
	evs := computeEvents(events, ranks)
	if len(evs) == 0 {
		return "(no compute events)\n"
	}
	start, end := Span(evs)
	span := end - start
	if width <= 0 {
		width = autoWidth(evs, ranks, span)
	}
	col := func(t float64) int {
		return int(math.Round((t - start) / span * float64(width)))
	}
	multi := multiStageRanks(evs, ranks)
	rows := make([][]byte, ranks)
	for r := range rows {
		rows[r] = []byte(strings.Repeat(".", width))
	}
	for _, e := range evs {
		a, b := col(e.Start), col(e.End)
		if b <= a && e.End > e.Start {
			b = a + 1
		}
		b = min(b, width)
		label := fitLabel(eventLabel(e, multi), e.Kind, b-a)
		for c := a; c < b; c++ {
			ch := byte(' ')
			if c-a < len(label) {
				ch = label[c-a]
			}
			rows[e.Rank][c] = ch
		}
	}
	var out strings.Builder
	prefix := len(fmt.Sprintf("rank %d ", ranks-1))
	for r, row := range rows {
		fmt.Fprintf(&out, "%-*s|%s|\n", prefix, fmt.Sprintf("rank %d", r), row)
	}
	writeAxis(&out, prefix, width, start, span)
	fmt.Fprintf(&out, "makespan %.4g, bubble %.1f%% (idle rank-time / (ranks × makespan)); '.' idle, F forward, B backward, I input-gradient, W weight-gradient\n",
		span, 100*Bubble(evs, ranks))
	return out.String()
}

// fitLabel fits a label into n cells, keeping the last cell blank so that
// back-to-back events stay apart; a one-cell event shows only its kind.
func fitLabel(label string, k Kind, n int) string {
	if n <= 1 {
		return k.String()
	}
	return label[:min(len(label), n-1)]
}

// autoWidth gives the shortest event room for the longest label and a blank.
func autoWidth(evs []Event, ranks int, span float64) int {
	shortest, longest := span, 0
	multi := multiStageRanks(evs, ranks)
	for _, e := range evs {
		if d := e.End - e.Start; d > 0 {
			shortest = min(shortest, d)
		}
		longest = max(longest, len(eventLabel(e, multi)))
	}
	return max(10, min(240, int(math.Ceil(float64(longest+1)*span/shortest))))
}

// writeAxis draws tick marks at multiples of a round time step at least
// eight columns apart, and the times under them.
func writeAxis(out *strings.Builder, prefix, width int, start, span float64) {
	step := niceStep(span * 8 / float64(width))
	digits := max(0, -int(math.Floor(math.Log10(step))))
	label := func(t float64) string { return strconv.FormatFloat(roundTo(t, step), 'f', digits, 64) }
	// ticks far enough apart for their labels
	for w := len(label(start + span)); step/span*float64(width) < float64(w+2); w = len(label(start + span)) {
		step = niceStep(step * 1.01)
		digits = max(0, -int(math.Floor(math.Log10(step))))
	}
	ticks := []byte(strings.Repeat("-", width+1))
	labels := []byte(strings.Repeat(" ", width+24))
	for t := math.Ceil(start/step) * step; t <= start+span*(1+1e-9); t += step {
		c := min(width, int(math.Round((t-start)/span*float64(width))))
		ticks[c] = '+'
		copy(labels[c:], label(t))
	}
	fmt.Fprintf(out, "%*s%s\n", prefix, "", ticks)
	fmt.Fprintf(out, "%*s%s\n", prefix, "", strings.TrimRight(string(labels), " "))
}

// niceStep is the smallest of 1, 2, 5 times a power of ten that is ≥ x.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// roundTo removes the float noise of repeated additions of step.
func roundTo(t, step float64) float64 {
	q := step / 1000
	return math.Round(t/q) * q
}
