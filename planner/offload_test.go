package planner

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Under a budget that no strategy keeping the optimizer on the device
// meets, the planner offloads it to the host and prices the copies; without
// a budget offload is not searched (it only adds copies).
func TestOffloadChosenWhenMemoryBinds(t *testing.T) {
	p, err := Load("../examples/train/mlp_offload.mesh")
	require.NoError(t, err)
	res, err := Search(p, Options{Devices: 4, Memory: 6 << 10, Top: 3})
	require.NoError(t, err)
	require.NotEmpty(t, res.Ranked)
	best := res.Ranked[0]
	require.True(t, best.Cand.Offload, best.Label)
	require.Positive(t, best.Cost.Comm["host copy"], "the copies to and from the host are priced")
	require.LessOrEqual(t, best.Cost.Peak, int64(6<<10))
	onDevice := 0
	for _, e := range append(append([]*Evaluated{}, res.Ranked...), res.Losers...) {
		if !e.Cand.Offload {
			onDevice++
			require.False(t, e.Fits, "%s fits the budget without offload (peak %d)", e.Label, e.Cost.Peak)
		}
	}
	require.Positive(t, onDevice, "strategies without offload were priced too")
	require.Contains(t, string(p.Source(best.Cand, "")), "offload = optimizer")

	free, err := Search(p, Options{Devices: 4, Top: 3})
	require.NoError(t, err)
	for _, e := range append(append([]*Evaluated{}, free.Ranked...), free.Losers...) {
		require.False(t, e.Cand.Offload, e.Label)
	}
	require.False(t, strings.Contains(free.Ranked[0].Label, "offload"))
}
