package lower

import (
	"fmt"
	"strings"
)

// The blocks view as text: every call, its arguments' blocks, each step's
// collectives (before → after and the bytes sent, per device) and the
// named values computed from them, then the result's blocks. A mesh of
// two or more axes is drawn as grids over its last two axes (rows: the
// second last), one per coordinate of the others; a one-axis mesh as a
// list. The REPL shows the pages one at a time.

// BlocksLegend explains the notation; Text starts with it (the REPL prints
// it before a call).
const BlocksLegend = "blocks each device holds in local functions\n" +
	"  X[i,j]: block (i, j) of X as the call declares it split (':' a whole dim, {0,2} blocks 0 and 2, 0₁ piece 1 of block 0);\n" +
	"  · matrix product, ᵀ transpose, dX the gradient of X; bytes: what the device sends\n"

// Text renders every call; "" when there is none.
func (r *BlocksReport) Text() string {
	if len(r.Calls) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(BlocksLegend)
	for i := range r.Calls {
		for _, pg := range r.Pages(i) {
			b.WriteString(pg)
		}
	}
	return b.String()
}

// Pages renders call i as pages: the call and its arguments, one page per
// collective (a step's heading on its first, its computed values on its
// last), and the results.
func (r *BlocksReport) Pages(i int) []string {
	c := r.Calls[i]
	var b strings.Builder
	kind := ""
	if c.Backward {
		kind = "backward of "
	}
	fmt.Fprintf(&b, "\ncall %d: %s%s at %s: %s\n", i+1, kind, c.Function, shortWhere(c.Where), c.Source)
	for _, in := range c.Inputs {
		fmt.Fprintf(&b, "  argument %s as %s:\n", in.Name, in.Placement)
		b.WriteString(r.grid(in.Devices, "    "))
	}
	pages := []string{b.String()}
	for s, st := range c.Steps {
		for k, mv := range st.Moves {
			b.Reset()
			if k == 0 {
				fmt.Fprintf(&b, "  step %d\n", s+1)
			}
			fmt.Fprintf(&b, "    %s %s (%s at %s): %s\n", mv.Op, mv.Group, mv.Value, shortWhere(mv.Where), mv.Source)
			cells := make([]string, len(mv.Devices))
			for d, dv := range mv.Devices {
				cells[d] = fmt.Sprintf("%s → %s  %s", dv.Before, dv.After, HumanBytes(float64(dv.Bytes)))
			}
			b.WriteString(r.grid(cells, "      "))
			if k == len(st.Moves)-1 {
				for _, cv := range st.Computed {
					fmt.Fprintf(&b, "    %s:\n", cv.Name)
					b.WriteString(r.grid(cv.Devices, "      "))
				}
			}
			pages = append(pages, b.String())
		}
	}
	b.Reset()
	for _, res := range c.Results {
		fmt.Fprintf(&b, "  result %s %s:\n", res.Name, res.Placement)
		cells := make([]string, len(res.Devices))
		for d, l := range res.Devices {
			cells[d] = res.Blocks[d] + " = " + l
		}
		b.WriteString(r.grid(cells, "    "))
	}
	return append(pages, b.String())
}

// grid lays out one cell per device: a list on a one-axis mesh, grids
// over the last two axes otherwise.
func (r *BlocksReport) grid(cells []string, indent string) string {
	var b strings.Builder
	n := len(r.Sizes)
	if n < 2 {
		rows := [][]string{{"", ""}}
		for d, c := range cells {
			rows = append(rows, []string{fmt.Sprintf("%s=%d", r.Axes[0], d), c})
		}
		writeAligned(&b, rows[1:], indent)
		return b.String()
	}
	rowsN, colsN := r.Sizes[n-2], r.Sizes[n-1]
	per := rowsN * colsN
	for g := 0; g < len(cells)/per; g++ {
		in := indent
		if n > 2 {
			fmt.Fprintf(&b, "%s%s\n", indent, r.prefix(g))
			in += "  "
		}
		head := []string{""}
		for j := range colsN {
			head = append(head, fmt.Sprintf("%s=%d", r.Axes[n-1], j))
		}
		rows := [][]string{head}
		for i := range rowsN {
			row := []string{fmt.Sprintf("%s=%d", r.Axes[n-2], i)}
			for j := range colsN {
				row = append(row, cells[g*per+i*colsN+j])
			}
			rows = append(rows, row)
		}
		writeAligned(&b, rows, in)
	}
	return b.String()
}

// prefix names grid g's coordinates on the leading axes ("d=1").
func (r *BlocksReport) prefix(g int) string {
	n := len(r.Sizes)
	parts := make([]string, n-2)
	for a := n - 3; a >= 0; a-- {
		parts[a] = fmt.Sprintf("%s=%d", r.Axes[a], g%r.Sizes[a])
		g /= r.Sizes[a]
	}
	return strings.Join(parts, ", ")
}

// writeAligned writes rows as columns three spaces apart: cells hold
// spaces themselves, so one space would not tell the columns apart.
func writeAligned(b *strings.Builder, rows [][]string, indent string) {
	var w []int
	for _, r := range rows {
		for i, c := range r {
			if i == len(w) {
				w = append(w, 0)
			}
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	for _, r := range rows {
		line := indent
		for i, c := range r {
			line += c
			if i < len(r)-1 {
				line += strings.Repeat(" ", w[i]-len([]rune(c))+3)
			}
		}
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
}
