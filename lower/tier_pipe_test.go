package lower

import (
	"slices"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

// offloadPipeSrc has two stages of one parameter each (of two sizes), f16 (an overflow
// flag) and clipping (a global norm): both are reduced in host memory
// from pieces on every stage.
const offloadPipeSrc = `mesh M = [pipeline pp=2, dp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
input t : f32[8, 8] {S(0)} = normal(0, 1)
param W : f32[4, 4] = normal(0, 0.5)
param V : f32[4, 8] = normal(0, 0.5)
train {
    pipeline = 1f1b
    microbatches = 2
    h = tanh(x @ W)
    stage = 1
    h = tanh(h @ V)
    loss = mse(h, t)
    optimizer = adam(lr=0.05)
    zero = 1
    precision = f16
    clip = 0.5
    offload = optimizer
}
`

// The tier pass on a pipeline: each rank's program keeps its own stage's
// parameters and optimizer states as host sources (and no other stage's),
// no send or receive runs in host memory, a host value a rank sends is
// fetched just before (and one it receives offloaded just after), and the
// plan passes the cross-rank dry run.
func TestTierPassOnAPipeline(t *testing.T) {
	p, err := lowerSource(offloadPipeSrc)
	require.NoError(t, err)
	require.NotNil(t, p.Pipe)
	require.Len(t, p.Exec.Programs, 2)
	own := []string{"W", "V"}
	staged := 0
	for r, prog := range p.Exec.Programs {
		var hostSources []string
		for i := range prog.Instrs {
			in := &prog.Instrs[i]
			if in.Kind == plan.Source && in.Host && !strings.Contains(in.Label, ".") && len(in.Shape) > 0 {
				hostSources = append(hostSources, in.Label)
			}
			require.False(t, in.Host && (in.Kind == plan.Send || in.Kind == plan.Recv), "rank %d: %s", r, in.Name())
			switch in.Kind {
			case plan.Send:
				prev := &prog.Instrs[i-1]
				if prev.Kind == plan.Fetch && prev.Out == in.Args[0] {
					staged++
				}
			case plan.Recv:
				if next := &prog.Instrs[i+1]; next.Kind == plan.Offload && next.Args[0] == in.Out {
					require.True(t, next.Host)
					staged++
				}
			}
		}
		require.Equal(t, []string{own[r]}, hostSources, "rank %d's host sources", r)
	}
	// each rank sends its pieces of the overflow flag and the norm, or the
	// results, and receives the others: 4 sends and 4 receives in all
	require.Equal(t, 8, staged)
	require.Len(t, p.HostPeak, 4)
	require.NotEqual(t, p.HostPeak[0], p.HostPeak[2], "each rank's host tier is its own program's")
	for r := range p.HostPeak {
		require.Equal(t, p.Exec.HostPeak(r), p.HostPeak[r], "rank %d: its own program's walk", r)
	}
}

// The host peaks the memory pass shares between ranks (one replay per
// program and distinct sizes of its uneven blocks) are each rank's own
// walk over its program's host tier, where blocks split unevenly make the
// ranks' host tiers differ: without a pipeline (6 rows over dp=4, then
// tp=2; 7 over dp=4) and on one (a micro-batch of 3 rows over dp=3 under
// ZeRO-3, parameters of 5 and 7 rows split over dp=3).
func TestSharedHostPeaksAreEachRanksWalk(t *testing.T) {
	for name, src := range map[string]string{"no pipeline": `mesh M = [dp=4, tp=2]
input x : f32[6, 512] {S(0), S(0)} = normal(0, 1)
param W : f32[6, 512] {S(0), S(0)} = normal(0, 1)
param V : f32[7, 3] {S(0), B} = normal(0, 1)
train {
    loss = mean(x * W) + sum(V)
    optimizer = adam(lr=0.01)
    data_axis = dp
    zero = 1
    offload = optimizer+params
}
`, "pipeline": `mesh M = [pipeline pp=2, dp=3]
input x : f32[6, 5] {S(0)} = normal(0, 1)
param W : f32[5, 7] = normal(0, 1)
param V : f32[7, 3] = normal(0, 1)
train {
    h = tanh(x @ W)
    stage = 1
    loss = sum(h @ V)
    optimizer = adam(lr=0.01)
    zero = 3
    microbatches = 2
    clip = 1
    offload = optimizer+params
}
`} {
		p, err := lowerSource(src)
		require.NoError(t, err, name)
		distinct := map[int64]bool{}
		for r := range p.HostPeak {
			require.Equal(t, p.Exec.HostPeak(r), p.HostPeak[r], "%s: rank %d", name, r)
			require.Equal(t, p.Exec.Peak(r), p.Peak[r], "%s: rank %d", name, r)
			require.Equal(t, p.Exec.TotalPeak(r), p.Exec.TotalPeaks()[r], "%s: rank %d", name, r)
			distinct[p.HostPeak[r]] = true
		}
		require.Greater(t, len(distinct), 2, "%s: the ranks' host peaks differ: %v", name, p.HostPeak)
	}
}

// A budget that is a share of this machine's RAM (the default, without
// --memory) holds the host tier too: a plan whose device peak fits it but
// whose two tiers together do not fails to lower, naming both; the same
// budget for the device alone (--memory) lets it through.
func TestBudgetHoldsTheHostTierWhenItIsTheMachines(t *testing.T) {
	g, err := lang.CheckSource("p.mesh", []byte(offloadPipeSrc), lang.CheckOptions{})
	require.NoError(t, err)
	free, err := Lower(g, Options{})
	require.NoError(t, err)
	device, total := slices.Max(free.Peak), slices.Max(free.Exec.TotalPeaks())
	require.Greater(t, total, device, "the host tier holds something")
	for r := range free.Peak {
		require.LessOrEqual(t, free.Exec.TotalPeak(r), free.Peak[r]+free.HostPeak[r], "rank %d: one replay of both tiers is at most the sum of their peaks", r)
	}
	_, err = Lower(g, Options{Memory: device})
	require.NoError(t, err, "the device alone fits")
	_, err = Lower(g, Options{Memory: total, HostInBudget: true})
	require.NoError(t, err, "both tiers fit")
	_, err = Lower(g, Options{Memory: total - 1, HostInBudget: true})
	require.ErrorContains(t, err, "device and host memory together peak at")
	require.ErrorContains(t, err, "--memory budgets the device alone")
}
