package sbp

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Plan's cache key tells apart every input that changes the path: shapes
// that would print alike, the element size, the order of the placements
// and each field of a placement.
func TestPlanKeySeparatesItsInputs(t *testing.T) {
	type in struct {
		shape    []int
		elem     int
		from, to NdSBP
	}
	ins := []in{
		{[]int{1, 2}, 4, NdSBP{S(0)}, NdSBP{B}},
		{[]int{12}, 4, NdSBP{S(0)}, NdSBP{B}},
		{[]int{1, 2}, 2, NdSBP{S(0)}, NdSBP{B}},
		{[]int{1, 2}, 4, NdSBP{B}, NdSBP{S(0)}},
		{[]int{1, 2}, 4, NdSBP{S(1)}, NdSBP{B}},
		{[]int{1, 2}, 4, NdSBP{P}, NdSBP{B}},
		{[]int{1, 2}, 4, NdSBP{PMax}, NdSBP{B}},
		{[]int{1, 2}, 4, NdSBP{S(0), B}, NdSBP{}},
		{[]int{1, 2, 300}, 4, NdSBP{S(0)}, NdSBP{B}},
	}
	seen := map[string]int{}
	for i, x := range ins {
		k := planKey(x.shape, x.elem, x.from, x.to)
		j, dup := seen[k]
		require.False(t, dup, "inputs %d and %d share a key", j, i)
		seen[k] = i
		require.Equal(t, k, planKey(append([]int(nil), x.shape...), x.elem, x.from.Clone(), x.to.Clone()), "input %d", i)
	}
}
