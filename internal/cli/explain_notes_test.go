package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// explain prints its notes: on the shipped ZeRO-3 example, why it sends
// 1.48× DP and not the paper's 1.5×; with --link putting tp on the slow
// link, the tensor-parallel warning with its bytes (the figures are the
// lower and rt tests'). Naming the pipeline axis in --link says why it
// cannot be set.
func TestExplainPrintsNotes(t *testing.T) {
	code, out, errs := meshrun(t, "", "explain", "../../examples/train/mlp_zero3.mesh")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "  note: ZeRO-3 sends 31.1 KiB of gathers and reduce-scatters per device, 1.48× the 21.0 KiB")

	code, out, errs = meshrun(t, "", "explain", "--link", "dp=5:100,tp=5:12.5", "../../examples/train/megatron_dp_tp.mesh")
	require.Equal(t, ExitOK, code, errs)
	require.Contains(t, out, "  note: tensor parallelism over the slowest link: tp sends 260 B per device per step")
	code, out, errs = meshrun(t, "", "explain", "--link", "dp=5:12.5,tp=5:100", "../../examples/train/megatron_dp_tp.mesh")
	require.Equal(t, ExitOK, code, errs)
	require.NotContains(t, out, "note:")

	code, _, errs = meshrun(t, "", "explain", "--link", "pp=5:12.5", "../../examples/train/gpt/gpt_3d.mesh")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, "pp is the pipeline axis, whose sends between stages the cost model prices on the default link (5 us, 100 GB/s)")
}
