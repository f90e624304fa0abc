package rt

import (
	"fmt"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// Assemble rebuilds a logical tensor from every device's block: split
// blocks go to their offsets, replicas are read once (from coordinate 0 on
// each B axis), and partial blocks are summed (or maxed). This is a
// host-side read for delivering outputs, not a collective.
func Assemble(m *mesh.Mesh, t ir.Type, pl sbp.NdSBP, parts []*Tensor) (*Tensor, error) {
	out := NewTensor(t.DType, t.Shape)
	sum, mx := false, false
	for _, e := range pl {
		if e.IsP() {
			if e.Reduce == sbp.Max {
				mx = true
			} else {
				sum = true
			}
		}
	}
	if sum && mx {
		return nil, fmt.Errorf("cannot assemble a tensor partial by both sum and max (%s)", pl)
	}
	if sum && isHalf(t.DType) {
		// half-precision partials are added in f32 and rounded once, as
		// the collectives do: rounding after every partial would not be
		// the value a reduction gives
		wide, err := Assemble(m, ir.Type{DType: ir.F32, Shape: t.Shape}, pl, widenAll(parts))
		if err != nil {
			return nil, err
		}
		return narrow(wide, t.DType), nil
	}
	if mx {
		fillNegInf(out)
	}
	for d := 0; d < m.Size(); d++ {
		if !ReadsBlock(m, pl, d) {
			continue
		}
		b := sbp.Layout(m, t.Shape, pl, d)
		part := parts[d]
		if !sameShape(part.Shape, b.Len) {
			return nil, fmt.Errorf("device %d holds %s, its block is %s", d, ir.ShapeString(part.Shape), ir.ShapeString(b.Len))
		}
		if !sum && !mx {
			CopyBlock(out, b.Off, part, make([]int, len(b.Len)), b.Len)
			continue
		}
		region := Extract(out, b.Off, b.Len)
		op := OpSum
		if mx {
			op = OpMax
		}
		if err := accumulate(region, part, op); err != nil {
			return nil, err
		}
		CopyBlock(out, b.Off, region, make([]int, len(b.Len)), b.Len)
	}
	return out, nil
}

// widenAll widens each half-precision part to f32 (nil parts stay nil:
// replicas Assemble does not read).
func widenAll(parts []*Tensor) []*Tensor {
	out := make([]*Tensor, len(parts))
	for i, p := range parts {
		if p != nil {
			out[i] = widen(p)
		}
	}
	return out
}

// ReadsBlock reports whether Assemble reads device dev's block under pl:
// a replica is read once, from coordinate 0 on every B axis, so the other
// copies need not be copied out or sent anywhere (their parts may be nil).
func ReadsBlock(m *mesh.Mesh, pl sbp.NdSBP, dev int) bool {
	coord := m.Coord(dev)
	for a, e := range pl {
		if e.IsB() && coord[a] != 0 {
			return false
		}
	}
	return true
}

// Scatter cuts a logical tensor into the block device dev holds under pl
// (partial placements: one device of each partial group holds the value).
func Scatter(m *mesh.Mesh, full *Tensor, pl sbp.NdSBP, dev int) *Tensor {
	b := sbp.Layout(m, full.Shape, pl, dev)
	if !holdsPartialValue(m, pl, b, dev) {
		return NewTensor(full.DType, b.Len)
	}
	return Extract(full, b.Off, b.Len)
}

// holdsPartialValue reports whether dev holds the value (rather than zeros)
// when a logical tensor is placed partial: one device of each P(sum) group,
// the one at coordinate 0; every device for P(max).
func holdsPartialValue(m *mesh.Mesh, pl sbp.NdSBP, b sbp.Block, dev int) bool {
	coord := m.Coord(dev)
	for _, a := range b.Partial {
		if pl[a].Reduce == sbp.Sum && coord[a] != 0 {
			return false
		}
	}
	return true
}

// tensorView is how a plan's tensor is assembled: the mesh and placement
// its blocks are laid out on, and the rank holding each device's block.
// In a pipelined plan the tensor lives on one pipeline coordinate (its
// Home; 0 when every coordinate makes its own), so it is assembled on the
// mesh without the pipeline axis from the ranks on that coordinate.
func tensorView(p *plan.Plan, t *plan.Tensor) (*mesh.Mesh, sbp.NdSBP, func(d int) int) {
	if p.Pipe == nil {
		return p.Mesh, t.Placement, func(d int) int { return d }
	}
	axis, home := p.Pipe.Axis, max(t.Home, 0)
	sm := mesh.New(p.Mesh.Name)
	for i, a := range p.Mesh.Axes {
		if i != axis {
			sm.Axes = append(sm.Axes, a)
		}
	}
	pl := append(append(sbp.NdSBP{}, t.Placement[:axis]...), t.Placement[axis+1:]...)
	return sm, pl, func(d int) int {
		c := sm.Coord(d)
		full := append(append(append([]int{}, c[:axis]...), home), c[axis:]...)
		return p.Mesh.Device(full)
	}
}

// BlockReaders lists the ranks whose blocks assembling t reads, each
// replica once.
func BlockReaders(p *plan.Plan, t *plan.Tensor) []int {
	m, pl, rankOf := tensorView(p, t)
	var out []int
	for d := 0; d < m.Size(); d++ {
		if ReadsBlock(m, pl, d) {
			out = append(out, rankOf(d))
		}
	}
	return out
}
