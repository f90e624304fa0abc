package sbp

import (
	"strings"
	"testing"

	"github.com/meshrun/meshrun/mesh"
	"github.com/stretchr/testify/require"
)

func TestDrawShowsWhoHoldsWhat(t *testing.T) {
	m2 := mesh.New("M", mesh.Axis{Name: "dp", Size: 2}, mesh.Axis{Name: "tp", Size: 2})
	out := Draw(m2, []int{8, 8}, NdSBP{S(0), S(1)})
	require.Contains(t, out, "rows 0:4  d0        d1")
	require.Contains(t, out, "rows 4:8  d2        d3")

	// replicated over dp, partial over tp: copies with "=", sums with "+"
	out = Draw(m2, []int{8, 8}, NdSBP{B, P})
	require.Contains(t, out, "d0=d2 + d1=d3")
	out = Draw(m2, []int{8}, NdSBP{PMax, B})
	require.Contains(t, out, "d0=d1 ∨ d2=d3")

	// 1-D tensor on a 1-D mesh, uneven
	m3 := mesh.New("M", mesh.Axis{Name: "x", Size: 3})
	out = Draw(m3, []int{7}, NdSBP{S(0)})
	require.Contains(t, out, "[0:3]  [3:5]  [5:7]")
	require.Contains(t, out, "d0     d1     d2")

	// 3-D tensor on a 3-D mesh: one grid per leading block
	m8 := mesh.New("M", mesh.Axis{Name: "a", Size: 2}, mesh.Axis{Name: "b", Size: 2}, mesh.Axis{Name: "c", Size: 2})
	out = Draw(m8, []int{2, 4, 4}, NdSBP{S(0), S(1), S(2)})
	require.Contains(t, out, "[0:1, :, :]")
	require.Contains(t, out, "[1:2, :, :]")
	require.Contains(t, out, "rows 2:4  d6        d7")
	require.Contains(t, out, "d7=(a=1, b=1, c=1)")

	// a split that leaves some devices empty
	m4 := mesh.New("M", mesh.Axis{Name: "x", Size: 4})
	out = Draw(m4, []int{3, 2}, NdSBP{S(0)})
	require.Contains(t, out, "(empty)")

	// scalar
	out = Draw(m2, []int{}, NdSBP{P, P})
	require.Contains(t, out, "d0 + d1 + d2 + d3")
	require.False(t, strings.Contains(out, "rows"))
}
