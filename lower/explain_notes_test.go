package lower

import (
	"os"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/mesh"
	"github.com/stretchr/testify/require"
)

// notesOf lowers a program (in examples/train, for its .npy inputs) with
// the given GB/s per axis (none: the default link) and returns explain's
// notes.
func notesOf(t *testing.T, src string, gbps map[string]float64) []string {
	g, err := lang.CheckSource("../examples/train/n.mesh", []byte(src), lang.CheckOptions{Dir: "../examples/train"})
	require.NoError(t, err)
	topo := mesh.Uniform(g.Mesh, mesh.DefaultLink)
	for name, bw := range gbps {
		l := mesh.DefaultLink
		l.Beta = 1 / (bw * 1e9)
		topo.Links[g.Mesh.AxisIndex(name)] = l
	}
	p, err := Lower(g, Options{Verify: true, Topo: topo})
	require.NoError(t, err)
	return Explain(p).Notes
}

const accumulated = `mesh M = [dp=4]
input x  : f32[32, 16] {S(0)} = load("x.npy")
input t  : f32[32, 4]  {S(0)} = load("t.npy")
param W1 : f32[16, 32] {B}    = normal(0, 0.2)
param W2 : f32[32, 4]  {B}    = normal(0, 0.2)
train {
    loss = mse(tanh(x @ W1) @ W2, t)
    optimizer = adamw(lr=0.01)
    steps = 3
    zero = 2
    accumulate = 4
}
`

// ZeRO-2 with 4 micro-batches reduce-scatters every gradient 4 times: by
// hand, W1 (2 KiB) and W2 (512 B) each send 3/4 of their bytes per
// reduce-scatter, 1920 B ≈ 1.9 KiB, 7.5 KiB a step. ZeRO-1 reduces once
// (no note), and so does ZeRO-2 without accumulation.
func TestExplainNotesZeRO2WithAccumulation(t *testing.T) {
	n := notesOf(t, accumulated, nil)
	require.Len(t, n, 1)
	require.Contains(t, n[0], "ZeRO-2 with accumulate = 4: gradients are reduce-scattered once per micro-batch, 7.5 KiB per device per step, 4× the 1.9 KiB")
	require.Empty(t, notesOf(t, strings.Replace(accumulated, "zero = 2", "zero = 1", 1), nil))
	require.Empty(t, notesOf(t, strings.Replace(accumulated, "accumulate = 4", "accumulate = 1", 1), nil))
}

// ZeRO-3 on a two-layer model with a bias: W1 (its input x needs no
// gradient) and b1 are gathered for the forward only. By hand: Ψ = 672
// f32, 2688 B; DP's all-reduce would send 2·3/4·2688 = 4032 B; ZeRO-3
// sends 3/4·(2688 forward + 512 W2 again + 2688 reduce-scatter) = 4416 B,
// 1.10×.
func TestExplainNotesZeRO3GatheredOnce(t *testing.T) {
	src := `mesh M = [dp=4]
input x  : f32[32, 16] {S(0)} = load("x.npy")
input t  : f32[32, 4]  {S(0)} = load("t.npy")
param W1 : f32[16, 32] {B}    = normal(0, 0.2)
param b1 : f32[32]     {B}    = zeros
param W2 : f32[32, 4]  {B}    = normal(0, 0.2)
train {
    loss = mse(tanh(x @ W1 + b1) @ W2, t)
    optimizer = adamw(lr=0.01)
    steps = 3
    zero = 3
}
`
	n := notesOf(t, src, nil)
	require.Len(t, n, 1)
	require.Contains(t, n[0], "ZeRO-3 sends 4.3 KiB of gathers and reduce-scatters per device, 1.10× the 3.9 KiB")
	require.Contains(t, n[0], "W1, b1 are gathered for the forward only")
}

// Megatron over [dp=2, tp=2] with tp on the slow link: tp's collectives
// per step, by hand (a device's batch is 16 rows, outputs [16, 4] f32 =
// 256 B): the forward's reduce-scatter 128 B, the backward's all-reduce
// 256 B, two scalar all-reduces 4 B each: 392 B. With the links the other
// way round, or equal, there is nothing to say.
func TestExplainNotesTensorParallelOverTheSlowLink(t *testing.T) {
	src, err := os.ReadFile("../examples/train/megatron_dp_tp.mesh")
	require.NoError(t, err)
	n := notesOf(t, string(src), map[string]float64{"dp": 100, "tp": 12.5})
	require.Len(t, n, 1)
	require.Contains(t, n[0], "tp sends 392 B per device per step (1 reduce_scatter, 3 all_reduce) over its 12.5 GB/s link; dp (data parallel) has 100 GB/s")
	require.Empty(t, notesOf(t, string(src), map[string]float64{"dp": 12.5, "tp": 100}))
	require.Empty(t, notesOf(t, string(src), nil))
}
