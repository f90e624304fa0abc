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
