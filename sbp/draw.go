package sbp

import (
	"fmt"
	"sort"
	"strings"

	"github.com/meshrun/meshrun/mesh"
)

// Draw renders which device holds which block of a tensor of the given
// shape under placement p. The last two dims form a grid of row and column
// ranges; leading dims get one grid per distinct range. In a cell, devices
// holding identical copies are joined by "=", and partial values that sum
// (or max) to the cell are joined by "+" (or "∨"), so P is never drawn like B.
func Draw(m *mesh.Mesh, shape []int, p NdSBP) string {
	type blk struct {
		b   Block
		dev int
	}
	var blocks []blk
	for d := 0; d < m.Size(); d++ {
		blocks = append(blocks, blk{Layout(m, shape, p, d), d})
	}
	r := len(shape)
	rng := func(b Block, dim int) string {
		if dim < 0 || dim >= r {
			return ""
		}
		if b.Len[dim] == 0 {
			return "(empty)"
		}
		return fmt.Sprintf("%d:%d", b.Off[dim], b.Off[dim]+b.Len[dim])
	}
	rowDim, colDim := r-2, r-1
	if r == 1 {
		rowDim = -1
	}
	lead := func(b Block) string {
		var parts []string
		for d := 0; d < r-2; d++ {
			parts = append(parts, rng(b, d))
		}
		return strings.Join(parts, ", ")
	}
	// distinct ranges in order of offset
	ordered := func(dim int) []string {
		seen := map[string]int{}
		for _, x := range blocks {
			if dim < 0 || dim >= r {
				seen[""] = 0
				continue
			}
			seen[rng(x.b, dim)] = x.b.Off[dim]*2 + boolInt(x.b.Len[dim] > 0)
		}
		var out []string
		for k := range seen {
			out = append(out, k)
		}
		sort.Slice(out, func(i, j int) bool {
			return seen[out[i]] < seen[out[j]] || (seen[out[i]] == seen[out[j]] && out[i] < out[j])
		})
		return out
	}
	rows, cols := ordered(rowDim), ordered(colDim)
	leads := map[string]bool{}
	var leadOrder []string
	for _, x := range blocks {
		l := lead(x.b)
		if !leads[l] {
			leads[l] = true
			leadOrder = append(leadOrder, l)
		}
	}
	var partialAxes []int
	red := "+"
	for a, e := range p {
		if e.IsP() {
			partialAxes = append(partialAxes, a)
			if e.Reduce == Max {
				red = "∨"
			}
		}
	}
	cell := func(l, row, col string) string {
		// devices holding this block, grouped by their coordinates on the partial axes
		groups := map[string][]int{}
		var keys []string
		for _, x := range blocks {
			if lead(x.b) != l || rng(x.b, rowDim) != row || rng(x.b, colDim) != col {
				continue
			}
			c := m.Coord(x.dev)
			var k []string
			for _, a := range partialAxes {
				k = append(k, fmt.Sprint(c[a]))
			}
			key := strings.Join(k, ",")
			if _, ok := groups[key]; !ok {
				keys = append(keys, key)
			}
			groups[key] = append(groups[key], x.dev)
		}
		var terms []string
		for _, k := range keys {
			var ds []string
			for _, d := range groups[k] {
				ds = append(ds, fmt.Sprintf("d%d", d))
			}
			terms = append(terms, strings.Join(ds, "="))
		}
		if len(terms) == 0 {
			return "·"
		}
		return strings.Join(terms, " "+red+" ")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "shape %s, placement %s on %s\n", strings.ReplaceAll(fmt.Sprint(shape), " ", ", "), p, m) // as ir.ShapeString (ir imports sbp)
	for _, l := range leadOrder {
		if r > 2 {
			fmt.Fprintf(&b, "[%s, :, :]\n", l)
		}
		head := []string{""}
		if r >= 1 {
			for _, c := range cols {
				if r == 1 {
					head = append(head, "["+c+"]")
				} else {
					head = append(head, "cols "+c)
				}
			}
		} else {
			head = append(head, "scalar")
		}
		grid := [][]string{head}
		for _, row := range rows {
			line := []string{""}
			if rowDim >= 0 {
				line[0] = "rows " + row
			}
			for _, c := range cols {
				line = append(line, cell(l, row, c))
			}
			grid = append(grid, line)
		}
		b.WriteString(alignGrid(grid))
	}
	b.WriteString("legend: dN = device N; a=b identical copies; a+b partial sums added")
	if red == "∨" {
		b.WriteString(" (∨: partial maxima)")
	}
	b.WriteString("\n")
	if m.NumAxes() > 1 {
		for d := 0; d < m.Size(); d++ {
			fmt.Fprintf(&b, "  d%d=%s", d, m.CoordString(d))
			if d%4 == 3 || d == m.Size()-1 {
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func alignGrid(g [][]string) string {
	w := make([]int, len(g[0]))
	for _, r := range g {
		for i, c := range r {
			w[i] = max(w[i], len([]rune(c)))
		}
	}
	var b strings.Builder
	for _, r := range g {
		b.WriteString("  ")
		for i, c := range r {
			b.WriteString(c + strings.Repeat(" ", w[i]-len([]rune(c))+2))
		}
		b.WriteString("\n")
	}
	return b.String()
}
