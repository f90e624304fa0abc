package lower

import (
	"fmt"
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
	require.Contains(t, n[0], "ZeRO-2 with accumulate = 4: gradients are reduce-scattered once per micro-batch: 7.5 KiB of gradient reduce-scatters per device per step, 4× the 1.9 KiB of one reduce-scatter")
	require.Empty(t, notesOf(t, strings.Replace(accumulated, "zero = 2", "zero = 1", 1), nil))
	require.Empty(t, notesOf(t, strings.Replace(accumulated, "accumulate = 4", "accumulate = 1", 1), nil))
}

// ZeRO-3 with 4 micro-batches: the gradients are reduce-scattered 4 times
// (7.5 KiB, as above), every parameter is gathered for each micro-batch's
// forward (4 × 1920 B = 7.5 KiB: no full parameter is kept across
// micro-batches) and W2, which the backward reads, gathered again in each
// backward: 4 × 3/4 × 512 B = 1.5 KiB, 384 B each. W1 is gathered for the
// forward only (its input x needs no gradient). By hand, the step sends
// 7680 + 1536 + 7680 = 16896 B = 16.5 KiB, 4.40× the 3840 B (3.8 KiB) of
// DP's one all-reduce after the last micro-batch; the paper's accounting
// gives 3·4/2 = 6×.
func TestExplainNotesZeRO3WithAccumulation(t *testing.T) {
	n := notesOf(t, strings.Replace(accumulated, "zero = 2", "zero = 3", 1), nil)
	require.Len(t, n, 2)
	require.Contains(t, n[0], "ZeRO-3 with accumulate = 4: gradients are reduce-scattered, the parameters gathered for the forward and those a backward reads gathered again, once per micro-batch: 7.5 KiB of gradient reduce-scatters per device per step, 4× the 1.9 KiB")
	require.Contains(t, n[0], "and 1.5 KiB of the backward's gathers, 4× the 384 B of gathering once")
	require.Contains(t, n[0], "and 7.5 KiB of the forward's gathers (each micro-batch gathers the parameters again, so no full parameter is kept across micro-batches), 4× the 1.9 KiB of gathering once")
	require.Contains(t, n[1], "ZeRO-3 sends 16.5 KiB of gathers and reduce-scatters per device, 4.40× the 3.8 KiB")
	require.Contains(t, n[1], "3·4/2 = 6.0×")
	require.Contains(t, n[1], "W1 is gathered for the forward only")
}

// ZeRO on a pipeline of two ranks, one 8×8 f32 weight (256 B) each, dp=2,
// 4 micro-batches: by hand a gradient's reduce-scatter sends 128 B, 512 B
// a step, 4× one after the last micro-batch. ZeRO-2: both ranks send
// that, and the note names the first. ZeRO-3: rank 1 also gathers W1
// again in each backward (its input's gradient needs W1; W0's input is the
// data), 512 B a step, so rank 1 is the one named.
func TestExplainNotesZeROOnAPipelineFigures(t *testing.T) {
	note := func(zero int) string {
		src := strings.Replace(layers(2, 2, 4, "1f1b", nil), "clip = 1", fmt.Sprintf("zero = %d", zero), 1)
		p, err := lowerSource(src)
		require.NoError(t, err)
		notes := Explain(p).Pipeline.Notes
		for _, n := range notes {
			if strings.HasPrefix(n, "ZeRO") {
				return n
			}
		}
		return ""
	}
	require.Contains(t, note(2), "4 times a step instead of once: 512 B of gradient reduce-scatters per device per step on pipeline rank 0, 4× the 128 B of one reduce-scatter after the last micro-batch")
	z3 := note(3)
	require.Contains(t, z3, "512 B of gradient reduce-scatters per device per step on pipeline rank 1, 4× the 128 B")
	require.Contains(t, z3, "and 512 B of the backward's gathers, 4× the 128 B of gathering once")
	require.Empty(t, note(1))
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
// 256 B): Megatron's layout, the forward's all-reduce of the row-parallel
// product, 256 B (the loss and its gradient are then replicated over tp),
// and the gradient norm's scalar, 4 B: 260 B. With the links the other
// way round, or equal, there is nothing to say.
func TestExplainNotesTensorParallelOverTheSlowLink(t *testing.T) {
	src, err := os.ReadFile("../examples/train/megatron_dp_tp.mesh")
	require.NoError(t, err)
	n := notesOf(t, string(src), map[string]float64{"dp": 100, "tp": 12.5})
	require.Len(t, n, 1)
	require.Contains(t, n[0], "tp sends 260 B per device per step (2 all_reduce) over its 12.5 GB/s link; dp (data parallel) has 100 GB/s")
	require.Empty(t, notesOf(t, string(src), map[string]float64{"dp": 12.5, "tp": 100}))
	require.Empty(t, notesOf(t, string(src), nil))
}

// A forward-only program gets the link note too, per run: the transformer
// block of examples/dp_tp_block.mesh on [dp=2, tp=2] with tp on the slow
// link. By hand: a device holds [2, 8, 32] f32 of the activations (2 KiB);
// the two row-parallel outputs are reduce-scattered over tp (1 KiB each)
// and the layernormed rows all-gathered once before the MLP (1 KiB):
// 3 KiB.
func TestExplainNotesTensorParallelOverTheSlowLinkWithoutTraining(t *testing.T) {
	src, err := os.ReadFile("../examples/dp_tp_block.mesh")
	require.NoError(t, err)
	n := notesOf(t, string(src), map[string]float64{"dp": 100, "tp": 12.5})
	require.Len(t, n, 1)
	require.Contains(t, n[0], "tp sends 3.0 KiB per device per run (1 all_gather, 2 reduce_scatter) over its 12.5 GB/s link")
	require.Empty(t, notesOf(t, string(src), map[string]float64{"dp": 12.5, "tp": 100}))
}
