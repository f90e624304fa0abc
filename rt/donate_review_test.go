package rt

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// Buffer donation must be invisible to everything a caller holds. These
// tests train each configuration three ways on the same inputs: the plan
// with every Adam update fused and donated (twice, on one lowered plan),
// and the plan without the fusion (lower.Options.NoFuseAdam: no
// donation), and compare, bit for bit, every step's loss and the
// snapshot of every carried tensor the OnStep callback kept (a snapshot
// a later in-place update wrote over would differ from the reference's
// when compared after the run), and the final parameters. A resumed run
// starts from a kept snapshot: the caller's map must be unchanged after
// it, and the run must end where the whole one ends.

// donationConfigs are sources whose Adam updates the fusion donates:
// data parallel with f32, bf16 and f16 (loss scaling, whose skipped
// step keeps p, m, v), pipelines of four micro-batches under each ZeRO
// stage with and without offload, and a parameter both stages read.
func donationConfigs() map[string]string {
	cs := map[string]string{}
	for _, prec := range []string{"", "bf16", "f16"} {
		extra := ""
		if prec != "" {
			extra = "    precision = " + prec + "\n"
		}
		cs["dp prec="+prec] = mixedSrcWith(extra, 4)
	}
	for zero := range 4 {
		for _, off := range []string{"", "optimizer"} {
			cs[fmt.Sprintf("1f1b zero=%d offload=%q", zero, off)] = offPipe("1f1b", zero, "", off, false)
		}
	}
	cs["gpipe zero=3 f16 clip"] = offPipe("gpipe", 3, "f16", "", true)
	cs["shared param"] = `mesh M = [dp=2, pipeline pp=2]
input x : f32[8, 4] {S(0)} = normal(0, 1)
input t : f32[8, 4] {S(0)} = normal(0, 1)
param W : f32[4, 4] = normal(0, 0.5)
train {
    pipeline = 1f1b
    microbatches = 2
    h = tanh(x @ W)
    stage = 1
    h = tanh(h @ W)
    loss = mse(h, t)
    optimizer = adam(lr=0.05)
    steps = 3
}
`
	cs["zbv zero=1 offload=optimizer+params"] = offPipe("zbv", 1, "", "optimizer+params", false)
	cs["interleaved(2) zero=2 bf16"] = offPipe("interleaved(2)", 2, "bf16", "", false)
	for _, ex := range []string{"megatron_dp_tp", "mlp_bf16", "mlp_dp", "mlp_offload", "mlp_offload_pipe", "mlp_zero3", "moe", "transformer_2d"} {
		b, err := os.ReadFile(filepath.Join(exampleDir, ex+".mesh"))
		if err != nil {
			panic(err)
		}
		// four steps: the resumed run and the peaks need two or more
		cs[ex+".mesh"] = regexp.MustCompile(`(?m)^(\s*steps\s*=\s*)\d+`).ReplaceAllString(string(b), "${1}4")
	}
	return cs
}

// exampleDir holds the shipped training examples (their inputs are
// loaded from files there; the inline sources load none).
const exampleDir = "../examples/train"

// checkConfig checks a configuration's source.
func checkConfig(t *testing.T, name, src string) *ir.Graph {
	t.Helper()
	g, err := lang.CheckSource(filepath.Join(exampleDir, "d.mesh"), []byte(src), lang.CheckOptions{Dir: exampleDir})
	require.NoError(t, err, name)
	return g
}

// mixedSrcWith is mixedSrc with extra settings and a number of steps.
func mixedSrcWith(extra string, steps int) string {
	src := strings.Replace(mixedSrc, "steps = 15\n", fmt.Sprintf("steps = %d\n", steps), 1)
	return strings.Replace(src, "PREC", extra, 1)
}

// keptRun is one training run with every step's snapshot kept.
type keptRun struct {
	res     *TrainResult
	snaps   []map[string]*Tensor
	scalers []*GradScaler // f16: each step's loss scaler, copied
	applied []int
}

func trainKeeping(t *testing.T, p *lower.Plan, cfg TrainConfig) keptRun {
	t.Helper()
	var kr keptRun
	cfg.OnStep = func(s StepInfo) error {
		snap, err := s.Snapshot()
		kr.snaps = append(kr.snaps, snap)
		kr.applied = append(kr.applied, s.Applied)
		var sc *GradScaler
		if s.Scaler != nil {
			c := *s.Scaler
			sc = &c
		}
		kr.scalers = append(kr.scalers, sc)
		return err
	}
	res, err := Train(context.Background(), p, Options{}, cfg)
	require.NoError(t, err)
	kr.res = res
	return kr
}

// requireSameSnaps compares two runs' kept snapshots bit for bit.
func requireSameSnaps(t *testing.T, want, got keptRun, name string) {
	t.Helper()
	require.Equal(t, len(want.snaps), len(got.snaps), name)
	for i := range want.snaps {
		names := slices.Sorted(maps.Keys(want.snaps[i]))
		require.Equal(t, names, slices.Sorted(maps.Keys(got.snaps[i])), name)
		for _, n := range names {
			require.Equal(t, want.snaps[i][n].Data, got.snaps[i][n].Data, "%s: step %d's %s", name, i+1, n)
		}
	}
}

func countDonating(p *lower.Plan) int {
	n := 0
	for _, prog := range p.Exec.Programs {
		for i := range prog.Instrs {
			if prog.Instrs[i].Donate != nil {
				n++
			}
		}
	}
	return n
}

func TestDonationInvisibleToCallers(t *testing.T) {
	for name, src := range donationConfigs() {
		g := checkConfig(t, name, src)
		fp, err := lower.Lower(g, lower.Options{Verify: true})
		require.NoError(t, err, name)
		pp, err := lower.Lower(g, lower.Options{Verify: true, NoFuseAdam: true})
		require.NoError(t, err, name)
		// f16's skipped step keeps p, m, v, and a sent parameter is never
		// written over: no donation there
		if !strings.Contains(name, "f16") && name != "shared param" {
			require.Positive(t, countDonating(fp), "%s: some update donated", name)
		}
		require.Zero(t, countDonating(pp), name)

		ref := trainKeeping(t, pp, TrainConfig{})
		once := trainKeeping(t, fp, TrainConfig{})
		twice := trainKeeping(t, fp, TrainConfig{}) // rt.Train again on the same plan
		for _, c := range []struct {
			run  keptRun
			what string
		}{{once, "donated"}, {twice, "donated, again on one plan"}} {
			requireSameTraining(t, ref.res, c.run.res, name+": "+c.what)
			requireSameSnaps(t, ref, c.run, name+": "+c.what)
		}

		// resume from step 1's snapshot: the map is the caller's
		initial := once.snaps[0]
		before := map[string]*Tensor{}
		for n, v := range initial {
			before[n] = v.Clone()
		}
		cfg := TrainConfig{Start: 1, Initial: initial, Applied: 1}
		cfg.Applied = once.applied[0]
		if once.scalers[0] != nil { // f16: the loss scaler as it was after step 1
			sc := *once.scalers[0]
			cfg.Scaler = &sc
		}
		resumed := trainKeeping(t, fp, cfg)
		require.Equal(t, ref.res.Losses[1:], resumed.res.Losses, name+": resumed")
		for i := range ref.res.Final {
			require.Equal(t, ref.res.Final[i].Data, resumed.res.Final[i].Data, "%s: resumed %s", name, ref.res.Params[i].Name)
		}
		for n, v := range before {
			require.Equal(t, v.Data, initial[n].Data, "%s: the caller's initial %s written over", name, n)
		}
	}
}

// TestResumeAfterOverflowedStepsF16: an f16 run's first step overflows
// at the initial loss scale (65536) and is skipped, so after step 1 no
// Adam step has been applied. A run resumed there (the checkpoint's
// applied = 0, with its loss scaler) must continue as the whole run
// does; TrainConfig.Applied 0 used to be read as "Start", which counted
// the skipped step in Adam's bias corrections from step 2 on.
func TestResumeAfterOverflowedStepsF16(t *testing.T) {
	g, err := lang.CheckSource("f16.mesh", []byte(mixedSrcWith("    precision = f16\n", 4)), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	whole := trainKeeping(t, p, TrainConfig{})
	require.Equal(t, 0, whole.applied[0], "step 1 overflows and is skipped")
	sc := *whole.scalers[0]
	resumed := trainKeeping(t, p, TrainConfig{Start: 1, Initial: whole.snaps[0], Applied: whole.applied[0], Scaler: &sc})
	require.Equal(t, whole.res.Losses[1:], resumed.res.Losses)
	for i := range whole.res.Final {
		require.Equal(t, whole.res.Final[i].Data, resumed.res.Final[i].Data, whole.res.Params[i].Name)
	}
}

// TestDonatedPeaksAreMeasured: in every configuration above, from the
// second step on (every parameter this rank's own last result), each
// rank's measured device and host peaks are the plan's. A parameter two
// pipeline stages read is sent every step, and the runtime never writes
// over a sent buffer (the transport may read it until the execution
// ends): the plan used to donate it anyway and count p' in p's buffer,
// 320 bytes where the rank held 344 (above the unfused plan's 324).
func TestDonatedPeaksAreMeasured(t *testing.T) {
	for name, src := range donationConfigs() {
		g := checkConfig(t, name, src)
		p, err := lower.Lower(g, lower.Options{Verify: true})
		require.NoError(t, err, name)
		_, err = Train(context.Background(), p, Options{}, peaksArePlanned(t, name, p))
		require.NoError(t, err, name)
	}
}

// TestDonationOverMeshesZeROAndOffload: a DP×TP MLP with a bias, AdamW,
// on meshes with groups of one and of two, under each ZeRO stage and
// offload setting: training is bit for bit the unfused plan's and the
// measured peaks, device and host, are the donating plan's from step 2.
func TestDonationOverMeshesZeROAndOffload(t *testing.T) {
	for _, mesh := range []string{"dp=1, tp=1", "dp=1, tp=2", "dp=2, tp=1", "dp=2, tp=2"} {
		for zero := range 4 {
			for _, off := range []string{"", "optimizer", "optimizer+params"} {
				extra := fmt.Sprintf("    zero = %d\n", zero)
				if off != "" {
					extra += "    offload = " + off + "\n"
				}
				src := fmt.Sprintf(`mesh M = [%s]
input x : f32[32, 16] {S(0), B} = normal(0, 1)
input t : f32[32, 4] {S(0), B} = normal(0, 1)
param W1 : f32[16, 32] {B, S(1)} = normal(0, 0.25)
param W2 : f32[32, 4] {B, S(0)} = normal(0, 0.2)
param b : f32[4] = zeros
train {
    loss = mse(tanh(x @ W1) @ W2 + b, t)
    optimizer = adamw(lr=0.01)
    steps = 3
    data_axis = dp
%s}
`, mesh, extra)
				name := mesh + " " + extra
				g := checkConfig(t, name, src)
				p, err := lower.Lower(g, lower.Options{Verify: true})
				require.NoError(t, err, name)
				pp, err := lower.Lower(g, lower.Options{Verify: true, NoFuseAdam: true})
				require.NoError(t, err, name)
				res, err := Train(context.Background(), p, Options{}, peaksArePlanned(t, name, p))
				require.NoError(t, err, name)
				ref, err := Train(context.Background(), pp, Options{}, TrainConfig{})
				require.NoError(t, err, name)
				requireSameTraining(t, ref, res, name)
				require.Positive(t, countDonating(p), name)
			}
		}
	}
}

// TestDonationF64: the f32 configurations above in f64, bit for bit as
// the unfused plan. f64's in-place update is a Go loop (adamFusedLoop),
// not AVX assembly, so under -race the detector sees every write over
// p, m and v: any rank or peer reading one of those buffers at the time
// is reported (go test -race ./rt -run TestDonationF64: clean).
func TestDonationF64(t *testing.T) {
	for name, src := range donationConfigs() {
		if strings.Contains(name, "16") || strings.HasSuffix(name, ".mesh") {
			continue // half precision; the examples load f32 files
		}
		src = strings.ReplaceAll(src, "f32[", "f64[")
		g := checkConfig(t, name, src)
		p, err := lower.Lower(g, lower.Options{Verify: true})
		require.NoError(t, err, name)
		pp, err := lower.Lower(g, lower.Options{Verify: true, NoFuseAdam: true})
		require.NoError(t, err, name)
		if name != "shared param" {
			require.Positive(t, countDonating(p), name)
		}
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err, name)
		ref, err := Train(context.Background(), pp, Options{}, TrainConfig{})
		require.NoError(t, err, name)
		requireSameTraining(t, ref, res, name+" f64")
	}
}

// peaksArePlanned is a training configuration that checks, from the
// second step on (every parameter then this rank's own last result), that
// each rank's measured device and host peaks are p's.
func peaksArePlanned(t *testing.T, name string, p *lower.Plan) TrainConfig {
	hostPlan := p.Exec.HostPeaks()
	step := 0
	return TrainConfig{OnStep: func(s StepInfo) error {
		step++
		for _, d := range s.Run.Devices {
			if step > 1 {
				require.Equal(t, p.Peak[d.Device], d.Peak, "%s: step %d, rank %d", name, step, d.Device)
				require.Equal(t, hostPlan[d.Device], d.HostPeak, "%s: step %d, rank %d's host", name, step, d.Device)
			}
		}
		return nil
	}}
}
