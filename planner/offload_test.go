package planner

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/stretchr/testify/require"
)

// Under a budget that no strategy keeping the optimizer on the device
// meets, the planner offloads it to the host and prices the copies; without
// a budget offload is not searched (it only adds copies). (The budget,
// 6000 bytes, is below the least on-device peak, 6118 bytes since the
// fused Adam updates write over p, m, v: lower/fuse_adam.go.)
func TestOffloadChosenWhenMemoryBinds(t *testing.T) {
	const budget = 6000
	p, err := Load("../examples/train/mlp_offload.mesh")
	require.NoError(t, err)
	res, err := Search(p, Options{Devices: 4, Memory: budget, Top: 3})
	require.NoError(t, err)
	require.NotEmpty(t, res.Ranked)
	best := res.Ranked[0]
	require.True(t, best.Cand.Offload, best.Label)
	require.Positive(t, best.Cost.Comm["host copy"], "the copies to and from the host are priced")
	require.LessOrEqual(t, best.Cost.Peak, int64(budget))
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

// Offload with a pipeline axis: under a budget below the least peak of any
// strategy that keeps the optimizer on the device, the planner's best
// offloads it, and offloading pipelined strategies are priced (their
// copies on the host link) and written back as files that check.
func TestOffloadWithPipeline(t *testing.T) {
	p, err := Load("../examples/train/mlp_offload_pipe.mesh")
	require.NoError(t, err)
	onDevice, err := Search(p, Options{Devices: 4, Top: 1000, Space: Space{Offload: []bool{false}}})
	require.NoError(t, err)
	least := int64(1 << 62)
	for _, e := range append(append([]*Evaluated{}, onDevice.Ranked...), onDevice.Losers...) {
		least = min(least, e.Cost.Peak)
	}
	budget := least - 1
	res, err := Search(p, Options{Devices: 4, Memory: budget, Top: 3})
	require.NoError(t, err)
	require.NotEmpty(t, res.Ranked, res.Text())
	require.True(t, res.Ranked[0].Cand.Offload, res.Ranked[0].Label)
	var piped *Evaluated
	for _, e := range append(append([]*Evaluated{}, res.Ranked...), res.Losers...) {
		if e.Cand.Offload && e.Cand.PP > 1 && e.Fits {
			piped = e
			break
		}
	}
	require.NotNil(t, piped, "an offloading pipelined strategy fits %d B:\n%s", budget, res.Text())
	require.Positive(t, piped.Cost.Comm["host copy"], piped.Label)
	src := p.Source(piped.Cand, "")
	require.Contains(t, string(src), "offload = optimizer")
	_, err = lang.CheckSource(p.Path, src, lang.CheckOptions{Devices: 4, Dir: filepath.Dir(p.Path)})
	require.NoError(t, err, piped.Label)
}
