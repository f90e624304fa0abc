package planner

import (
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// feasible lists the candidates Search would consider for p.
func feasible(t *testing.T, p *Program, opts Options) (*base, []*Candidate) {
	t.Helper()
	space := opts.Space.withDefaults(p)
	b, err := analyse(p, space)
	require.NoError(t, err)
	var micro []int
	for m := range b.flops {
		micro = append(micro, m)
	}
	sort.Ints(micro)
	var out []*Candidate
	for _, c := range enumerate(p, space, opts.Devices, micro, b.dataAxis) {
		if (c.PP == 1 || c.PP*group(c).v <= p.Units) && b.even(c) {
			out = append(out, c)
		}
	}
	return b, out
}

// The composed cost of every candidate against its exact pricing.
func TestComposedMatchesExact(t *testing.T) {
	p := writeGPT(t, 6, 8)
	f := newFolded(p)
	require.NotNil(t, f)
	opts := Options{Devices: 16, Links: mustLinks(t, "8:1:300,*:10:25"), Rate: 400e12,
		Space: Space{Schedules: []string{"gpipe", "1f1b", "interleaved(2)", "zb1p", "zbv"}, MaxMicro: 8}}
	b, cands := feasible(t, p, opts)
	f.rows = b.rows
	sample := 13 // every 13th pipelined candidate (the pattern covers each schedule, ZeRO stage and mesh)
	var worstStep, worstPeak float64
	flatMany := 0
	var worstS, worstP string
	n := 0
	for i, c := range cands {
		if i%sample != 0 && c.PP > 1 { // every candidate without a pipeline
			continue
		}
		e, err := evaluate(p, c, opts, b.dataName(p))
		if err != nil {
			continue
		}
		got, err := f.compose(c, opts, b.dataName(p))
		require.NoError(t, err, c.Label(p))
		n++
		if c.PP == 1 && c.Micro > 4 {
			flatMany++ // extrapolated in the micro-batch count too
		}
		rs := math.Abs(got.Step-e.Cost.Step) / e.Cost.Step
		rp := math.Abs(float64(got.Peak-e.Cost.Peak)) / float64(e.Cost.Peak)
		if rs > worstStep {
			worstStep, worstS = rs, c.Label(p)
		}
		if rp > worstPeak {
			worstPeak, worstP = rp, c.Label(p)
		}
		require.Less(t, rs, 0.02, "%s: composed step %.4g, exact %.4g", c.Label(p), got.Step, e.Cost.Step)
		require.Less(t, rp, 0.25, "%s: composed peak %d, exact %d", c.Label(p), got.Peak, e.Cost.Peak)
	}
	require.Greater(t, n, 100)
	require.Positive(t, flatMany)
	t.Logf("%d candidates; worst step %.3f%% (%s), worst peak %.3f%% (%s)", n, 100*worstStep, worstS, 100*worstPeak, worstP)
}

// The search with composition returns what the exhaustive search by
// exact pricing returns: the same strategies, in the same order, at the
// same (exact) step times — with and without a memory budget.
func TestComposedSearchEqualsExhaustive(t *testing.T) {
	if testing.Short() {
		t.Skip("prices hundreds of candidates")
	}
	p := writeGPT(t, 6, 8)
	for _, memory := range []int64{0, 1 << 30} {
		opts := Options{Devices: 8, Links: mustLinks(t, "4:1:300,*:10:25"), Top: 3, Memory: memory,
			Space: Space{Schedules: []string{"1f1b", "zbv"}, MaxMicro: 4, Zero: []int{0, 1}}}
		got, err := Search(p, opts)
		require.NoError(t, err)
		require.NotNil(t, got.Folded, "the GPT folds")
		opts.Exhaustive = true
		all, err := Search(p, opts)
		require.NoError(t, err)
		require.Nil(t, all.Folded)
		require.Equal(t, all.Candidates, all.Priced)
		require.NotEmpty(t, all.Ranked)
		require.Equal(t, len(all.Ranked), len(got.Ranked), got.Text())
		for i := range all.Ranked {
			require.Equal(t, all.Ranked[i].Cost.Step, got.Ranked[i].Cost.Step, "rank %d: %s vs %s", i+1, all.Ranked[i].Label, got.Ranked[i].Label)
			require.False(t, got.Ranked[i].Composed, "printed strategies are priced exactly")
		}
		require.Equal(t, all.Ranked[0].Label, got.Ranked[0].Label)
		require.Less(t, got.Priced, all.Priced/4, "composition leaves few to price exactly")
		t.Logf("memory %d: %d candidates, %d modelled from %d proxy lowerings, %d priced exactly (exhaustive %d); best %s",
			memory, got.Candidates, got.Composed, got.Proxies, got.Priced, all.Priced, got.Ranked[0].Label)
	}
}

// The bounds' figures from the folded programs equal those from the
// whole program.
func TestAnalyseFoldedEqualsWhole(t *testing.T) {
	p := writeGPT(t, 7, 8)
	space := Space{MaxMicro: 8}.withDefaults(p)
	whole, err := analyse(p, space)
	require.NoError(t, err)
	f := newFolded(p)
	require.NotNil(t, f)
	folded, err := analyseFolded(p, space, f)
	require.NoError(t, err)
	require.Equal(t, len(whole.flops), len(folded.flops))
	for m, v := range whole.flops {
		require.InDelta(t, v, folded.flops[m], 1e-9*v, "M=%d", m)
	}
	require.Equal(t, whole.paramB, folded.paramB)
	require.Equal(t, whole.gradB, folded.gradB)
	require.Equal(t, whole.grads, folded.grads)
	require.Equal(t, whole.dataAxis, folded.dataAxis)
	set := func(s []split) map[split]bool {
		out := map[split]bool{}
		for _, x := range s {
			out[x] = true
		}
		return out
	}
	require.Equal(t, set(whole.splits), set(folded.splits))
}
