package pipeline

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// Naive model parallelism on two ranks, one micro-batch, F = B = 1: the
// timeline written out by hand.
var naiveTwoRanks = []Event{
	{Rank: 0, Stage: 0, Micro: 0, Kind: F, Start: 0, End: 1},
	{Rank: 1, Stage: 1, Micro: 0, Kind: F, Start: 1, End: 2},
	{Rank: 1, Stage: 1, Micro: 0, Kind: B, Start: 2, End: 3},
	{Rank: 0, Stage: 0, Micro: 0, Kind: B, Start: 3, End: 4},
}

func TestSimulateNaiveByHand(t *testing.T) {
	got := simulate(t, "naive", 2, 1, 0, Cost{F: 1, B: 1})
	if len(got) != len(naiveTwoRanks) {
		t.Fatalf("%d events, want %d", len(got), len(naiveTwoRanks))
	}
	for i, e := range naiveTwoRanks {
		if got[i] != e {
			t.Errorf("event %d: %v, want %v", i, got[i], e)
		}
	}
}

func TestGanttByHand(t *testing.T) {
	want := "" +
		"rank 0 |F0 ......B0 |\n" +
		"rank 1 |...F0 B0 ...|\n" +
		"       +------------\n" +
		"       0\n" +
		"makespan 4, bubble 50.0% (idle rank-time / (ranks × makespan)); '.' idle, F forward, B backward, I input-gradient, W weight-gradient\n"
	if got := Gantt(naiveTwoRanks, 2, 12); got != want {
		t.Errorf("Gantt:\n%s\nwant:\n%s", got, want)
	}
	// Communication and zero-length events do not show.
	extra := append([]Event{
		{Rank: 0, Stage: 0, Micro: 0, Kind: SendF, Start: 1, End: 1},
		{Rank: 1, Stage: 1, Micro: 0, Kind: RecvF, Start: 0, End: 1},
	}, naiveTwoRanks...)
	if got := Gantt(extra, 2, 12); got != want {
		t.Errorf("Gantt with communication events:\n%s\nwant:\n%s", got, want)
	}
}

// Labels carry the stage on ranks that hold several; one-column events
// show only their kind; the axis has round ticks.
func TestGanttLabels(t *testing.T) {
	evs := []Event{
		{Rank: 0, Stage: 0, Micro: 0, Kind: F, Start: 0, End: 1.5},
		{Rank: 0, Stage: 2, Micro: 0, Kind: F, Start: 1.5, End: 4},
		{Rank: 1, Stage: 1, Micro: 0, Kind: W, Start: 0, End: 4},
		{Rank: 1, Stage: 1, Micro: 0, Kind: I, Start: 4, End: 4.5},
		{Rank: 1, Stage: 1, Micro: 1, Kind: I, Start: 4.5, End: 20},
	}
	// Two columns per time unit; ticks every 5 (at least 8 columns apart).
	// A three-column event keeps its last column blank: "0F", not "0F0".
	g := Gantt(evs, 2, 40)
	rows := strings.Split(g, "\n")
	if want := "rank 0 |0F 2F0  " + strings.Repeat(".", 32) + "|"; rows[0] != want {
		t.Errorf("rank 0 row\n%q, want\n%q", rows[0], want)
	}
	if want := "rank 1 |W0      II1" + strings.Repeat(" ", 29) + "|"; rows[1] != want {
		t.Errorf("rank 1 row\n%q, want\n%q", rows[1], want)
	}
	if want := "       0         5         10        15        20"; rows[3] != want {
		t.Errorf("axis labels\n%q, want\n%q", rows[3], want)
	}
}

// With the automatic width every label of a 1F1B chart appears whole,
// once per rank.
func TestGanttAutoWidth(t *testing.T) {
	evs := simulate(t, "1f1b", 4, 8, 0, Cost{F: 1, B: 2})
	rows := strings.Split(Gantt(evs, 4, 0), "\n")
	for r := range 4 {
		for m := range 8 {
			for _, label := range []string{"F" + string(rune('0'+m)) + " ", "B" + string(rune('0'+m)) + " "} {
				if n := strings.Count(rows[r], label); n != 1 {
					t.Errorf("rank %d row has %q %d times: %s", r, label, n, rows[r])
				}
			}
		}
	}
	if !strings.Contains(rows[len(rows)-2], "bubble 27.3%") { // (K−1)/(M+K−1) = 3/11
		t.Errorf("footer %q lacks the bubble 27.3%%", rows[len(rows)-2])
	}
}

// The SVG is well-formed XML with one titled rectangle per compute event,
// filled with its kind's colour.
func TestSVG(t *testing.T) {
	evs := simulate(t, "zb1p", 3, 4, 0, Cost{F: 1, I: 1, W: 1, Comm: 0.1})
	want := map[string]int{}
	for _, e := range evs {
		want[kindColour[e.Kind]]++
	}
	got := map[string]int{}
	dec := xml.NewDecoder(bytes.NewReader(SVG(evs, 3)))
	var stack []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if len(stack) == 0 && tok.Name.Local != "svg" {
				t.Fatalf("root element %q, want svg", tok.Name.Local)
			}
			stack = append(stack, tok.Name.Local)
			if tok.Name.Local == "rect" {
				for _, a := range tok.Attr {
					if a.Name.Local == "fill" {
						got[a.Value]++
					}
				}
			}
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	for colour, n := range want {
		// Each kind's colour also fills one legend square.
		if got[colour] != n+1 {
			t.Errorf("%d rectangles filled %s, want %d events + 1 legend square", got[colour], colour, n)
		}
	}
	if !bytes.Contains(SVG(evs, 3), []byte("<title>rank 0 0F0 [0, 1]</title>")) {
		t.Errorf("first event has no hover title")
	}
}
