package mesh

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCoordRoundTrip(t *testing.T) {
	m := New("M", Axis{"a", 2}, Axis{"b", 3}, Axis{"c", 4})
	require.Equal(t, 24, m.Size())
	for d := 0; d < m.Size(); d++ {
		require.Equal(t, d, m.Device(m.Coord(d)))
	}
	require.Equal(t, []int{1, 2, 3}, m.Coord(23))
	require.Equal(t, []int{0, 1, 0}, m.Coord(4))
}

func TestGroupsPartitionMesh(t *testing.T) {
	m := New("M", Axis{"dp", 2}, Axis{"tp", 4})
	for axis := range m.Axes {
		seen := map[int]bool{}
		for _, g := range m.Groups(axis) {
			require.Len(t, g, m.Axes[axis].Size)
			for i, d := range g {
				require.False(t, seen[d])
				seen[d] = true
				require.Equal(t, i, m.Coord(d)[axis])
			}
		}
		require.Len(t, seen, m.Size())
	}
	require.Equal(t, []int{1, 5}, m.Group(5, 0))
	require.Equal(t, []int{4, 5, 6, 7}, m.Group(5, 1))
}

func TestSplitBalanced(t *testing.T) {
	for n := 0; n < 20; n++ {
		for p := 1; p < 7; p++ {
			next := 0
			for r := 0; r < p; r++ {
				off, l := Split(n, p, r)
				require.Equal(t, next, off)
				require.True(t, l == n/p || l == n/p+1)
				next = off + l
			}
			require.Equal(t, n, next)
		}
	}
}
