package planner

import (
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// The pricing walk counts a collective a local function writes as explain
// prices it, and a bucket's saving as explain does: on the local-view
// examples (SUMMA, 2.5D and 3D GEMM, whose written all-reduces share
// buckets) the walk's time in collectives is explain's modelled total, and
// no kind or axis has a negative time. (Written collectives' instructions
// carried no modelled time: the walk priced them free, and a bucket of
// them below zero.)
func TestWalkPricesWrittenCollectivesAsExplain(t *testing.T) {
	for _, name := range []string{"train/transformer_2d", "train/gemm_backward", "gemm_2d", "gemm_3d"} {
		g, _, err := lang.CheckFile("../examples/"+name+".mesh", lang.CheckOptions{})
		require.NoError(t, err)
		p, err := lower.Lower(g, lower.Options{Verify: true})
		require.NoError(t, err)
		require.Len(t, p.Exec.Programs, 1, name)
		r := walk(p, p.Exec.Programs[0], 1e12, "")
		comm := 0.0
		for k, v := range r.comm {
			require.GreaterOrEqual(t, v, 0.0, "%s: comm %s", name, k)
			comm += v
		}
		for k, v := range r.axis {
			require.GreaterOrEqual(t, v, 0.0, "%s: axis %s", name, k)
		}
		rep := lower.Explain(p)
		require.Positive(t, len(rep.Written), name)
		require.InDelta(t, rep.Totals.TimeUs, comm*1e6, 1e-6, name)
	}
}
