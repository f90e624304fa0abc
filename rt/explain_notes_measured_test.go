package rt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

// Two Megatron blocks (column- then row-parallel matmul) on a pipeline of
// two ranks, each rank a [dp=2, tp=2] grid.
const tpPipeline = `mesh M = [pipeline pp=2, dp=2, tp=2]
input x  : f32[16, 8]  {S(0), B}    = normal(0, 1)
param A0 : f32[8, 16]  {B, S(1)}    = normal(0, 0.3)
param B0 : f32[16, 8]  {B, S(0)}    = normal(0, 0.3)
param A1 : f32[8, 16]  {B, S(1)}    = normal(0, 0.3)
param B1 : f32[16, 8]  {B, S(0)}    = normal(0, 0.3)
train {
    pipeline = 1f1b
    microbatches = 2
    h = tanh(tanh(x @ A0) @ B0)
    h = tanh(tanh(h @ A1) @ B1)
    loss = sum(h * h)
    optimizer = adam(lr=0.01)
    zero = %d
}
`

// lowerWithLinks lowers src (its files in dir) with the given GB/s per
// axis of the stage mesh.
func lowerWithLinks(t *testing.T, src, dir string, gbps map[string]float64) *lower.Plan {
	g, err := lang.CheckSource(filepath.Join(dir, "n.mesh"), []byte(src), lang.CheckOptions{Dir: dir})
	require.NoError(t, err, lang.Render(err, map[string][]byte{"n.mesh": []byte(src)}))
	topo := mesh.Uniform(g.Mesh, mesh.DefaultLink)
	for name, bw := range gbps {
		l := mesh.DefaultLink
		l.Beta = 1 / (bw * 1e9)
		topo.Links[g.Mesh.AxisIndex(name)] = l
	}
	p, err := lower.Lower(g, lower.Options{Verify: true, Topo: topo})
	require.NoError(t, err)
	return p
}

// measuredPerRank runs one training step and returns, per pipeline rank
// (one without a pipeline), the bytes a device of it sent in the
// collectives keep selects, averaged over the rank's devices (a ring
// sends (p-1)/p of a group's bytes per device on average, however
// unevenly a small tensor splits). The bytes are the runtime's; an
// event's collective is the instruction it executed: the k-th event of a
// name is the k-th instruction of that name in the device's program,
// which a device runs in order.
func measuredPerRank(t *testing.T, p *lower.Plan, keep func(in *plan.Instr, axis string) bool) []float64 {
	res, err := Train(context.Background(), p, Options{}, TrainConfig{})
	require.NoError(t, err)
	m := p.Exec.Mesh
	rankOf := func(int) int { return 0 }
	ranks := 1
	if p.Pipe != nil {
		ranks = m.Axes[p.Pipe.Axis].Size
		rankOf = func(d int) int { return m.Coord(d)[p.Pipe.Axis] }
	}
	sum := make([]float64, ranks)
	for d, st := range res.Last.Devices {
		steps := map[string][]*plan.Instr{}
		prog := p.Exec.ProgramOf(d)
		for i := range prog.Instrs {
			if in := &prog.Instrs[i]; in.Kind == plan.Collective {
				steps[in.Name()] = append(steps[in.Name()], in)
			}
		}
		for _, e := range st.Events {
			q := steps[e.Name]
			if e.Kind != "comm" || len(q) == 0 {
				continue // sends between stages, ring steps
			}
			in := q[0]
			steps[e.Name] = q[1:]
			if keep(in, m.Axes[in.Step.Axis].Name) {
				sum[rankOf(d)] += float64(e.Bytes)
			}
		}
		for name, q := range steps {
			require.Empty(t, q, "device %d: %s not run as often as the program says", d, name)
		}
	}
	for r := range sum {
		sum[r] /= float64(m.Size() / ranks)
	}
	return sum
}

// over selects the collectives over an axis, of the given kinds (none:
// any kind).
func over(axis string, kinds ...string) func(in *plan.Instr, ax string) bool {
	return func(in *plan.Instr, ax string) bool {
		return ax == axis && (len(kinds) == 0 || slices.Contains(kinds, string(in.Step.Kind)))
	}
}

// busiestRank is the rank that sent the most (the first among equals).
func busiestRank(per []float64) int {
	best := 0
	for r, b := range per {
		if b > per[best] {
			best = r
		}
	}
	return best
}

// explain's note on tensor parallelism over the slowest link gives, for
// a pipeline, the bytes the runtime measures over tp on the rank that
// sends the most there (two Megatron blocks; the shipped 3D-parallel GPT);
// with tp on the fast link there is no note.
func TestSlowLinkNoteOnAPipelineMeasured(t *testing.T) {
	gpt, err := os.ReadFile("../examples/train/gpt/gpt_3d.mesh")
	require.NoError(t, err)
	for _, c := range []struct{ name, src, dir string }{
		{"two blocks", fmt.Sprintf(tpPipeline, 0), ""},
		{"gpt_3d", strings.Replace(string(gpt), "steps = 10", "steps = 1", 1), "../examples/train/gpt"},
	} {
		p := lowerWithLinks(t, c.src, c.dir, map[string]float64{"dp": 100, "tp": 12.5})
		per := measuredPerRank(t, p, over("tp"))
		r := busiestRank(per)
		require.Positive(t, per[r], c.name)
		t.Logf("%s: bytes over tp per device per step, by rank: %v", c.name, per)
		want := fmt.Sprintf("tp sends %s per device per step on pipeline rank %d (", lower.HumanBytes(per[r]), r)
		notes := lower.Explain(p).Notes
		require.Len(t, notes, 1, c.name)
		require.Contains(t, notes[0], want, c.name)
		require.Empty(t, lower.Explain(lowerWithLinks(t, c.src, c.dir, map[string]float64{"dp": 12.5, "tp": 100})).Notes, c.name)
	}
}

// explain's ZeRO-2-on-a-pipeline note gives the gradient reduce-scatter
// bytes the runtime measures per step on the busiest rank, micro-batches
// times what one reduce-scatter after the last micro-batch sends.
func TestZeROPipelineNoteMeasured(t *testing.T) {
	src := strings.Replace(fmt.Sprintf(tpPipeline, 2), "[pipeline pp=2, dp=2, tp=2]", "[pipeline pp=2, dp=4]", 1)
	src = strings.NewReplacer("{S(0), B}", "{S(0)}", "{B, S(1)}", "{B}", "{B, S(0)}", "{B}").Replace(src)
	p := lowerWithLinks(t, src, "", nil)
	per := measuredPerRank(t, p, over("dp", "reduce_scatter")) // every one a gradient's
	r := busiestRank(per)
	require.Positive(t, per[r])
	want := fmt.Sprintf("2 times a step instead of once: %s of gradient reduce-scatters per device per step on pipeline rank %d, 2× the %s",
		lower.HumanBytes(per[r]), r, lower.HumanBytes(per[r]/2))
	require.Contains(t, strings.Join(lower.Explain(p).Pipeline.Notes, "\n"), want)
}

// explain's notes on ZeRO with gradient accumulation, on the shipped
// example with accumulate = 4, give what the runtime measures: ZeRO-2's
// and ZeRO-3's gradient reduce-scatters per step, ZeRO-3's gathers and
// reduce-scatters together, and, as the reference, DP's one all-reduce of
// the gradients (the loss, a scalar, left out).
func TestAccumulateNotesMeasured(t *testing.T) {
	src, err := os.ReadFile("../examples/train/mlp_zero3.mesh")
	require.NoError(t, err)
	at := func(zero int) *lower.Plan {
		s := strings.NewReplacer("zero = 3", fmt.Sprintf("zero = %d\n    accumulate = 4", zero), "steps = 30", "steps = 1").Replace(string(src))
		return lowerWithLinks(t, s, "../examples/train", nil)
	}
	notScalar := func(in *plan.Instr) bool { return len(in.Shape) > 0 }
	dp := measuredPerRank(t, at(0), func(in *plan.Instr, ax string) bool {
		return notScalar(in) && in.Step.Kind == "all_reduce"
	})[0]
	for _, z := range []int{2, 3} {
		p := at(z)
		notes := strings.Join(lower.Explain(p).Notes, "\n")
		rs := measuredPerRank(t, p, over("dp", "reduce_scatter"))[0]
		require.Contains(t, notes, fmt.Sprintf("%s of gradient reduce-scatters per device per step, 4× the %s", lower.HumanBytes(rs), lower.HumanBytes(rs/4)), "zero=%d", z)
		if z == 3 {
			both := measuredPerRank(t, p, over("dp", "reduce_scatter", "all_gather"))[0]
			t.Logf("ZeRO-3 with accumulate = 4 sends %g B per device per step, DP %g B", both, dp)
			require.Contains(t, notes, fmt.Sprintf("ZeRO-3 sends %s of gathers and reduce-scatters per device, %.2f× the %s", lower.HumanBytes(both), both/dp, lower.HumanBytes(dp)))
		}
	}
}
