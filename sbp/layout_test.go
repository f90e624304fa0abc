package sbp

import (
	"testing"

	"github.com/meshrun/meshrun/mesh"
	"github.com/stretchr/testify/require"
)

// Uneven nested splits follow the nested description in spec.md, not the
// flat one: 4 rows on {S(0), S(0)} over [a=3, b=2] are split by a into 2,
// 1, 1 rows and each of those by b (rows 0 | 1, 2 | -, 3 | -); a flat
// split into 6 would give (1,1) row 3.
func TestUnevenNestedSplitLayout(t *testing.T) {
	m := mesh.New("M", mesh.Axis{Name: "a", Size: 3}, mesh.Axis{Name: "b", Size: 2})
	pl := NdSBP{S(0), S(0)}
	want := [][2]int{{0, 1}, {1, 1}, {2, 1}, {3, 0}, {3, 1}, {4, 0}} // (offset, rows) per device, row-major (a, b)
	for dev, w := range want {
		b := Layout(m, []int{4, 5}, pl, dev)
		require.Equal(t, []int{w[1], 5}, b.Len, "device %d %v", dev, m.Coord(dev))
		if w[1] > 0 {
			require.Equal(t, w[0], b.Off[0], "device %d %v", dev, m.Coord(dev))
		}
	}
}

// Devices that agree on the axes MarkVarying marks hold blocks of one
// shape, checked against Layout on every pair of devices; Uniform means
// every device's block has the same shape.
func TestMarkVaryingAgreesWithLayout(t *testing.T) {
	m := mesh.New("M", mesh.Axis{Name: "a", Size: 3}, mesh.Axis{Name: "b", Size: 2}, mesh.Axis{Name: "c", Size: 2})
	pls := []NdSBP{{S(0), S(0), B}, {S(0), S(1), S(0)}, {B, S(0), S(0)}, {P, S(1), B}, {S(1), B, S(1)}}
	for _, pl := range pls {
		for _, shape := range [][]int{{12, 4}, {4, 5}, {6, 1}, {1, 6}, {3, 2}} {
			varying := make([]bool, 3)
			MarkVarying(m, shape, pl, varying)
			same := func(d, e int) bool {
				for a, c := range m.Coord(d) {
					if varying[a] && c != m.Coord(e)[a] {
						return false
					}
				}
				return true
			}
			for d := 0; d < m.Size(); d++ {
				for e := 0; e < m.Size(); e++ {
					if same(d, e) || Uniform(m, shape, pl) {
						require.Equal(t, LocalShape(m, shape, pl, d), LocalShape(m, shape, pl, e), "%v %v devices %d %d varying %v", shape, pl, d, e, varying)
					}
				}
			}
		}
	}
}

// A split that divides evenly leaves its axis unmarked even when a later
// split of the same dim does not: 64 rows over dp=64 are one row each,
// which tp=8 splits unevenly, so only tp's coordinate matters.
func TestMarkVaryingStartsAtTheFirstUnevenSplit(t *testing.T) {
	m := mesh.New("M", mesh.Axis{Name: "dp", Size: 64}, mesh.Axis{Name: "tp", Size: 8})
	varying := make([]bool, 2)
	MarkVarying(m, []int{64, 256}, NdSBP{S(0), S(0)}, varying)
	require.Equal(t, []bool{false, true}, varying)
	require.False(t, Uniform(m, []int{64, 256}, NdSBP{S(0), S(0)}))
	require.True(t, Uniform(m, []int{512, 256}, NdSBP{S(0), S(0)}))
}

// LocalNumel counts the elements of the block Layout gives each device,
// on uneven nested splits and on a rank above its stack buffer's eight.
func TestLocalNumelAgreesWithLayout(t *testing.T) {
	m := mesh.New("M", mesh.Axis{Name: "a", Size: 3}, mesh.Axis{Name: "b", Size: 2}, mesh.Axis{Name: "c", Size: 2})
	pls := []NdSBP{{S(0), S(0), B}, {S(0), S(1), S(0)}, {B, S(0), S(8)}, {P, S(1), B}, {S(1), B, S(1)}}
	shapes := [][]int{{12, 4}, {4, 5}, {6, 1}, {1, 6}, {3, 2}, {5, 1, 1, 1, 1, 1, 1, 1, 7, 2}}
	for _, pl := range pls {
		for _, shape := range shapes {
			if len(shape) <= 8 && pl[2].IsS() && pl[2].Dim == 8 {
				continue
			}
			for d := 0; d < m.Size(); d++ {
				require.Equal(t, Layout(m, shape, pl, d).Numel(), LocalNumel(m, shape, pl, m.Coord(d)), "%v %v device %d", shape, pl, d)
			}
		}
	}
}
