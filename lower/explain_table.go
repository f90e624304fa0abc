package lower

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// table is a tiny column aligner. Its cells are measured once (widths),
// not once per use: explain's op table of a deep pipelined model has
// hundreds of thousands of cells.
type table struct {
	rows  [][]string
	w     []int   // widest cell per column, in runes; nil until measured
	runes []int32 // each cell's runes, row by row
	cells window[string]
}

func newTable(head ...string) *table { return &table{rows: [][]string{head}} }

// FormatTable aligns rows (the first is the heading) as explain's tables
// are aligned, so estimate's table reads like explain's.
func FormatTable(rows [][]string) string { return (&table{rows: rows}).String() }

// row adds a row, its cells copied into the table's shared arrays (not
// an allocation per row).
func (t *table) row(cells ...string) {
	r := t.cells.take(len(cells))
	copy(r, cells)
	t.rows, t.w = append(t.rows, r), nil
}

func (t *table) String() string {
	var b strings.Builder
	t.writeTo(&b)
	return b.String()
}

// widths is the widest cell of each column, in runes.
func (t *table) widths() []int {
	if t.w == nil {
		t.measure(len(t.rows[0]))
	}
	return t.w
}

// measure counts each cell's runes and the widest of each of the cols
// columns.
func (t *table) measure(cols int) {
	t.w = make([]int, cols)
	cells := 0
	for _, r := range t.rows {
		cells += len(r)
	}
	t.runes = slices.Grow(t.runes[:0], cells)
	for _, r := range t.rows {
		for i, c := range r {
			n := utf8.RuneCountInString(c)
			t.runes = append(t.runes, int32(n))
			t.w[i] = max(t.w[i], n)
		}
	}
}

// joinTables is the table of heading head followed by the rows of parts
// (measured, without headings), in order.
func joinTables(head []string, parts []*table) *table {
	t := newTable(head...)
	t.widths()
	for _, p := range parts {
		t.rows = append(t.rows, p.rows...)
		t.runes = append(t.runes, p.runes...)
		for i, w := range p.w {
			t.w[i] = max(t.w[i], w)
		}
	}
	return t
}

// size bounds the bytes writeTo writes: each cell padded to its column's
// width (the last is not), plus its bytes beyond one per rune.
func (t *table) size() int {
	w := t.widths()
	n, k := 0, 0
	for _, r := range t.rows {
		n += 2 + len(r) // the indent, a space per cell, the newline
		for _, c := range r {
			n += len(c) - int(t.runes[k])
			k++
		}
	}
	width := 0
	for _, x := range w {
		width += x
	}
	return n + len(t.rows)*width
}

// writeTo appends the aligned table to b, sized once: explain's op table
// of a deep pipelined model is tens of megabytes.
func (t *table) writeTo(b textSink) {
	w := t.widths()
	width := 1
	for _, x := range w {
		width += 1 + x
	}
	if sb, ok := b.(*strings.Builder); ok {
		sb.Grow(len(t.rows) * (width + 1))
	}
	k := 0
	for _, r := range t.rows {
		b.WriteByte(' ')
		for i, c := range r {
			b.WriteByte(' ')
			b.WriteString(c)
			if i < len(r)-1 {
				for n := w[i] - int(t.runes[k]); n > 0; n -= len(spaces) {
					b.WriteString(spaces[:min(n, len(spaces))])
				}
			}
			k++
		}
		b.WriteByte('\n')
	}
}

const spaces = "                                                                "
