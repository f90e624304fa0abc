package planner

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Declared the wrong way round, the MLP's weights move to Megatron's
// column-then-row placements, and each change lowers the priced step.
func TestRefineFindsMegatronPlacements(t *testing.T) {
	p, err := Load("testdata/badmlp.mesh")
	require.NoError(t, err)
	res, err := Search(p, Options{Devices: 4, Top: 1, Space: Space{NoPipeline: true}})
	require.NoError(t, err)
	ref := Refine(res)
	t.Log(ref.Text())
	require.Equal(t, "{B, S(1)}", ref.Best.Cand.Place["W1"])
	require.Equal(t, "{B, S(0)}", ref.Best.Cand.Place["W2"])
	require.Less(t, ref.Best.Cost.Step, res.Ranked[0].Cost.Step)
	require.Len(t, ref.Changes, 2)
	// the rewritten source declares them so, and nothing else changed
	src := string(p.Source(ref.Best.Cand, ""))
	require.Contains(t, src, "param W1 : f32[256, 1024] {B, S(1)} = normal(0, 0.05)")
	require.Contains(t, src, "param W2 : f32[1024, 256] {B, S(0)} = normal(0, 0.05)")
}

// Roles group parameters whose names differ in digits and that are
// declared alike; a role whose members differ is split.
func TestRoles(t *testing.T) {
	p, err := Load("testdata/mlp4.mesh")
	require.NoError(t, err)
	require.Equal(t, []string{"A", "B"}, p.roles())
	require.Len(t, p.members("A"), 4)
	// axis 0 is the data axis: only axis 1's entry changes
	require.Equal(t, []string{"{B, B}", "{B, S(0)}"}, alternatives([]string{"B", "S(1)"}, 2, 0))
	require.Equal(t, []string{"{B, S(1)}", "{S(1), S(1)}", "{S(0), B}", "{S(0), S(0)}"}, alternatives([]string{"S(0)", "S(1)"}, 2, -1))
}
