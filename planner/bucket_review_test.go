package planner

import (
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// A written all-reduce (a local function's) carries no modelled time in its
// instruction, so a bucket's saving must not make its time negative: the
// pricing walk of transformer_2d, whose written all-reduces share buckets,
// has no negative time in any kind or axis.
func TestWrittenBucketMembersPriceNoNegativeTime(t *testing.T) {
	g, _, err := lang.CheckFile("../examples/train/transformer_2d.mesh", lang.CheckOptions{})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	joins := 0
	for _, in := range p.Exec.Programs[0].Instrs {
		if in.Joins && in.Step.Time == 0 {
			joins++
		}
	}
	require.Positive(t, joins, "a written all-reduce joins a bucket")
	r := walk(p, p.Exec.Programs[0], 1e12, "")
	for k, v := range r.comm {
		require.GreaterOrEqual(t, v, 0.0, "comm %s", k)
	}
	for k, v := range r.axis {
		require.GreaterOrEqual(t, v, 0.0, "axis %s", k)
	}
	require.GreaterOrEqual(t, r.model, 0.0, "model-axis time")
}
