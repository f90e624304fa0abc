package lower

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/plan"
	"github.com/stretchr/testify/require"
)

// layers is a program of n identical layers on a pipeline of ranks, with
// stage marks when marks is set.
func layers(ranks, n, micro int, schedule string, marks []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mesh M = [pipeline pp=%d, dp=2]\ninput x : f32[%d, 8] {S(0)} = normal(0, 1)\n", ranks, 4*micro)
	for l := range n {
		fmt.Fprintf(&b, "param W%d : f32[8, 8] = normal(0, 0.3)\n", l)
	}
	fmt.Fprintf(&b, "train {\n    pipeline = %s\n    microbatches = %d\n    h = x\n", schedule, micro)
	for l := range n {
		if marks != nil {
			fmt.Fprintf(&b, "    stage = %d\n", marks[l])
		}
		fmt.Fprintf(&b, "    h = tanh(h @ W%d)\n", l)
	}
	b.WriteString("    loss = sum(h * h)\n    optimizer = adam(lr=0.01)\n    clip = 1\n}\n")
	return b.String()
}

func lowerSource(src string) (*Plan, error) {
	g, err := lang.CheckSource("p.mesh", []byte(src), lang.CheckOptions{})
	if err != nil {
		return nil, err
	}
	return Lower(g, Options{Verify: true})
}

// Every schedule's per-rank programs pass the cross-rank dry run (no
// deadlock, every message received with the type it was sent with) for
// several pipeline sizes and micro-batch counts; refused combinations say
// why at the pipeline setting.
func TestPipelinePlansVerify(t *testing.T) {
	for _, sched := range []string{"naive", "gpipe", "1f1b", "interleaved(2)", "zb1p", "zbv"} {
		for _, k := range []int{2, 3, 4} {
			for _, m := range []int{1, 2, 3, 4, 6, 8} {
				v := 1
				if sched == "zbv" || strings.HasPrefix(sched, "interleaved") {
					v = 2
				}
				p, err := lowerSource(layers(k, k*v, m, sched, nil))
				if err != nil {
					// refused at the pipeline setting (line 4 + the params)
					var e *ir.Error
					var list lang.ErrorList
					if errors.As(err, &list) {
						e = list[0]
					}
					require.True(t, e != nil || errors.As(err, &e), "%s K=%d M=%d: %v", sched, k, m, err)
					require.Equal(t, 4+k*v, e.Pos.Line, "%s K=%d M=%d: %v", sched, k, m, err)
					continue
				}
				require.Len(t, p.Exec.Programs, k)
				require.NoError(t, p.Exec.Verify(), "%s K=%d M=%d", sched, k, m)
				// each stage's parameters live on its rank only
				for _, src := range p.Exec.Sources {
					if src.Role == "param" {
						require.GreaterOrEqual(t, src.Home, 0, "%s is on one rank", src.Name)
					}
				}
			}
		}
	}
}

// Cross-stage traffic per step for 1F1B on K ranks, M micro-batches, one
// layer per stage: an activation forward and its gradient back at each of
// the K−1 boundaries for every micro-batch, and (clip) each later stage's
// share of the gradient norm to the last stage and the factor back.
func TestPipelineTransfers(t *testing.T) {
	for _, c := range []struct{ k, m int }{{2, 4}, {4, 8}, {3, 3}} {
		p, err := lowerSource(layers(c.k, c.k, c.m, "1f1b", nil))
		require.NoError(t, err)
		kinds := map[string]int{}
		for _, tr := range p.Pipe.Transfers {
			kinds[tr.Kind]++
			if tr.Kind == "activation" || tr.Kind == "gradient" {
				require.Equal(t, int64(2*8*4), tr.Bytes, "a micro-batch's [4, 8] f32 split over dp=2")
				require.Equal(t, 1, abs(tr.To-tr.From), "neighbours only")
			}
		}
		require.Equal(t, (c.k-1)*c.m, kinds["activation"], "K=%d M=%d: %v", c.k, c.m, kinds)
		require.Equal(t, (c.k-1)*c.m, kinds["gradient"], "K=%d M=%d", c.k, c.m)
		require.Positive(t, kinds["step"], "the clipping norm crosses stages")
	}
}

func abs(x int) int { return max(x, -x) }

func TestPipelineStageErrors(t *testing.T) {
	cases := []struct {
		src  string
		line int
		msg  string
	}{
		{layers(2, 3, 2, "1f1b", []int{0, 1, 0}), 14, "stage = 0 after stage 1: stages run forward in order"},
		{layers(4, 1, 4, "1f1b", nil), 5, "4 pipeline stages need at least as many units in the train block that compute (statements, loop iterations); it has 2"},
		{layers(2, 2, 2, "1f1b", []int{0, 0}), 6, "the stage = marks give stage 1 no work: each of the 2 stages needs a unit that computes"},
		{"mesh M = [pipeline pp=2]\ninput x : f32[4] = normal(0, 1)\ny = x * 2\noutput y\n", 1,
			"the mesh has a pipeline axis but the program has no train block (stages are cut from its body)"},
	}
	for _, c := range cases {
		_, err := lowerSource(c.src)
		var e *ir.Error
		require.True(t, errors.As(err, &e), "%v", err)
		require.Equal(t, c.line, e.Pos.Line, c.msg)
		require.Equal(t, c.msg, e.Msg)
	}
}

// The balanced cut is the best contiguous cut: checked against every cut
// of small random unit costs.
func TestBalanceIsOptimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 300; trial++ {
		n := 1 + rng.IntN(8)
		k := 1 + rng.IntN(n)
		comp, sent := make([]float64, n), make([]float64, n)
		for u := range n {
			comp[u], sent[u] = rng.Float64(), rng.Float64()*0.5
		}
		cost := func(u int) (float64, float64) { return comp[u], sent[u] }
		got := slowest(balance(n, k, cost), comp, sent)
		best := math.Inf(1)
		forEachCut(n, k, func(cut []int) { best = min(best, slowest(cut, comp, sent)) })
		require.InDelta(t, best, got, 1e-12, "n=%d k=%d", n, k)
	}
}

// slowest is a cut's slowest stage: compute, or its send if longer.
func slowest(cut []int, comp, sent []float64) float64 {
	stage := make([]float64, cut[len(cut)-1]+1)
	for u, s := range cut {
		stage[s] += comp[u]
	}
	worst := 0.0
	for u, s := range cut {
		t := stage[s]
		if u+1 < len(cut) && cut[u+1] != s {
			t = max(t, sent[u])
		}
		worst = max(worst, t)
	}
	return worst
}

// forEachCut enumerates the ways to cut n units into k non-empty
// contiguous stages.
func forEachCut(n, k int, f func([]int)) {
	cut := make([]int, n)
	var rec func(u, s int)
	rec = func(u, s int) {
		if u == n {
			if s == k-1 {
				f(cut)
			}
			return
		}
		cut[u] = s
		rec(u+1, s)
		if u > 0 && s+1 < k {
			cut[u] = s + 1
			rec(u+1, s+1)
		}
	}
	rec(0, 0)
}

// A parameter two stages read, with ZeRO-3: the backward's repeated
// gather runs on the stage whose backward needs it (on the parameter's
// own stage it would wait for a gradient that needs it: a deadlock), for
// every schedule (rt's TestSharedParamTrainsLikeOneDevice trains it).
func TestSharedParamWithZeRO3Verifies(t *testing.T) {
	for _, sched := range []string{"gpipe", "1f1b", "zb1p", "zbv", "interleaved(2)"} {
		v := 1
		if sched == "zbv" || strings.HasPrefix(sched, "interleaved") {
			v = 2
		}
		var b strings.Builder
		fmt.Fprintf(&b, "mesh M = [dp=2, pipeline pp=2]\ninput x : f32[8, 4] {S(0)} = normal(0, 1)\nparam W : f32[4, 4] = normal(0, 0.5)\ntrain {\n    pipeline = %s\n    microbatches = 2\n    h = x\n", sched)
		for st := range 2 * v {
			fmt.Fprintf(&b, "    stage = %d\n    h = tanh(h @ W)\n", st)
		}
		b.WriteString("    loss = sum(h * h)\n    optimizer = sgd(lr=0.1)\n    zero = 3\n}\n")
		p, err := lowerSource(b.String())
		require.NoError(t, err, sched)
		require.NoError(t, p.Exec.Verify(), sched)
	}
}

// A schedule chosen at check time (meshrun trace --schedules) replaces
// the block's: naive runs the whole batch as one micro-batch, and marks
// past the new schedule's stages are refused at the mark.
func TestScheduleOverride(t *testing.T) {
	src := layers(2, 2, 4, "1f1b", nil)
	g, err := lang.CheckSource("p.mesh", []byte(src), lang.CheckOptions{Pipeline: "naive"})
	require.NoError(t, err)
	require.Len(t, g.Train.Pipe.Micro, 1)
	p, err := Lower(g, Options{Verify: true})
	require.NoError(t, err)
	require.Equal(t, "naive", p.Pipe.Schedule.Name)

	marked := layers(2, 4, 4, "interleaved(2)", []int{0, 1, 2, 3})
	_, err = lang.CheckSource("p.mesh", []byte(marked), lang.CheckOptions{Pipeline: "1f1b"})
	var list lang.ErrorList
	require.True(t, errors.As(err, &list), "%v", err)
	require.Contains(t, list[0].Msg, "stage = 2: want an integer from 0 to 1")
}

// ZeRO-2 on a pipeline reduce-scatters every gradient once per
// micro-batch (M times a step); ZeRO-3 also gathers again, in every
// micro-batch's backward, each parameter the backward reads (W1: its
// input's gradient needs it; W0's does not, its input is the data), while
// the forward's gather is made once a step. explain says so. Counted from
// the plan.
func TestZeROOnAPipelineCountsPerMicroBatch(t *testing.T) {
	const k, m, n = 2, 4, 2
	count := func(zero int) (rs, agBackward int, notes []string) {
		src := strings.Replace(layers(k, n, m, "1f1b", nil), "clip = 1", fmt.Sprintf("zero = %d", zero), 1)
		p, err := lowerSource(src)
		require.NoError(t, err)
		for _, prog := range p.Exec.Programs {
			for _, in := range prog.Instrs {
				if in.Kind == plan.Collective && in.Step.Kind == "reduce_scatter" {
					rs++
				}
				if in.Kind == plan.Collective && in.Step.Kind == "all_gather" && in.Act != nil {
					agBackward++
				}
			}
		}
		return rs, agBackward, Explain(p).Pipeline.Notes
	}
	rs, _, notes := count(2)
	require.Equal(t, n*m, rs, "each of the %d params' gradients reduce-scattered once per micro-batch", n)
	require.Contains(t, strings.Join(notes, " "), "ZeRO-2 on a pipeline: gradients are reduce-scattered once per micro-batch, 4 times a step")
	rs3, ag3, notes3 := count(3)
	require.Equal(t, n*m, rs3)
	require.Equal(t, m, ag3, "W1 gathered again in each micro-batch's backward")
	require.Contains(t, strings.Join(notes3, " "), "all-gathered again in every micro-batch's backward")
}

// An optimizer state that the update first reads through a value of no
// stage (momentum's buf·μ: the state and a constant, neither staged) lives
// on the stage of the update that reads that value, as Adam's moments do:
// the pipeline ranks' programs verify, and each state is stored where its
// next value is computed.
func TestPipelineMomentumStateHasAStage(t *testing.T) {
	for _, opt := range []string{"momentum(lr=0.01, momentum=0.9)", "sgd(lr=0.01)", "adam(lr=0.01)"} {
		src := strings.Replace(layers(2, 4, 4, "1f1b", nil), "adam(lr=0.01)", opt, 1)
		p, err := lowerSource(src)
		require.NoError(t, err, opt)
		for _, s := range p.Exec.Sources {
			if strings.HasSuffix(s.Name, ".momentum") || strings.HasSuffix(s.Name, ".exp_avg") {
				require.GreaterOrEqual(t, s.Home, 0, "%s: %s", opt, s.Name)
			}
		}
	}
}
