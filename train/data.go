package train

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/sbp"
)

// DataAxis is the mesh axis a train block's data parallelism runs over:
// the one named (data_axis = NAME, named != ""), else the one axis over
// which every input split along its batch dim (dim 0) is split. No axis
// name is special: on [batch=4, model=2] with inputs {S(0), B} the data
// axis is batch. It fails when no axis or several qualify.
func DataAxis(g *ir.Graph, named string, zero int) (int, error) {
	m := g.Mesh
	if named != "" {
		ax := m.AxisIndex(named)
		if ax < 0 {
			return 0, fmt.Errorf("data_axis must name an axis of mesh %s %s", m.Name, m)
		}
		return ax, nil
	}
	// the axes that split dim 0 of every input split along dim 0
	var common []int
	found := false
	for _, v := range g.Values {
		if v.Op != "input" || !v.Declared.SplitsDim(0) {
			continue
		}
		var axes []int
		for a, s := range v.Declared {
			if s.IsS() && s.Dim == 0 && (!found || slices.Contains(common, a)) {
				axes = append(axes, a)
			}
		}
		common, found = axes, true
	}
	if len(common) == 1 {
		return common[0], nil
	}
	why := "no input is split along its batch dim (dim 0)"
	if len(common) > 1 {
		var names []string
		for _, a := range common {
			names = append(names, m.Axes[a].Name)
		}
		why = "the inputs split their batch dim over axes " + strings.Join(names, " and ")
	} else if found {
		why = "the inputs split their batch dim over different axes"
	}
	return 0, fmt.Errorf("zero = %d shards over the data-parallel axis, but %s; name it with data_axis = NAME", zero, why)
}

// Storage is where ZeRO keeps v: its compute placement split over the data
// axis along the first dim no other axis splits (unchanged when the data
// axis already splits it or every dim is taken).
func Storage(v *ir.Value, compute sbp.NdSBP, axis int) sbp.NdSBP {
	out := compute.Clone()
	if !out[axis].IsB() {
		return out
	}
	for d := 0; d < v.Type.Rank(); d++ {
		if !compute.SplitsDim(d) {
			out[axis] = sbp.S(d)
			return out
		}
	}
	return out
}

// MicroBatch is micro-batch i of k of x: rows i, i+k, i+2k, ... A strided
// choice keeps a batch split over data-parallel devices local: every device
// takes its own rows of every micro-batch.
func MicroBatch(b ops.Builder, x *ir.Value, i, k int, pos ir.Pos) *ir.Value {
	if k == 1 {
		return x
	}
	rest := x.Type.Shape[1:]
	n := x.Type.Shape[0]
	view := append([]ops.Arg{ops.T(x), ops.N(float64(n / k)), ops.N(float64(k))}, ops.Dims(rest)...)
	v := b.Apply(pos, "reshape", nil, view...)
	v = b.Apply(pos, "slice", nil, ops.T(v), ops.N(1), ops.N(float64(i)), ops.N(float64(i+1)))
	back := append([]ops.Arg{ops.T(v), ops.N(float64(n / k))}, ops.Dims(rest)...)
	v = b.Apply(pos, "reshape", nil, back...)
	v.Name = fmt.Sprintf("%s.micro%d", x.Name, i)
	return v
}
