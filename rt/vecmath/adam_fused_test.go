package vecmath

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestAdamFusedEqualsThreePasses: AdamFused gives, bit for bit, what the
// three passes it replaces give (Moment with β1, Moment squared with β2,
// AdamUpdate on their results; TestAdamSlices ties those to the scalar
// formulas), for every length from 0 to 40 and one of 1000 (vector body
// and scalar tail at every split), with zero, subnormal, huge, infinite
// and NaN gradients and moments, and weight decay on and off. It writes
// nothing past its slices.
func TestAdamFusedEqualsThreePasses(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	specials := []float32{0, 1e-40, -1e-40, 1e30, -1e30, float32(math.Inf(1)), float32(math.NaN())}
	draw := func(scale float64) float32 {
		if rng.IntN(5) == 0 {
			return specials[rng.IntN(len(specials))]
		}
		return float32(rng.NormFloat64() * scale)
	}
	for _, h := range []AdamHyper{
		{Beta1: 0.9, Beta2: 0.999, Step: 1e-3, RootBC2: 0.97, Eps: 1e-8, Decay: 1},
		{Beta1: 0.8, Beta2: 0.99, Step: 3e-2, RootBC2: 0.5, Eps: 1e-6, Decay: 0.999},
	} {
		for _, n := range append(seq(41), 1000) {
			p, m, v, g := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range n {
				p[i], m[i], g[i] = draw(1), draw(1e-2), draw(1e-1)
				v[i] = float32(math.Abs(float64(draw(1e-3))))
			}
			wm, wv, wp := make([]float32, n), make([]float32, n), make([]float32, n)
			Moment(wm, m, g, h.Beta1, false)
			Moment(wv, v, g, h.Beta2, true)
			AdamUpdate(wp, p, wm, wv, h.Step, h.RootBC2, h.Eps, h.Decay)
			var got [3][]float32
			for k := range got {
				got[k] = make([]float32, n+1)
				got[k][n] = 7
			}
			AdamFused(got[0][:n], got[1][:n], got[2][:n], p, m, v, g, h)
			for k, want := range [][]float32{wp, wm, wv} {
				for i := range n {
					if math.Float32bits(got[k][i]) != math.Float32bits(want[i]) {
						t.Fatalf("%+v n=%d: result %d [%d] = %g, the three passes give %g", h, n, k, i, got[k][i], want[i])
					}
				}
				if got[k][n] != 7 {
					t.Fatalf("n=%d: result %d written past its slice", n, k)
				}
			}
		}
	}
}

// TestAdamFusedInPlace: AdamFused writing p', m', v' over p, m, v
// (buffer donation) gives, bit for bit, what it gives into fresh slices,
// for every length from 0 to 40 and one of 1000 (vector body and tail),
// with special values among the inputs; the gradient is not written.
func TestAdamFusedInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	specials := []float32{0, 1e-40, 1e30, -1e30, float32(math.Inf(-1)), float32(math.NaN())}
	h := AdamHyper{Beta1: 0.8, Beta2: 0.99, Step: 3e-2, RootBC2: 0.5, Eps: 1e-6, Decay: 0.999}
	for _, n := range append(seq(41), 1000) {
		in := make([][]float32, 4) // p, m, v, g
		for k := range in {
			in[k] = make([]float32, n)
			for i := range n {
				in[k][i] = float32(rng.NormFloat64())
				if rng.IntN(6) == 0 {
					in[k][i] = specials[rng.IntN(len(specials))]
				}
			}
		}
		g := slices.Clone(in[3])
		want := [3][]float32{make([]float32, n), make([]float32, n), make([]float32, n)}
		AdamFused(want[0], want[1], want[2], in[0], in[1], in[2], in[3], h)
		p, m, v := slices.Clone(in[0]), slices.Clone(in[1]), slices.Clone(in[2])
		AdamFused(p, m, v, p, m, v, in[3], h)
		for k, got := range [][]float32{p, m, v} {
			for i := range n {
				if math.Float32bits(got[i]) != math.Float32bits(want[k][i]) {
					t.Fatalf("n=%d: result %d [%d] in place = %g, into fresh slices %g", n, k, i, got[i], want[k][i])
				}
			}
		}
		if !slices.Equal(math32bits(g), math32bits(in[3])) {
			t.Fatalf("n=%d: the gradient was written", n)
		}
	}
}

func math32bits(x []float32) []uint32 {
	out := make([]uint32, len(x))
	for i, f := range x {
		out[i] = math.Float32bits(f)
	}
	return out
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// BenchmarkAdamFusedVsThree measures the ceiling of fusing Adam (issue
// 10): one step of the MLP's optimizer (bench/torch_mlp.sh: two
// parameters of 512×1024 f32) as the three passes the plan runs today and
// as AdamFused, alternating in each of b.N rounds (run with -benchtime 9x
// or more), each side timed as the fastest of 3 repetitions. Outputs
// rotate through three buffer sets as the step's arena recycles them, so
// the working set (28 MB) is beyond the caches, as in a step. Reports
// fused/three min / median / max over the rounds.
func BenchmarkAdamFusedVsThree(b *testing.B) {
	const n = 512 * 1024
	h := AdamHyper{Beta1: 0.9, Beta2: 0.999, Step: 1e-3, RootBC2: 0.99, Eps: 1e-8, Decay: 1}
	ps := benchParams(n)
	it := 0
	three := func() {
		cur, next := it%3, (it+1)%3
		for i := range ps {
			q := &ps[i]
			Moment(q.m[next], q.m[cur], q.g[cur], h.Beta1, false)
			Moment(q.v[next], q.v[cur], q.g[cur], h.Beta2, true)
			AdamUpdate(q.p[next], q.p[cur], q.m[next], q.v[next], h.Step, h.RootBC2, h.Eps, h.Decay)
		}
		it++
	}
	fused := func() {
		cur, next := it%3, (it+1)%3
		for i := range ps {
			q := &ps[i]
			AdamFused(q.p[next], q.m[next], q.v[next], q.p[cur], q.m[cur], q.v[cur], q.g[cur], h)
		}
		it++
	}
	fastest := func(f func()) time.Duration {
		best := time.Duration(math.MaxInt64)
		for range 3 {
			t0 := time.Now()
			f()
			best = min(best, time.Since(t0))
		}
		return best
	}
	var ratios []float64
	var tThree, tFused []time.Duration
	for r := 0; r < b.N; r++ {
		var t [2]time.Duration
		for k := range 2 {
			j := (k + r) % 2
			t[j] = fastest([]func(){three, fused}[j])
		}
		tThree, tFused = append(tThree, t[0]), append(tFused, t[1])
		ratios = append(ratios, float64(t[1])/float64(t[0]))
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "fused/three")
	b.Logf("fused/three over %d rounds: min %.3f median %.3f max %.3f; fastest three %v, fused %v",
		b.N, ratios[0], ratios[len(ratios)/2], ratios[len(ratios)-1], slices.Min(tThree), slices.Min(tFused))
}
