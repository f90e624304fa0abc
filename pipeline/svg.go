package pipeline

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
)

// kindColour gives each compute kind a fill that stays readable with white
// labels and tells F from the backward halves at a glance.
var kindColour = map[Kind]string{F: "#4c78a8", I: "#f58518", W: "#54a24b", B: "#e45756"}

// SVG layout, in pixels.
const (
	svgLeft     = 70  // room for "rank N"
	svgTop      = 44  // title and legend
	svgPlot     = 900 // width of the time axis
	svgRow      = 26  // height of a rank's bar
	svgRowGap   = 6   //
	svgBottom   = 34  // axis ticks and labels
	svgRight    = 20  //
	svgCharWide = 7   // approximate width of a label character at 11px
)

// SVG draws the compute events as a self-contained SVG picture: one bar
// per rank on a light idle background, a rectangle per event coloured by
// kind and labelled like Gantt's cells when it is wide enough (every
// rectangle carries a hover title with rank, action and times), a legend,
// a time axis and the bubble in the title.
func SVG(events []Event, ranks int) []byte {
	evs := computeEvents(events, ranks)
	start, end := Span(evs)
	span := end - start
	if span <= 0 {
		span = 1
	}
	x := func(t float64) float64 { return svgLeft + (t-start)/span*svgPlot }
	rowY := func(r int) float64 { return float64(svgTop + r*(svgRow+svgRowGap)) }
	width := svgLeft + svgPlot + svgRight
	height := svgTop + ranks*(svgRow+svgRowGap) + svgBottom

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="monospace" font-size="11">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="16" font-size="13">makespan %.4g, bubble %.1f%% (idle rank-time / (ranks × makespan))</text>`+"\n",
		svgLeft, end-start, 100*Bubble(evs, ranks))
	svgLegend(&b)
	for r := range ranks {
		y := rowY(r)
		fmt.Fprintf(&b, `<text x="8" y="%.1f">rank %d</text>`+"\n", y+svgRow/2+4, r)
		fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="%d" height="%d" fill="#eeeeee"/>`+"\n", svgLeft, y, svgPlot, svgRow)
	}
	multi := multiStageRanks(evs, ranks)
	for _, e := range evs {
		x0, x1, y := x(e.Start), x(e.End), rowY(e.Rank)
		label := eventLabel(e, multi)
		fmt.Fprintf(&b, `<rect x="%.2f" y="%.1f" width="%.2f" height="%d" fill="%s" stroke="white" stroke-width="0.5"><title>`,
			x0, y, x1-x0, svgRow, kindColour[e.Kind])
		xml.EscapeText(&b, []byte(fmt.Sprintf("rank %d %s [%g, %g]", e.Rank, e.Action(), e.Start, e.End)))
		b.WriteString("</title></rect>\n")
		if x1-x0 >= float64(svgCharWide*len(label)+2) {
			fmt.Fprintf(&b, `<text x="%.2f" y="%.1f" fill="white" text-anchor="middle">%s</text>`+"\n",
				(x0+x1)/2, y+svgRow/2+4, label)
		}
	}
	svgAxis(&b, start, span, float64(svgTop+ranks*(svgRow+svgRowGap)), x)
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func svgLegend(b *bytes.Buffer) {
	names := []struct {
		k    Kind
		text string
	}{{F, "F forward"}, {B, "B backward"}, {I, "I input-gradient"}, {W, "W weight-gradient"}}
	x := svgLeft
	for _, n := range names {
		fmt.Fprintf(b, `<rect x="%d" y="24" width="10" height="10" fill="%s"/><text x="%d" y="33">%s</text>`+"\n",
			x, kindColour[n.k], x+14, n.text)
		x += 14 + svgCharWide*len(n.text) + 16
	}
}

// svgAxis draws ticks at a round step about a tenth of the span apart.
func svgAxis(b *bytes.Buffer, start, span, y float64, x func(float64) float64) {
	fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>`+"\n", svgLeft, y, svgLeft+svgPlot, y)
	step := niceStep(span / 10)
	first := math.Ceil(start/step) * step
	for t := first; t <= start+span*(1+1e-9); t += step {
		tx := x(t)
		fmt.Fprintf(b, `<line x1="%.2f" y1="%.1f" x2="%.2f" y2="%.1f" stroke="black"/>`, tx, y, tx, y+5)
		fmt.Fprintf(b, `<text x="%.2f" y="%.1f" text-anchor="middle">%g</text>`+"\n", tx, y+18, roundTo(t, step))
	}
}
