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
		k := string(planKey(nil, x.shape, x.elem, x.from, x.to))
		j, dup := seen[k]
		require.False(t, dup, "inputs %d and %d share a key", j, i)
		seen[k] = i
		require.Equal(t, k, string(planKey([]byte("stale"), x.shape, x.elem, x.from, x.to))[5:], "input %d", i)
	}
}

// NdSigs copies each accepted signature out of its scratch one: a copy
// equals the original, shares nothing with it, and appending to one of
// its placements leaves the others alone.
func TestNdSigCloneIsIndependent(t *testing.T) {
	s := newNdSig(2, 2)
	s.In[0][0], s.In[0][1], s.In[1][0], s.In[1][1] = S(0), B, B, S(1)
	s.Out[0], s.Out[1], s.Why[0], s.Why[1] = S(0), P, "rows", "partial"
	c := s.clone()
	require.Equal(t, s, c)
	s.In[0][0], s.Out[1], s.Why[0] = B, B, "changed"
	require.Equal(t, NdSBP{S(0), B}, c.In[0])
	require.Equal(t, NdSBP{S(0), P}, c.Out)
	require.Equal(t, "rows", c.Why[0])
	_ = append(c.In[1], PMax)
	require.Equal(t, NdSBP{S(0), P}, c.Out)
	_ = append(c.In[0], PMax)
	require.Equal(t, NdSBP{B, S(1)}, c.In[1])
}
