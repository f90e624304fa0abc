package lower

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden plan dumps")

func compileExample(t *testing.T, name string) *Plan {
	t.Helper()
	p, _, err := CompileFile(filepath.Join("..", "examples", name+".mesh"), lang.CheckOptions{}, Options{Verify: true})
	require.NoError(t, err)
	return p
}

func examples(t *testing.T) []string {
	files, err := filepath.Glob("../examples/*.mesh")
	require.NoError(t, err)
	more, _ := filepath.Glob("../examples/*/*.mesh")
	files = append(files, more...)
	require.NotEmpty(t, files)
	var out []string
	for _, f := range files {
		rel, _ := filepath.Rel("../examples", f)
		out = append(out, strings.TrimSuffix(rel, ".mesh"))
	}
	return out
}

// TestGoldenPlans compares the dump of every example's lowered plan with
// testdata/NAME.plan. Refresh with: go test ./lower -run Golden -update
func TestGoldenPlans(t *testing.T) {
	for _, name := range examples(t) {
		p := compileExample(t, name)
		got := strings.ReplaceAll(p.Dump(), filepath.Join("..", "examples")+"/", "")
		got = strings.ReplaceAll(got, "train/", "")
		path := filepath.Join("testdata", strings.ReplaceAll(name, "/", "_")+".plan")
		if *update {
			require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
			continue
		}
		want, err := os.ReadFile(path)
		require.NoError(t, err, "missing golden file; run go test ./lower -run Golden -update")
		require.Equal(t, string(want), got, "plan of %s changed; if intended, run go test ./lower -run Golden -update", name)
	}
}

func collectives(p *Plan) []sbp.Step {
	var out []sbp.Step
	for _, c := range p.Convs {
		for _, s := range c.Path.Steps {
			if s.Kind.Communicates() {
				out = append(out, s)
			}
		}
	}
	return out
}

func TestMegatronMLPHasExactlyOneAllReduceOverTP(t *testing.T) {
	p := compileExample(t, "megatron_mlp")
	steps := collectives(p)
	require.Len(t, steps, 1)
	require.Equal(t, sbp.AllReduce, steps[0].Kind)
	require.Equal(t, "tp", p.Mesh.Axes[steps[0].Axis].Name)
	// each dp half of y, 32×512 f32, all-reduced over 4 devices: 2·3/4·64 KiB
	require.Equal(t, 2*3.0/4*32*512*4, steps[0].Bytes)
}

func TestSequenceParallelPatternIsFound(t *testing.T) {
	p := compileExample(t, "megatron_sp")
	steps := collectives(p)
	require.Len(t, steps, 2)
	require.Equal(t, sbp.AllGather, steps[0].Kind)
	require.Equal(t, sbp.ReduceScatter, steps[1].Kind)
	// the all-gather feeds the column-parallel matmul
	ag := p.Convs[0]
	require.Equal(t, "ln", ag.Value.Name)
	require.Equal(t, "matmul", ag.Cause)
	for _, v := range p.Graph.Values {
		if v.Op == "layernorm" {
			require.Equal(t, "{S(0)}", p.Placement[v].String(), "layernorm runs on the sequence-split activation")
		}
	}
}

func TestDataParallelForwardNeedsNoCommunicationButTheLoss(t *testing.T) {
	p := compileExample(t, "dp_mlp")
	steps := collectives(p)
	require.Len(t, steps, 1)
	require.Equal(t, sbp.AllReduce, steps[0].Kind)
	require.Equal(t, float64(2*3*4/4), steps[0].Bytes) // a 4-byte scalar over 4 devices
}

func TestBoxingTourUsesEveryConversion(t *testing.T) {
	p := compileExample(t, "boxing_tour")
	kinds := map[sbp.Collective]bool{}
	for _, c := range p.Convs {
		for _, s := range c.Path.Steps {
			kinds[s.Kind] = true
		}
	}
	for _, k := range []sbp.Collective{sbp.AllGather, sbp.AllReduce, sbp.ReduceScatter, sbp.AllToAll, sbp.LocalSlice, sbp.LocalPartial} {
		require.True(t, kinds[k], "the tour never uses %s", k)
	}
}

func TestDumpAfterEveryPass(t *testing.T) {
	var b strings.Builder
	g, _, err := lang.CheckFile("../examples/megatron_mlp.mesh", lang.CheckOptions{})
	require.NoError(t, err)
	_, err = Lower(g, Options{Verify: true, DumpAfter: "all", Dump: &b})
	require.NoError(t, err)
	for _, pass := range Passes {
		require.Contains(t, b.String(), "=== after "+pass.Name+" ===")
	}
}

func TestVerifierCatchesABrokenPlan(t *testing.T) {
	p := compileExample(t, "megatron_mlp")
	// pretend the output's conversion went somewhere else
	p.Outputs[0].Conv.Path = &sbp.Path{From: p.Outputs[0].Conv.Path.From, To: sbp.NdSBP{sbp.B, sbp.B}}
	require.ErrorContains(t, Verify(p), "conversion c0")
	// rank 3 runs a program whose all-reduce became a different step
	p = compileExample(t, "megatron_mlp")
	bad := *p.Exec.Programs[0]
	bad.Instrs = slices.Clone(bad.Instrs)
	for i := range bad.Instrs {
		if bad.Instrs[i].Kind == plan.Collective {
			st := *bad.Instrs[i].Step
			st.Kind = sbp.AllGather
			bad.Instrs[i].Step = &st
			break
		}
	}
	p.Exec.Programs = append(p.Exec.Programs, &bad)
	p.Exec.RankProgram = make([]int, p.Mesh.Size())
	p.Exec.RankProgram[3] = 1
	require.ErrorContains(t, Verify(p), "disagree on a collective")
	require.ErrorContains(t, Verify(p), "rank 3 runs all_gather(y)")
}

func TestMissingRuleIsACompileErrorAtTheOp(t *testing.T) {
	g, err := lang.CheckSource("m.mesh", []byte("mesh M = [a=2]\ninput x : f32[4] = zeros\ny = exp(x)\noutput y\n"), lang.CheckOptions{})
	require.NoError(t, err)
	g.Values[1].Op = "frobnicate"
	_, err = Lower(g, Options{})
	require.Error(t, err)
	require.Contains(t, err.Error(), "m.mesh:3:5: op frobnicate has no placement rule")
}

// The ZeRO paper's worked example (Rajbhandari et al., figure 1): 7.5B
// parameters, 64 devices, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
func TestZeROEstimateMatchesThePaper(t *testing.T) {
	rows := EstimateZeRO(7.5e9, 64, 12)
	want := []float64{120, 31.4, 16.6, 1.9}
	for i, r := range rows {
		require.InDelta(t, want[i], r.Total/1e9, 0.06, r.Name)
	}
	require.Equal(t, 3.0, rows[3].Comm)
}

// explain's per-device memory split: ZeRO-3 holds a quarter of the
// parameters, optimizer states and reduced gradients that DP holds on 4
// devices (every dim here divides by 4).
func TestExplainMemorySplitsByCategory(t *testing.T) {
	src, err := os.ReadFile("../examples/train/mlp_zero3.mesh")
	require.NoError(t, err)
	report := func(zero string) MemoryReport {
		s := strings.Replace(string(src), "zero = 3", "zero = "+zero, 1)
		g, err := lang.CheckSource("../examples/train/z.mesh", []byte(s), lang.CheckOptions{Dir: "../examples/train"})
		require.NoError(t, err)
		p, err := Lower(g, Options{Verify: true})
		require.NoError(t, err)
		return Explain(p).Memory[0]
	}
	dp, z3 := report("0"), report("3")
	psi := int64(16*32+32+32*4) * 4
	require.Equal(t, psi, dp.ParamBytes)
	require.Equal(t, 2*psi, dp.OptimizerBytes)
	require.Equal(t, psi, dp.GradientBytes)
	require.Equal(t, psi/4, z3.ParamBytes)
	require.Equal(t, 2*psi/4, z3.OptimizerBytes)
	require.Equal(t, psi/4, z3.GradientBytes)
	require.Equal(t, dp.PeakBytes-dp.ParamBytes-dp.OptimizerBytes, dp.ActivationBytes)
}
