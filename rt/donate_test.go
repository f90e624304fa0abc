package rt

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// TestAdamFusedInPlaceOnTheCPU: the CPU's adam_fused writing p', m', v'
// over p, m, v (LaunchDonated) gives, bit for bit, what it gives into
// fresh buffers, in f32 (vector body and tail) and f64, hands back the
// donated buffers themselves as those results, a fresh one where a
// result is not donated, and leaves the gradient and scalars alone; a
// result written over another argument than its own is an error.
func TestAdamFusedInPlaceOnTheCPU(t *testing.T) {
	ctx := context.Background()
	cpu := &CPU{}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, n := range []int{1, 8, 37, 1000} {
			for _, donate := range [][]int{{0, 1, 2}, {-1, 1, 2}, {0, -1, -1}} {
				args, in, blk := adamArgsOf(dt, n)
				fk, _, _, _ := adamKernels(dt, n)
				want, err := cpu.LaunchResults(ctx, fk, args, in, blk, 3)
				require.NoError(t, err)
				g := append([]float64(nil), args[3].(*Tensor).Float64s()...)
				got, err := cpu.LaunchDonated(ctx, fk, args, in, blk, 3, donate)
				require.NoError(t, err)
				for k := range want {
					if donate[k] >= 0 {
						require.Same(t, args[k].(*Tensor), got[k].(*Tensor), "%s n=%d result %d: its argument's buffer", dt, n, k)
					} else {
						require.NotSame(t, args[k].(*Tensor), got[k].(*Tensor))
					}
					w, h := want[k].(*Tensor).Float64s(), got[k].(*Tensor).Float64s()
					for i := range w {
						require.Equal(t, math.Float64bits(w[i]), math.Float64bits(h[i]), "%s n=%d %v result %d [%d]", dt, n, donate, k, i)
					}
				}
				require.Equal(t, g, args[3].(*Tensor).Float64s(), "the gradient is read only")
			}
		}
	}
	args, in, blk := adamArgsOf(ir.F32, 8)
	fk, _, _, _ := adamKernels(ir.F32, 8)
	_, err := cpu.LaunchDonated(ctx, fk, args, in, blk, 3, []int{3, -1, -1})
	require.ErrorContains(t, err, "result 1 written over argument 4, not its own")
}

// adamArgsOf are adam_fused's ten arguments on n elements (p, m, v, g
// drawn, v ≥ 0, and six scalars), their blocks and the results' block.
func adamArgsOf(dt ir.DType, n int) ([]Buffer, []sbp.Block, sbp.Block) {
	vec := func(f func(i int) float64) *Tensor {
		v := make([]float64, n)
		for i := range v {
			v[i] = f(i)
		}
		return floatTensor(dt, []int{n}, v...)
	}
	scalar := func(v float64) *Tensor { return floatTensor(dt, []int{}, v) }
	p := vec(func(i int) float64 { return math.Sin(float64(i)) })
	m := vec(func(i int) float64 { return 1e-2 * math.Cos(float64(3*i)) })
	v := vec(func(i int) float64 { return 1e-3 * (1 + math.Sin(float64(7*i))) })
	g := vec(func(i int) float64 { return 0.1 * math.Sin(float64(5*i+1)) })
	args := []Buffer{p, m, v, g, scalar(0.9), scalar(0.999), scalar(1e-3), scalar(0.97), scalar(1e-8), scalar(0.999)}
	blk := sbp.Block{Off: []int{0}, Len: []int{n}}
	sb := sbp.Block{Off: []int{}, Len: []int{}}
	return args, []sbp.Block{blk, blk, blk, blk, sb, sb, sb, sb, sb, sb}, blk
}

// stepPeaks trains p with opts and returns every step's measured device
// peaks, rank by rank, and the result.
func stepPeaks(t *testing.T, p *lower.Plan, opts Options) ([][]int64, *TrainResult) {
	t.Helper()
	var peaks [][]int64
	res, err := Train(context.Background(), p, opts, TrainConfig{OnStep: func(s StepInfo) error {
		row := make([]int64, len(s.Run.Devices))
		for _, d := range s.Run.Devices {
			row[d.Device] = d.Peak
		}
		peaks = append(peaks, row)
		return nil
	}})
	require.NoError(t, err)
	return peaks, res
}

// undonated is p's executable plan with the donations to result k
// dropped (every donation: k < 0): what a runtime that gives those
// results fresh buffers holds.
func undonated(p *plan.Plan, k int) *plan.Plan {
	q := *p
	q.Programs = nil
	for _, prog := range p.Programs {
		c := *prog
		c.Instrs = append([]plan.Instr(nil), prog.Instrs...)
		for i := range c.Instrs {
			in := &c.Instrs[i]
			if k < 0 || in.Donate == nil {
				in.Donate = nil
				continue
			}
			in.Donate = append([]int(nil), in.Donate...)
			in.Donate[k] = -1
		}
		q.Programs = append(q.Programs, &c)
	}
	return &q
}

// TestDonationHonouredOrCounted: the worker writes a fused update's
// results over p, m, v only where it alone holds a buffer this rank
// made, and otherwise counts a fresh buffer. A parameter loaded from a
// file is, in the first step, a view of the file's cached data, so that
// step's peak is the plan's without the donation of p (p' fresh,
// counted; m and v are this rank's zeros), above the plan's; from the
// second step on (the parameter is the last step's result) the plan's.
// A backend without in-place kernels (as CUDA's) holds the plan without
// any donation every step. Training is bit for bit the same in all
// three, as without the fusion, and again after (the file's cached data
// was not written).
func TestDonationHonouredOrCounted(t *testing.T) {
	dir := t.TempDir()
	w := make([]float32, 64*32)
	for i := range w {
		w[i] = float32(math.Sin(float64(i))) / 4
	}
	require.NoError(t, npy.WriteFile(filepath.Join(dir, "W.npy"), []int{64, 32}, w))
	src := "mesh M = [dp=2]\ninput x : f32[8, 64] {S(0)} = normal(0, 1)\ninput t : f32[8, 32] {S(0)} = normal(0, 1)\n" +
		"param W : f32[64, 32] = load(\"W.npy\")\ntrain {\n    loss = mse(x @ W, t)\n    optimizer = adam(lr=0.01)\n    steps = 3\n    data_axis = dp\n}\n"
	g, err := lang.CheckSource(filepath.Join(dir, "w.mesh"), []byte(src), lang.CheckOptions{Dir: dir})
	require.NoError(t, err)
	fp, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	pp, err := lower.Lower(g, lower.Options{Verify: true, NoFuseAdam: true})
	require.NoError(t, err)
	fresh, freshP := undonated(fp.Exec, -1).Peaks(), undonated(fp.Exec, 0).Peaks()
	require.Less(t, fp.Peak[0], freshP[0], "donation lowers the plan's peak")
	require.Less(t, freshP[0], fresh[0])
	peaks, res := stepPeaks(t, fp, Options{})
	require.Equal(t, freshP, peaks[0], "step 1: W is the file's data, W' a fresh buffer")
	for s := 1; s < len(peaks); s++ {
		require.Equal(t, fp.Peak, peaks[s], "step %d: every result donated", s+1)
	}
	cpu := &CPU{BLAS: DefaultBLAS()}
	hidden, resHidden := stepPeaks(t, fp, Options{Backend: hideResults{cpu}})
	for s := range hidden {
		require.Equal(t, fresh, hidden[s], "step %d without in-place kernels", s+1)
	}
	_, plain := stepPeaks(t, pp, Options{})
	requireSameTraining(t, plain, res, "donated")
	requireSameTraining(t, plain, resHidden, "fresh buffers")
	_, again := stepPeaks(t, fp, Options{})
	requireSameTraining(t, plain, again, "again: the file's data unchanged")
}

// TestDonatedMLPTrainsAsThreeOps: bench/torch_mlp.sh's MLP (two 512×1024
// parameters, the optimizer step its peak), one device and [dp=2],
// trains bit for bit as with the three separate Adam ops, every update
// fused and donated, and its measured peak is the plan's every step (the
// parameters are drawn into this rank's own buffers), below the unfused
// plan's.
func TestDonatedMLPTrainsAsThreeOps(t *testing.T) {
	for _, c := range []struct{ mesh, batch string }{{"dp=1", ""}, {"dp=2", "{S(0)}"}} {
		src := "mesh M = [" + c.mesh + "]\ninput x : f32[256, 512] " + c.batch + " = normal(0, 1)\ninput t : f32[256, 512] " + c.batch + " = normal(0, 1)\n" +
			"param W1 : f32[512, 1024] = normal(0, 0.04)\nparam W2 : f32[1024, 512] = normal(0, 0.03)\n" +
			"train {\n    loss = mse(gelu(x @ W1) @ W2, t)\n    optimizer = adam(lr=0.001)\n    steps = 3\n}\n"
		g, err := lang.CheckSource("mlp.mesh", []byte(src), lang.CheckOptions{})
		require.NoError(t, err)
		fp, err := lower.Lower(g, lower.Options{Verify: true})
		require.NoError(t, err)
		pp, err := lower.Lower(g, lower.Options{NoFuseAdam: true})
		require.NoError(t, err)
		require.Less(t, fp.Peak[0], pp.Peak[0], c.mesh)
		peaks, res := stepPeaks(t, fp, Options{})
		_, plain := stepPeaks(t, pp, Options{})
		requireSameTraining(t, plain, res, c.mesh)
		for s := range peaks {
			require.Equal(t, fp.Peak, peaks[s], "%s step %d", c.mesh, s+1)
		}
	}
}
