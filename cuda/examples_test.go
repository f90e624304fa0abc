package cuda_test

import (
	"bytes"
	"context"
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
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
)

// Every example in examples/ (globbed: a new one is covered without
// editing this file) on the CUDA backend, every rank of the mesh sharing
// one device, against the CPU backend running the same plan and the CPU
// on one device. Training examples run as shipped and in variants that
// reach what the files alone do not: every pipeline schedule, ZeRO 0–3,
// f16 with dynamic loss scaling, accumulation, offloading the parameters.
// No op may fall back to the CPU (the test names the op that did).
//
// Outputs agree within the stated units in the last place: the GPU's
// GEMMs sum in another order than the CPU's BLAS, and its exp/tanh/erfc
// round differently, and those differences travel through the program
// (and through training steps). Bounds per kind of run, in f32 ulps of
// the CPU's value, for the elements above a floor relative to the
// output's largest magnitude (below it, ulps mean nothing: a sum that
// cancels to near zero carries the absolute error of its large terms).
const (
	runULPs   = 64
	trainULPs = 4096 // after the example's steps; the loss curve is compared too
	halfULPs  = 8    // bf16 and f16 params and losses after training, in their own ulps
	runFloor  = 1e-5 // × the output's largest |value|
	trainFlr  = 1e-4
	// The f32 master weights of a run computing in bf16 or f16 are held
	// to the CPU's run of the same plan at check's tolerance for the
	// compute dtype (oneDeviceTol), not in ulps: under Adam a gradient
	// near zero, computed in half precision summed in another order,
	// can flip sign, and its weight then moves by ±lr in that step
	// (seen on an H200: W1 of mlp_offload 0.0055 apart after 20 steps
	// at lr 0.005, 11 bf16 ulps; in f32 runs a few f32 ulps).
)

// Against the CPU on one device a training run differs by the mesh's
// summation order as well: held to meshrun check's default tolerances for
// training (|got − want| ≤ atol + rtol·|want|), by the precision the steps
// compute in.
var oneDeviceTol = map[ir.DType][2]float64{ // dtype → {rtol, atol}
	ir.F32:  {1e-4, 1e-5},
	ir.BF16: {2e-2, 1e-2},
	ir.F16:  {5e-3, 1e-3},
}

// notOnCUDA lists the examples that cannot run on this backend, with the
// reason. Empty: every example runs. An entry must name an example that
// exists and still fails on the backend (TestExamplesNotOnCUDA), so the
// list cannot go stale; no example is skipped any other way.
var notOnCUDA = map[string]string{}

// exampleFiles is every .mesh file under examples/, relative to the
// examples folder ("train/gpt/gpt.mesh").
func exampleFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"*.mesh", "*/*.mesh", "*/*/*.mesh"} {
		files, err := filepath.Glob(filepath.Join("..", "examples", pat))
		require.NoError(t, err)
		for _, f := range files {
			rel, err := filepath.Rel(filepath.Join("..", "examples"), f)
			require.NoError(t, err)
			out = append(out, filepath.ToSlash(rel))
		}
	}
	require.GreaterOrEqual(t, len(out), 24, "the examples folder")
	return out
}

// exampleSet is the examples with (train) or without a train block that
// are not in notOnCUDA.
func exampleSet(t *testing.T, train bool) []string {
	t.Helper()
	var out []string
	for _, f := range exampleFiles(t) {
		if _, no := notOnCUDA[f]; no {
			continue
		}
		g, _, err := lang.CheckFile(filepath.Join("..", "examples", f), lang.CheckOptions{})
		require.NoError(t, err, f)
		if (g.Train != nil) == train {
			out = append(out, f)
		}
	}
	return out
}

// variant is a shipped example changed by edits (each old string must
// occur in the file) or run under another pipeline schedule.
type variant struct {
	file, name string
	edits      [][2]string
	schedule   string // lang.CheckOptions.Pipeline
}

// trainVariants are the settings the shipped files do not run: the other
// schedules of pipeline_schedules (1f1b is the file's) and of the
// offloaded pipeline, ZeRO 0–2 (the file is ZeRO-3), f16 with its loss
// scaler (with ZeRO-3, and on the offloaded pipeline with clipping),
// accumulation (with ZeRO-3, bf16, offload), and offloaded parameters.
// Each is one meshrun check passes on the CPU: f16 with accumulation on
// mlp_bf16 does not (W1 drifts 2.5e-3 from one device over 30 steps, past
// f16's atol 1e-3), nor f16 or bf16 on the six layers of mlp_zero3.
func trainVariants() []variant {
	var out []variant
	for _, s := range []string{"naive", "gpipe", "interleaved(2)", "zb1p", "zbv"} {
		out = append(out, variant{file: "train/pipeline_schedules.mesh", name: s, schedule: s})
	}
	for _, s := range []string{"gpipe", "zb1p"} { // (its two stages leave interleaved and zbv no work)
		out = append(out, variant{file: "train/mlp_offload_pipe.mesh", name: s, schedule: s})
	}
	for _, z := range []string{"0", "1", "2"} {
		out = append(out, variant{file: "train/mlp_zero3.mesh", name: "zero=" + z, edits: [][2]string{{"zero = 3", "zero = " + z}}})
	}
	out = append(out,
		variant{file: "train/mlp_zero3.mesh", name: "accumulate=2",
			edits: [][2]string{{"zero = 3", "zero = 3\n    accumulate = 2"}}},
		variant{file: "train/mlp_bf16.mesh", name: "f16", edits: [][2]string{{"precision = bf16", "precision = f16"}}},
		variant{file: "train/mlp_bf16.mesh", name: "f16 zero=3",
			edits: [][2]string{{"precision = bf16", "precision = f16\n    zero = 3"}}},
		variant{file: "train/mlp_bf16.mesh", name: "zero=3 accumulate=2",
			edits: [][2]string{{"precision = bf16", "precision = bf16\n    zero = 3\n    accumulate = 2"}}},
		variant{file: "train/mlp_offload_pipe.mesh", name: "f16", edits: [][2]string{{"precision = bf16", "precision = f16"}}},
		variant{file: "train/mlp_offload.mesh", name: "accumulate=2", edits: [][2]string{{"steps = 20", "steps = 20\n    accumulate = 2"}}},
		variant{file: "train/mlp_dp.mesh", name: "accumulate=4", edits: [][2]string{{"steps = 20", "steps = 20\n    accumulate = 4"}}},
		variant{file: "train/mlp_offload.mesh", name: "optimizer+params",
			edits: [][2]string{{"offload = optimizer", "offload = optimizer+params"}}},
	)
	return out
}

// compile checks and lowers an example's source for its mesh, or for one
// device. A program with local functions is written per device: its
// one-device form is the program checked again on a mesh whose axes have
// size 1 (as meshrun check's reference).
func compile(t testing.TB, file, src, schedule string, single bool) *lower.Plan {
	t.Helper()
	opts := lang.CheckOptions{Dir: filepath.Dir(file), Pipeline: schedule}
	g, err := lang.CheckSource(file, []byte(src), opts)
	require.NoError(t, err, file)
	if single && g.HasLocal() {
		opts.SingleDevice = true
		g, err = lang.CheckSource(file, []byte(src), opts)
		require.NoError(t, err, file)
	}
	lo := lower.Options{}
	if single {
		lo.Mesh = g.Mesh.Single()
	}
	p, err := lower.Lower(g, lo)
	require.NoError(t, err, file)
	return p
}

// source is an example's text with a variant's edits made.
func source(t *testing.T, v variant) (string, string) {
	t.Helper()
	file := filepath.Join("..", "examples", filepath.FromSlash(v.file))
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	src := string(b)
	for _, e := range v.edits {
		require.Contains(t, src, e[0], "%s: the variant's edit", v.file)
		src = strings.Replace(src, e[0], e[1], 1)
	}
	return file, src
}

func newBackend(t testing.TB, notes *bytes.Buffer) *cuda.Backend {
	t.Helper()
	cuda.UseDriver(t)
	be, err := cuda.NewBackend(0, notes)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, be.Close()) })
	return be
}

// requireNative fails naming every op (and dtype) that fell back.
func requireNative(t *testing.T, be *cuda.Backend, what string) {
	t.Helper()
	require.Empty(t, be.Fallbacks(), "%s: these ops fell back to the CPU, each needs a CUDA kernel", what)
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
	// the worst element is the one held to the bound (and named), so that
	// a failure reports how far off the tensor is, not its first element
	// past the bound
	worst, at := 0.0, -1
	for i := range w {
		if u := ulps(g[i], w[i], floor); at < 0 || u > worst || math.IsNaN(u) {
			worst, at = u, i
		}
	}
	if at >= 0 {
		require.LessOrEqual(t, worst, bound, "%s[%d], the worst of %d: cuda %v, cpu %v", what, at, len(w), g[at], w[at])
	}
	return worst
}

// halfULP is one ulp of a half-precision dtype in f32 ulps (bf16 keeps 8
// of f32's 24 significant bits, f16 11).
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
	for _, ex := range exampleSet(t, false) {
		t.Run(ex, func(t *testing.T) {
			var notes bytes.Buffer
			be := newBackend(t, &notes)
			file, src := source(t, variant{file: ex})
			p := compile(t, file, src, "", false)
			got, err := rt.Run(context.Background(), p, rt.Options{Backend: be})
			require.NoError(t, err)
			want, err := rt.Run(context.Background(), p, rt.Options{})
			require.NoError(t, err)
			single, err := rt.Run(context.Background(), compile(t, file, src, "", true), rt.Options{})
			require.NoError(t, err)
			require.NotEmpty(t, want.Names, "%s has outputs to compare", ex)
			for i, name := range want.Names {
				w1 := compare(t, name+" vs cpu", got.Outputs[i], want.Outputs[i], runULPs, runFloor)
				w2 := compare(t, name+" vs one cpu device", got.Outputs[i], single.Output(name), runULPs, runFloor)
				t.Logf("%s on %s: %s worst %.0f ulp vs cpu, %.0f vs one device", ex, p.Exec.Mesh, name, w1, w2)
			}
			requireNative(t, be, ex)
		})
	}
}

// fusedAdams counts the plan's adam_fused instructions, which the backend
// runs as its one-pass kernel (LaunchResults).
func fusedAdams(p *lower.Plan) int {
	n := 0
	for _, prog := range p.Exec.Programs {
		for i := range prog.Instrs {
			if in := &prog.Instrs[i]; in.Kind == plan.Compute && in.Kernel.Op == "adam_fused" {
				n++
			}
		}
	}
	return n
}

func TestExamplesTrainOnCUDA(t *testing.T) {
	var runs []variant
	for _, ex := range exampleSet(t, true) {
		runs = append(runs, variant{file: ex, name: "as shipped"})
	}
	runs = append(runs, trainVariants()...)
	fused, ran := 0, 0
	t.Cleanup(func() {
		if ran == len(runs) { // (not when -run picks some)
			require.Positive(t, fused, "some example runs the fused Adam kernel")
		}
	})
	for _, v := range runs {
		t.Run(v.file+"/"+v.name, func(t *testing.T) {
			ran++
			var notes bytes.Buffer
			be := newBackend(t, &notes)
			file, src := source(t, v)
			p := compile(t, file, src, v.schedule, false)
			got, err := rt.Train(context.Background(), p, rt.Options{Backend: be}, rt.TrainConfig{})
			require.NoError(t, err)
			want, err := rt.Train(context.Background(), p, rt.Options{}, rt.TrainConfig{})
			require.NoError(t, err)
			single, err := rt.Train(context.Background(), compile(t, file, src, v.schedule, true), rt.Options{}, rt.TrainConfig{})
			require.NoError(t, err)
			worst := compareTraining(t, computeDType(p), got, want)
			dev := compareOneDevice(t, p, got, single)
			fused += fusedAdams(p)
			t.Logf("%s (%s): %d steps on %s, worst %.0f ulp vs cpu, %.2g of the tolerance vs one device; %d adam_fused", v.file, v.name, len(want.Losses), p.Exec.Mesh, worst, dev, fusedAdams(p))
			requireNative(t, be, v.file+" "+v.name)
			requireFusedAdamLaunched(t, be, p)
		})
	}
}

// requireFusedAdamLaunched checks that the backend ran each of the plan's
// adam_fused instructions on the device tier as its one-pass kernel (not
// the three kernels rt.LaunchResults would run on a backend without one;
// an offloaded parameter's update runs on the host tier, on the CPU).
func requireFusedAdamLaunched(t *testing.T, be *cuda.Backend, p *lower.Plan) {
	t.Helper()
	for _, prog := range p.Exec.Programs {
		for i := range prog.Instrs {
			if in := &prog.Instrs[i]; in.Kind == plan.Compute && !in.Host && in.Kernel.Op == "adam_fused" {
				name, err := cuda.KernelName("adam_fused", in.Kernel.DType)
				require.NoError(t, err)
				require.True(t, cuda.Launched(be, name), "%s was never launched", name)
			}
		}
	}
}

// computeDType is the dtype a training step computes its loss in: the
// precision's (bf16, f16) under mixed precision, whose loss is the half
// value however it is reported (unscaled from f16's loss scaling), else
// the loss's own.
func computeDType(p *lower.Plan) ir.DType {
	if dt, ok := ir.ParseDType(p.Graph.Train.Precision); ok {
		return dt
	}
	return p.Graph.Train.Loss.Type.DType
}

// compareTraining holds the CUDA run's loss curve and final parameters to
// the CPU's running the same plan: in f32 ulps, or a half dtype's own.
// lossDType is the dtype the steps compute in (computeDType).
func compareTraining(t *testing.T, lossDType ir.DType, got, want *rt.TrainResult) float64 {
	t.Helper()
	require.Len(t, got.Losses, len(want.Losses))
	worst := 0.0
	// a loss computed in bf16 or f16 is held to its own ulps, as the
	// params: cuBLAS (and the fake's GEMM loops) sum in another order than
	// the CPU's BLAS, and one f32 rounding flips a half's last bit
	lossBound := float64(trainULPs)
	if h := halfULP(lossDType); h > 1 {
		lossBound = halfULPs * h
	}
	for i := range want.Losses {
		u := ulps(got.Losses[i], want.Losses[i], 0)
		require.LessOrEqual(t, u, lossBound, "loss of step %d: cuda %v, cpu %v", i+1, got.Losses[i], want.Losses[i])
		worst = math.Max(worst, u)
	}
	for i, prm := range want.Params {
		switch {
		case halfULP(want.Final[i].DType) > 1:
			bound := halfULPs * halfULP(want.Final[i].DType)
			worst = math.Max(worst, compare(t, "param "+prm.Name, got.Final[i], want.Final[i], bound, trainFlr))
		case halfULP(lossDType) > 1: // f32 master weights of a half run
			holdTo(t, oneDeviceTol[lossDType], "param "+prm.Name+" vs the cpu", got.Final[i], want.Final[i])
		default:
			worst = math.Max(worst, compare(t, "param "+prm.Name, got.Final[i], want.Final[i], trainULPs, trainFlr))
		}
	}
	return worst
}

// holdTo requires |got − want| ≤ atol + rtol·|want| element by element
// (tol = {rtol, atol}) and returns the largest error as a fraction of it.
func holdTo(t *testing.T, tol [2]float64, what string, got, want *rt.Tensor) float64 {
	t.Helper()
	gv, wv := got.Float64s(), want.Float64s()
	require.Len(t, gv, len(wv), what)
	worst, at := 0.0, 0
	for i := range wv {
		allowed := tol[1] + tol[0]*math.Abs(wv[i])
		f := math.Abs(gv[i]-wv[i]) / allowed
		if math.IsNaN(f) { // a NaN on one side only: the worst there is
			worst, at = f, i
			break
		}
		if f > worst {
			worst, at = f, i
		}
	}
	if len(wv) > 0 {
		require.LessOrEqual(t, worst, 1.0, "%s: worst at [%d]: cuda %v, cpu %v (%.3g of the tolerance)", what, at, gv[at], wv[at], worst)
	}
	return worst
}

// compareOneDevice holds the CUDA run to the CPU on one device within
// oneDeviceTol, and returns the largest error as a fraction of it.
func compareOneDevice(t *testing.T, p *lower.Plan, got, single *rt.TrainResult) float64 {
	t.Helper()
	dt := computeDType(p)
	tol, ok := oneDeviceTol[dt]
	require.True(t, ok, "a tolerance for training in %s", dt)
	worst := 0.0
	check := func(what string, g, w *rt.Tensor) {
		worst = math.Max(worst, holdTo(t, tol, what+" vs one device", g, w))
	}
	require.Len(t, got.Losses, len(single.Losses))
	check("loss curve", rt.FromSlice([]int{len(got.Losses)}, got.Losses), rt.FromSlice([]int{len(single.Losses)}, single.Losses))
	for i, prm := range single.Params {
		check("param "+prm.Name, got.Param(prm.Name), single.Final[i])
	}
	return worst
}

// TestExamplesNotOnCUDA keeps notOnCUDA true: each entry is an example
// that exists and fails on the backend.
func TestExamplesNotOnCUDA(t *testing.T) {
	all := exampleFiles(t)
	for ex, why := range notOnCUDA {
		require.Contains(t, all, ex, "notOnCUDA names a missing example")
		require.NotEmpty(t, why, ex)
		var notes bytes.Buffer
		be := newBackend(t, &notes)
		file, src := source(t, variant{file: ex})
		p := compile(t, file, src, "", false)
		var err error
		if p.Graph.Train != nil {
			_, err = rt.Train(context.Background(), p, rt.Options{Backend: be}, rt.TrainConfig{})
		} else {
			_, err = rt.Run(context.Background(), p, rt.Options{Backend: be})
		}
		require.True(t, err != nil || len(be.Fallbacks()) > 0, "%s runs natively on CUDA now: drop it from notOnCUDA (%s)", ex, why)
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
