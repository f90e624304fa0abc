package lower

import (
	"encoding/binary"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/sbp"
)

// reportMemo formats each distinct position, call chain, placement and
// signature note of the report once. explain lists every value of the
// program with its arguments: a pipelined model repeats each op once per
// micro-batch and a deep one each layer, so nearly every such text equals
// an earlier one. Rows share the strings and slices (the report is read,
// never modified), which saves the allocations and the collector's work
// without changing a byte of the text or JSON. Labels are unique per
// value but each is read again by every value using it as an argument,
// so they are made once per value.
type reportMemo struct {
	buf        []byte
	pos        map[ir.Pos]string
	calls      map[string][]string
	placements map[string]string
	why        map[whyID][]string
	labels     []string // by value ID
	placed     []string // by value ID: the text of its placement
}

func newReportMemo(values int) *reportMemo {
	return &reportMemo{pos: map[ir.Pos]string{}, calls: map[string][]string{}, placements: map[string]string{},
		why: map[whyID][]string{}, labels: make([]string, values), placed: make([]string, values)}
}

// where is ir.FormatPos(p).
func (m *reportMemo) where(p ir.Pos) string {
	s, ok := m.pos[p]
	if !ok {
		s = ir.FormatPos(p)
		m.pos[p] = s
	}
	return s
}

// callSites is formatAll(calls): nil without calls.
func (m *reportMemo) callSites(calls []ir.Pos) []string {
	if len(calls) == 0 {
		return nil
	}
	m.buf = m.buf[:0]
	for _, c := range calls { // FormatPos reads the file, line and column
		m.buf = append(append(m.buf, c.Filename...), 0)
		m.buf = binary.AppendVarint(binary.AppendVarint(m.buf, int64(c.Line)), int64(c.Column))
	}
	if out, ok := m.calls[string(m.buf)]; ok {
		return out
	}
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = m.where(c)
	}
	m.calls[string(m.buf)] = out
	return out
}

// placement is pl.String().
func (m *reportMemo) placement(pl sbp.NdSBP) string {
	m.buf = appendNd(m.buf[:0], pl)
	if s, ok := m.placements[string(m.buf)]; ok {
		return s
	}
	s := pl.String()
	m.placements[string(m.buf)] = s
	return s
}

// whyID identifies a Why slice: choices copied from one priced signature
// share it, and nothing modifies it.
type whyID struct {
	first *string
	n     int
}

// dedupe is dedupe(why).
func (m *reportMemo) dedupe(why []string) []string {
	if len(why) == 0 {
		return dedupe(why)
	}
	id := whyID{&why[0], len(why)}
	out, ok := m.why[id]
	if !ok {
		out = dedupe(why)
		m.why[id] = out
	}
	return out
}

// placedAs is the text of v's placement pl (p.Placement[v]), kept by value
// so that each argument's costs a slice read, not a map lookup.
func (m *reportMemo) placedAs(v *ir.Value, pl sbp.NdSBP) string {
	if v.ID < 0 || v.ID >= len(m.placed) {
		return m.placement(pl)
	}
	if m.placed[v.ID] == "" {
		m.placed[v.ID] = m.placement(pl)
	}
	return m.placed[v.ID]
}

// placedOf is p.Placement[v]'s text.
func (m *reportMemo) placedOf(p *Plan, v *ir.Value) string {
	if v.ID >= 0 && v.ID < len(m.placed) && m.placed[v.ID] != "" {
		return m.placed[v.ID]
	}
	return m.placedAs(v, p.placementOf(v))
}

// label is v.Label().
func (m *reportMemo) label(v *ir.Value) string {
	if v.ID < 0 || v.ID >= len(m.labels) {
		return v.Label()
	}
	if m.labels[v.ID] == "" {
		m.labels[v.ID] = v.Label()
	}
	return m.labels[v.ID]
}

// textMemo is the text report's: the local shape and the where column
// of the ops table repeat as the report's fields do (see reportMemo).
type textMemo struct {
	buf    []byte
	shapes map[string]string
	wheres map[string]string
}

func newTextMemo() *textMemo {
	return &textMemo{shapes: map[string]string{}, wheres: map[string]string{}}
}

// shape is ir.ShapeString(s).
func (m *textMemo) shape(s []int) string {
	m.buf = m.buf[:0]
	for _, d := range s {
		m.buf = binary.AppendVarint(m.buf, int64(d))
	}
	if out, ok := m.shapes[string(m.buf)]; ok {
		return out
	}
	out := ir.ShapeString(s)
	m.shapes[string(m.buf)] = out
	return out
}

// where is shortWhere(w) + via(calls).
func (m *textMemo) where(w string, calls []string) string {
	m.buf = append(m.buf[:0], w...)
	for _, c := range calls {
		m.buf = append(append(m.buf, 0), c...)
	}
	if out, ok := m.wheres[string(m.buf)]; ok {
		return out
	}
	out := shortWhere(w) + via(calls)
	m.wheres[string(m.buf)] = out
	return out
}

// appendInputs appends the ops table's inputs cell of o: each argument's
// label and placement, and where it is converted, what to.
func appendInputs(b []byte, o *OpReport) []byte {
	for i, a := range o.Inputs {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(append(b, a.Value...), a.Placement...)
		if a.Converted != "" {
			b = append(append(b, "→"...), a.Converted...)
		}
	}
	return b
}
