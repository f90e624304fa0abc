package train

import (
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

func graphWithInputs(axes []mesh.Axis, placements ...sbp.NdSBP) *ir.Graph {
	g := &ir.Graph{Mesh: mesh.New("M", axes...)}
	for i, p := range placements {
		g.Values = append(g.Values, &ir.Value{ID: i, Op: "input", Type: ir.Type{DType: ir.F32, Shape: []int{8, 4}}, Declared: p})
	}
	return g
}

func TestDataAxisFollowsTheInputs(t *testing.T) {
	axes := []mesh.Axis{{Name: "model", Size: 2}, {Name: "rows", Size: 2}}
	g := graphWithInputs(axes, sbp.NdSBP{sbp.S(1), sbp.S(0)}, sbp.NdSBP{sbp.B, sbp.S(0)}, sbp.NdSBP{sbp.B, sbp.B})
	ax, err := DataAxis(g, "", 1)
	require.NoError(t, err)
	require.Equal(t, 1, ax)
	ax, err = DataAxis(g, "model", 1)
	require.NoError(t, err)
	require.Equal(t, 0, ax)
	_, err = DataAxis(g, "dp", 1)
	require.ErrorContains(t, err, "data_axis must name an axis of mesh M [model=2, rows=2]")

	split := graphWithInputs(axes, sbp.NdSBP{sbp.S(0), sbp.B}, sbp.NdSBP{sbp.B, sbp.S(0)})
	_, err = DataAxis(split, "", 2)
	require.ErrorContains(t, err, "zero = 2 shards over the data-parallel axis, but the inputs split their batch dim over different axes")
}

func TestStorageSplitsTheFirstFreeDim(t *testing.T) {
	w := &ir.Value{Type: ir.Type{DType: ir.F32, Shape: []int{4, 6}}}
	require.Equal(t, sbp.NdSBP{sbp.S(1), sbp.S(0)}, Storage(w, sbp.NdSBP{sbp.S(1), sbp.B}, 1))
	require.Equal(t, sbp.NdSBP{sbp.S(0), sbp.S(0)}, Storage(w, sbp.NdSBP{sbp.S(0), sbp.S(0)}, 1), "already split: kept")
	scalar := &ir.Value{Type: ir.Type{DType: ir.F32}}
	require.Equal(t, sbp.NdSBP{sbp.B}, Storage(scalar, sbp.NdSBP{sbp.B}, 0), "no dim to split")
}
