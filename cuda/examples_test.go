package cuda_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/cuda"
	"github.com/meshrun/meshrun/internal/cli"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
)

// Whole examples on the CUDA backend (every rank of the mesh sharing one
// device, collectives through host copies) against the CPU backend, and
// the CUDA run on the mesh against the CPU run on one device. Outputs
// agree within the stated units in the last place: the GPU's GEMMs sum
// in another order than the CPU's BLAS, and its exp/tanh/erfc round
// differently, and those differences travel through the program (and
// through training steps). Bounds per kind of run, in f32 ulps of the
// CPU's value, for the elements above a floor relative to the output's
// largest magnitude (below it, ulps mean nothing: a sum that cancels to
// near zero carries the absolute error of its large terms).
const (
	runULPs   = 64
	trainULPs = 4096 // after the example's steps; the loss curve is compared too
	halfULPs  = 8    // bf16 and f16 params after training, in their own ulps
	runFloor  = 1e-5 // × the output's largest |value|
	trainFlr  = 1e-4
)

// lowered compiles an example for its mesh, or for one device. A program
// with local functions is written per device: its one-device form is the
// program checked again on a mesh whose axes have size 1 (as meshrun
// check's reference).
func lowered(t *testing.T, path string, single bool) *lower.Plan {
	t.Helper()
	g, _, err := lang.CheckFile(path, lang.CheckOptions{Devices: 64})
	require.NoError(t, err)
	if single && g.HasLocal() {
		g, err = lang.CheckSource(g.File, g.Sources[g.File], lang.CheckOptions{Dir: filepath.Dir(g.File), SingleDevice: true})
		require.NoError(t, err)
	}
	opts := lower.Options{}
	if single {
		opts.Mesh = g.Mesh.Single()
	}
	p, err := lower.Lower(g, opts)
	require.NoError(t, err)
	return p
}

func newBackend(t *testing.T, notes *bytes.Buffer) *cuda.Backend {
	t.Helper()
	cuda.UseDriver(t)
	be, err := cuda.NewBackend(0, notes)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, be.Close()) })
	return be
}

// ulps is |got − want| in f32 units in the last place of want (0 within
// floor; NaN and infinities must match exactly).
func ulps(got, want, floor float64) float64 {
	if math.IsNaN(want) || math.IsInf(want, 0) {
		if math.IsNaN(want) && math.IsNaN(got) || got == want {
			return 0
		}
		return math.Inf(1)
	}
	d := math.Abs(got - want)
	if d <= floor {
		return 0
	}
	w := float32(math.Abs(want))
	return d / float64(math.Nextafter32(w, float32(math.Inf(1)))-w)
}

func compare(t *testing.T, what string, got, want *rt.Tensor, bound, relFloor float64) float64 {
	t.Helper()
	require.Equal(t, want.Shape, got.Shape, what)
	require.Equal(t, want.DType, got.DType, what)
	g, w := got.Float64s(), want.Float64s()
	floor := 0.0
	for _, v := range w {
		if !math.IsInf(v, 0) && !math.IsNaN(v) {
			floor = math.Max(floor, relFloor*math.Abs(v))
		}
	}
	worst := 0.0
	for i := range w {
		u := ulps(g[i], w[i], floor)
		require.LessOrEqual(t, u, bound, "%s[%d]: cuda %v, cpu %v", what, i, g[i], w[i])
		worst = math.Max(worst, u)
	}
	return worst
}

// halfULP is one ulp of a half-precision dtype in f32 ulps (bf16 keeps 8
// of f32's 24 significant bits, f16 11).
// lossDType is the precision a train block's loss is computed in: its
// declared dtype, or the half precision of precision = bf16 | f16 (the
// forward runs in it, the loss cast up after).
func lossDType(tr *ir.Train) ir.DType {
	switch tr.Precision {
	case "bf16":
		return ir.BF16
	case "f16":
		return ir.F16
	}
	return tr.Loss.Type.DType
}

func halfULP(dt ir.DType) float64 {
	switch dt {
	case ir.BF16:
		return 1 << 16
	case ir.F16:
		return 1 << 13
	}
	return 1
}

func TestExamplesRunOnCUDA(t *testing.T) {
	for _, ex := range []string{"dp_mlp", "megatron_mlp", "dp_tp_block", "gemm_2d", "long_attention"} {
		t.Run(ex, func(t *testing.T) {
			var notes bytes.Buffer
			be := newBackend(t, &notes)
			path := "../examples/" + ex + ".mesh"
			p := lowered(t, path, false)
			got, err := rt.Run(context.Background(), p, rt.Options{Backend: be})
			require.NoError(t, err)
			want, err := rt.Run(context.Background(), p, rt.Options{})
			require.NoError(t, err)
			single, err := rt.Run(context.Background(), lowered(t, path, true), rt.Options{})
			require.NoError(t, err)
			for i, name := range want.Names {
				w1 := compare(t, name+" vs cpu", got.Outputs[i], want.Outputs[i], runULPs, runFloor)
				w2 := compare(t, name+" vs one cpu device", got.Outputs[i], single.Output(name), runULPs, runFloor)
				t.Logf("%s on %s: %s worst %.0f ulp vs cpu, %.0f vs one device", ex, p.Exec.Mesh, name, w1, w2)
			}
			t.Logf("fell back to the CPU: %v", be.Fallbacks())
			require.Empty(t, be.Fallbacks(), "every op of %s has a CUDA kernel", ex)
		})
	}
}

func TestExamplesTrainOnCUDA(t *testing.T) {
	for _, ex := range []string{"mlp_dp", "gemm_backward", "mlp_bf16", "megatron_dp_tp", "mlp_offload", "gpt/gpt"} {
		t.Run(ex, func(t *testing.T) {
			var notes bytes.Buffer
			be := newBackend(t, &notes)
			p := lowered(t, "../examples/train/"+ex+".mesh", false)
			got, err := rt.Train(context.Background(), p, rt.Options{Backend: be}, rt.TrainConfig{})
			require.NoError(t, err)
			want, err := rt.Train(context.Background(), p, rt.Options{}, rt.TrainConfig{})
			require.NoError(t, err)
			require.Len(t, got.Losses, len(want.Losses))
			worst := 0.0
			// a loss in bf16 or f16 is held to its own ulps, as the params:
			// on a GPU, cuBLAS sums the GEMMs in another order than the
			// CPU's BLAS, and one f32 rounding flips a half's last bit
			lossBound := float64(trainULPs)
			if h := halfULP(lossDType(p.Graph.Train)); h > 1 {
				lossBound = halfULPs * h
			}
			for i := range want.Losses {
				u := ulps(got.Losses[i], want.Losses[i], 0)
				require.LessOrEqual(t, u, lossBound, "loss of step %d: cuda %v, cpu %v", i+1, got.Losses[i], want.Losses[i])
				worst = math.Max(worst, u)
			}
			for i, prm := range want.Params {
				bound := float64(trainULPs)
				if h := halfULP(want.Final[i].DType); h > 1 {
					bound = halfULPs * h
				}
				w := compare(t, fmt.Sprintf("param %s", prm.Name), got.Final[i], want.Final[i], bound, trainFlr)
				worst = math.Max(worst, w)
			}
			t.Logf("%s: %d steps on %s, worst %.0f ulp; fell back: %v", ex, len(want.Losses), p.Exec.Mesh, worst, be.Fallbacks())
			require.Empty(t, be.Fallbacks(), "every op of %s has a CUDA kernel", ex)
		})
	}
}

// TestCLICheckOnCUDA: meshrun check --backend cuda, the whole command: the
// mesh run on the device against the one-device CPU run.
func TestCLICheckOnCUDA(t *testing.T) {
	cuda.UseDriver(t)
	for _, ex := range []string{"../examples/megatron_mlp.mesh", "../examples/train/mlp_bf16.mesh"} {
		var out, errb bytes.Buffer
		code := cli.Main([]string{"check", ex, "--backend", "cuda"}, strings.NewReader(""), &out, &errb)
		require.Equal(t, cli.ExitOK, code, "%s%s", out.String(), errb.String())
		require.Contains(t, out.String(), "PASS")
		require.Contains(t, errb.String(), "meshrun: kernels run on cuda (")
		require.NotContains(t, errb.String(), "no CUDA kernel", "no fallback")
	}
}

// TestCLICheckTF32OnCUDA: with --tf32 the mesh's f32 matmuls run in TF32
// on the device, and check passes at TF32's resolution (f16's unit
// roundoff); held to f32's default bounds the same runs fail, so TF32 was
// in effect.
func TestCLICheckTF32OnCUDA(t *testing.T) {
	cuda.UseDriver(t)
	for _, ex := range []string{"../examples/megatron_mlp.mesh", "../examples/train/mlp_dp.mesh"} {
		var out, errb bytes.Buffer
		code := cli.Main([]string{"check", ex, "--backend", "cuda", "--tf32"}, strings.NewReader(""), &out, &errb)
		require.Equal(t, cli.ExitOK, code, "%s%s", out.String(), errb.String())
		require.Contains(t, errb.String(), ", TF32 matmuls)")
		out.Reset()
		errb.Reset()
		code = cli.Main([]string{"check", ex, "--backend", "cuda", "--tf32", "--rtol", "1e-4", "--atol", "1e-5"}, strings.NewReader(""), &out, &errb)
		require.Equal(t, cli.ExitFailure, code, "%s%s", out.String(), errb.String())
		require.Contains(t, out.String(), "MISMATCH")
	}
	var out, errb bytes.Buffer
	code := cli.Main([]string{"check", "../examples/megatron_mlp.mesh", "--tf32"}, strings.NewReader(""), &out, &errb)
	require.Equal(t, cli.ExitUsage, code)
	require.Contains(t, errb.String(), "--tf32 is a GPU matmul mode")
}

// TestCLIBudgetIsTheGPUs: with a GPU backend (cuda, or auto finding one)
// the default memory budget is 9/10 of the GPU's memory shared by the
// ranks, not the machine's RAM: a fake GPU of 64 KiB gives each of 4 ranks
// 14.4 KiB, too little for its 16 KiB block of x (and y), which the CPU's
// budget holds.
func TestCLIBudgetIsTheGPUs(t *testing.T) {
	cuda.FakeOnly(t) // sets the fake GPU's memory size
	cuda.UseDriver(t)
	t.Setenv("MESHRUN_FAKE_TOTAL_MEM", "65536")
	f := filepath.Join(t.TempDir(), "big.mesh")
	require.NoError(t, os.WriteFile(f, []byte("mesh M = [dp=4]\ninput x : f32[4, 4096] {S(0)} = ones\ny = x * x\noutput y\n"), 0o644))
	for _, be := range []string{"cuda", "auto"} {
		var out, errb bytes.Buffer
		code := cli.Main([]string{"run", f, "--backend", be}, strings.NewReader(""), &out, &errb)
		require.Equal(t, cli.ExitUsage, code, "%s: %s%s", be, out.String(), errb.String())
		require.Contains(t, errb.String(), "over the budget of 14.4 KiB", be)
	}
	var out, errb bytes.Buffer
	code := cli.Main([]string{"run", f}, strings.NewReader(""), &out, &errb)
	require.Equal(t, cli.ExitOK, code, "the CPU's budget is the RAM's: %s", errb.String())
}
