package algo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/meshrun/meshrun/algo"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

// route is the top-k choice of one rank's tokens: for token i, choice c,
// expert route[i][c] with weight gate[i][c]; slot[i][c] is its place in
// the expert's buffer, or -1 when the expert was full (dropped).
type route struct {
	expert, slot [][]int
	gate         [][]float64
}

// routeTokens picks k distinct experts per token at random and gives
// slots first come, first served, up to capacity per expert.
func routeTokens(rng *rand.Rand, tokens, experts, k, capacity int) route {
	var rt route
	used := make([]int, experts)
	for range tokens {
		perm := rng.Perm(experts)[:k]
		var slots []int
		var gates []float64
		for _, e := range perm {
			s := -1
			if used[e] < capacity {
				s = used[e]
				used[e]++
			}
			slots = append(slots, s)
			gates = append(gates, rng.Float64())
		}
		rt.expert = append(rt.expert, perm)
		rt.slot = append(rt.slot, slots)
		rt.gate = append(rt.gate, gates)
	}
	return rt
}

// moe runs expert parallelism on p ranks: dispatch all-to-all, each
// expert e multiplies its slots by W_e, combine all-to-all; backward the
// same two all-to-alls carry gradients. The output is checked against the
// same routing computed on one device.
func moe(t *testing.T, e algo.MoE, p int) {
	rng := rand.New(rand.NewPCG(uint64(p), uint64(e.Tokens)))
	h := e.Hidden
	x := random(rng, e.Tokens, h)
	ws := make([]*rt.Tensor, e.Experts)
	for i := range ws {
		ws[i] = random(rng, h, h)
	}
	routes := make([]route, p)
	caps := make([]int, p)
	for r := range p {
		_, tr := mesh.Split(e.Tokens, p, r)
		groups, size := 1, tr // one capacity group per rank, or Groups/p of Tokens/Groups
		if e.Groups > 0 {
			groups, size = e.Groups/p, e.Tokens/e.Groups
		}
		caps[r] = groups * e.Capacity(size)
		for range groups {
			g := routeTokens(rng, size, e.Experts, e.TopK, e.Capacity(size))
			for i := range g.slot {
				for c := range g.slot[i] {
					if g.slot[i][c] >= 0 { // the group's slots follow the earlier groups'
						g.slot[i][c] += len(routes[r].expert) / size * e.Capacity(size)
					}
				}
			}
			routes[r].expert = append(routes[r].expert, g.expert...)
			routes[r].slot = append(routes[r].slot, g.slot...)
			routes[r].gate = append(routes[r].gate, g.gate...)
		}
	}
	ep := e.Experts / p
	w := newWorld(t, mesh.New("ep", mesh.Axis{Name: "ep", Size: p}))
	expertLens, capLens := make([]int, p), caps
	for i := range expertLens {
		expertLens[i] = ep
	}
	dropped := 0
	fwd := w.run(func(ctx context.Context, r int) error {
		g := w.group(r, 0)
		t0, tr := mesh.Split(e.Tokens, p, r)
		buf := rt.NewTensor(ir.F64, []int{e.Experts, caps[r], h})
		for i := range tr {
			for c, ex := range routes[r].expert[i] {
				if s := routes[r].slot[i][c]; s >= 0 {
					copy(f64(buf)[(ex*caps[r]+s)*h:], f64(x)[(t0+i)*h:(t0+i+1)*h])
				}
			}
		}
		// [E, C_r, H] → [E/p, Σ C, H]: this rank's experts, every rank's slots
		got, err := g.AllToAll(ctx, buf, 0, expertLens, 1, capLens)
		if err != nil {
			return err
		}
		in := got.(*rt.Tensor)
		slots := in.Shape[1]
		out := rt.NewTensor(ir.F64, in.Shape)
		for le := range ep {
			blk := rt.FromSlice([]int{slots, h}, f64(in)[le*slots*h:(le+1)*slots*h])
			copy(f64(out)[le*slots*h:], f64(matmul(blk, ws[r*ep+le], false, false)))
		}
		back, err := g.AllToAll(ctx, out, 1, capLens, 0, expertLens)
		if err != nil {
			return err
		}
		res := back.(*rt.Tensor)
		for i := range tr {
			want := make([]float64, h)
			got := make([]float64, h)
			for c, ex := range routes[r].expert[i] {
				s := routes[r].slot[i][c]
				if s < 0 {
					if r == 0 {
						dropped++
					}
					continue
				}
				y := matmul(box(x, t0+i, 1, 0, h), ws[ex], false, false)
				for j := range h {
					want[j] += routes[r].gate[i][c] * f64(y)[j]
					got[j] += routes[r].gate[i][c] * f64(res)[(ex*caps[r]+s)*h+j]
				}
			}
			require.InDeltaSlice(t, want, got, 1e-9, "token %d of rank %d", i, r)
		}
		return nil
	})
	bwd := w.run(func(ctx context.Context, r int) error {
		g := w.group(r, 0)
		grad := rt.NewTensor(ir.F64, []int{e.Experts, caps[r], h})
		gin, err := g.AllToAll(ctx, grad, 0, expertLens, 1, capLens)
		if err != nil {
			return err
		}
		if _, err = g.AllToAll(ctx, gin, 1, capLens, 0, expertLens); err != nil {
			return err
		}
		// the replicated router's gradient, summed over the ranks' tokens
		_, err = g.AllReduce(ctx, rt.NewTensor(ir.F64, []int{h, e.Experts}), rt.OpSum)
		return err
	})
	for r := range p {
		c, err := e.Cost(p, nil, r)
		require.NoError(t, err)
		require.Equal(t, fwd[r], c.Sent(algo.Forward), "rank %d forward", r)
		require.Equal(t, bwd[r], c.Sent(algo.Backward), "rank %d backward", r)
	}
	if e.CapacityFactor < 1 {
		require.Positive(t, dropped, "a capacity factor below 1 must drop tokens on rank 0")
	}
}

func TestMoEBytesEqualTheRuntimes(t *testing.T) {
	for _, c := range []struct {
		p, tokens, experts, k, groups int
		cf                            float64
	}{{2, 16, 4, 2, 0, 1.25}, {4, 30, 8, 1, 0, 1.0}, {3, 13, 6, 2, 0, 0.5}, {1, 5, 2, 1, 0, 2}, {2, 24, 4, 2, 4, 0.5}, {2, 12, 2, 1, 2, 1}} {
		t.Run(fmt.Sprintf("p%d_T%d_E%d_k%d_G%d_c%g", c.p, c.tokens, c.experts, c.k, c.groups, c.cf), func(t *testing.T) {
			moe(t, algo.MoE{Tokens: c.tokens, Experts: c.experts, TopK: c.k, CapacityFactor: c.cf, Groups: c.groups, Hidden: 3, FFN: 5, Elem: 8}, c.p)
		})
	}
	_, err := algo.MoE{Tokens: 12, Experts: 4, TopK: 1, CapacityFactor: 1, Groups: 3, Hidden: 2, FFN: 2, Elem: 4}.Cost(2, nil, 0)
	require.ErrorContains(t, err, "3 capacity groups must be a multiple of the ranks")
	_, err = algo.MoE{Tokens: 8, Experts: 6, TopK: 1, CapacityFactor: 1, Hidden: 2, FFN: 2, Elem: 4}.Cost(4, nil, 0)
	require.ErrorContains(t, err, "the 6 experts must split evenly")
	// GShard's capacity: ⌈1.25·2·16/4⌉ = 10 slots per expert
	require.Equal(t, 10, algo.MoE{Experts: 4, TopK: 2, CapacityFactor: 1.25}.Capacity(16))
}
