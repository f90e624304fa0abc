package algo_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/meshrun/meshrun/algo"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

// headAttn holds one head's attention of some query rows to some keys:
// probabilities P [Lq, Lk] and output O [Lq, hd].
type headAttn struct{ p, o *rt.Tensor }

// attend is softmax(Q·Kᵀ/√hd)·V per head of 2-D q [Lq, H], k, v [Lk, H];
// with causal, query i (at sequence position qpos[i]) sees only keys at
// positions kpos[j] ≤ qpos[i]. nil positions mean 0, 1, 2, ….
func attend(q, k, v *rt.Tensor, heads int, qpos, kpos []int, causal bool) []headAttn {
	h := q.Shape[1]
	hd := h / heads
	lq, lk := q.Shape[0], k.Shape[0]
	qpos, kpos = positions(qpos, lq), positions(kpos, lk)
	out := make([]headAttn, heads)
	for hh := range heads {
		qh, kh, vh := box(q, 0, lq, hh*hd, hd), box(k, 0, lk, hh*hd, hd), box(v, 0, lk, hh*hd, hd)
		s := matmul(qh, kh, false, true)
		for i := range lq {
			row := f64(s)[i*lk : (i+1)*lk]
			top := math.Inf(-1)
			for j := range row {
				row[j] /= math.Sqrt(float64(hd))
				if causal && kpos[j] > qpos[i] {
					row[j] = math.Inf(-1)
				}
				top = max(top, row[j])
			}
			var z float64
			for j := range row {
				row[j] = math.Exp(row[j] - top)
				z += row[j]
			}
			for j := range row {
				row[j] /= z
			}
		}
		out[hh] = headAttn{p: s, o: matmul(s, vh, false, false)}
	}
	return out
}

func positions(p []int, n int) []int {
	if p != nil {
		return p
	}
	p = make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// joinHeads lays per-head [L, hd] blocks side by side.
func joinHeads(hs []*rt.Tensor) *rt.Tensor { return rt.ConcatDim(hs, 1) }

// gather stacks the given rows of x.
func gather(x *rt.Tensor, rows []int) *rt.Tensor {
	var parts []*rt.Tensor
	for _, r := range rows {
		parts = append(parts, box(x, r, 1, 0, x.Shape[1]))
	}
	return rt.ConcatDim(parts, 0)
}

// ringAttention runs ring attention's data movement on n ranks (B = 1),
// rank i holding the sequence rows rowsOf(i): forward, K and V blocks
// travel n−1 hops and each rank attends its query rows to all of them,
// keeping the blocks; backward, as autodiff transposes the hops, the dK
// and dV of each block travel back the way it came (n−1 hops), each rank
// adding its share. It returns the bytes each rank sent.
func ringAttention(t *testing.T, a algo.Attention, n int, causal bool, rowsOf func(int) []int) (fwd, bwd []int64) {
	require.Equal(t, 1, a.Batch)
	rng := rand.New(rand.NewPCG(uint64(n), uint64(a.Seq)))
	q, k, v, do := random(rng, a.Seq, a.Hidden), random(rng, a.Seq, a.Hidden), random(rng, a.Seq, a.Hidden), random(rng, a.Seq, a.Hidden)
	ref := attend(q, k, v, a.Heads, nil, nil, causal)
	w := newWorld(t, mesh.New("sp", mesh.Axis{Name: "sp", Size: n}))
	// keys in ring-block order: block j's rows, j = 0..n−1
	var kpos []int
	col0 := make([]int, n+1) // block j's first column among them
	for j := range n {
		kpos = append(kpos, rowsOf(j)...)
		col0[j+1] = len(kpos)
	}
	probs := make([][]headAttn, n)
	hop := func(ctx context.Context, r, tag int, x *rt.Tensor) (*rt.Tensor, error) {
		if err := w.tr.Send(ctx, r, (r+1)%n, tag, x); err != nil {
			return nil, err
		}
		return w.tr.Recv(ctx, r, (r-1+n)%n, tag)
	}
	fwd = w.run(func(ctx context.Context, r int) error {
		ks, vs := make([]*rt.Tensor, n), make([]*rt.Tensor, n)
		j := r
		ks[j], vs[j] = gather(k, rowsOf(r)), gather(v, rowsOf(r))
		for range n - 1 {
			nk, err := hop(ctx, r, 1, ks[j])
			if err != nil {
				return err
			}
			nv, err := hop(ctx, r, 2, vs[j])
			if err != nil {
				return err
			}
			j = (j - 1 + n) % n
			ks[j], vs[j] = nk, nv
		}
		probs[r] = attend(gather(q, rowsOf(r)), rt.ConcatDim(ks, 0), rt.ConcatDim(vs, 0), a.Heads, rowsOf(r), kpos, causal)
		for hh := range a.Heads {
			near(t, gather(ref[hh].o, rowsOf(r)), probs[r][hh].o, fmt.Sprintf("O rows of rank %d head %d", r, hh))
		}
		return nil
	})
	// backward, per head: dV_j = Σ_r P_rjᵀ·dO_r, dK_j = Σ_r dS_rjᵀ·Q_r/√hd
	// with dS = P∘(dP − rowsum(dO∘O)), dP = dO·Vᵀ (V in ring-block order)
	hd := a.Hidden / a.Heads
	vAll := gather(v, kpos)
	dsOf := func(r int) []*rt.Tensor {
		lr := len(rowsOf(r))
		var out []*rt.Tensor
		for hh := range a.Heads {
			p := probs[r][hh].p
			dO := box(gather(do, rowsOf(r)), 0, lr, hh*hd, hd)
			dp := matmul(dO, box(vAll, 0, a.Seq, hh*hd, hd), false, true)
			ds := p.Clone()
			for i := range lr {
				var dot float64
				for c := range hd {
					dot += f64(dO)[i*hd+c] * f64(probs[r][hh].o)[i*hd+c]
				}
				for jj := range a.Seq {
					f64(ds)[i*a.Seq+jj] = f64(p)[i*a.Seq+jj] * (f64(dp)[i*a.Seq+jj] - dot)
				}
			}
			out = append(out, ds)
		}
		return out
	}
	hopBack := func(ctx context.Context, r, tag int, x *rt.Tensor) (*rt.Tensor, error) {
		if err := w.tr.Send(ctx, r, (r-1+n)%n, tag, x); err != nil {
			return nil, err
		}
		return w.tr.Recv(ctx, r, (r+1)%n, tag)
	}
	bwd = w.run(func(ctx context.Context, r int) error {
		lr := len(rowsOf(r))
		qr, dor := gather(q, rowsOf(r)), gather(do, rowsOf(r))
		ds := dsOf(r)
		// this rank's share of block j's dK and dV, from the K and V
		// blocks the forward kept
		contrib := func(j int) (dk, dv *rt.Tensor) {
			j0, lj := col0[j], col0[j+1]-col0[j]
			dk, dv = rt.NewTensor(ir.F64, []int{lj, a.Hidden}), rt.NewTensor(ir.F64, []int{lj, a.Hidden})
			for hh := range a.Heads {
				pj := box(probs[r][hh].p, 0, lr, j0, lj)
				addBlock(dv, matmul(pj, box(dor, 0, lr, hh*hd, hd), true, false), hh*hd)
				g := matmul(box(ds[hh], 0, lr, j0, lj), box(qr, 0, lr, hh*hd, hd), true, false)
				for i := range f64(g) {
					f64(g)[i] /= math.Sqrt(float64(hd))
				}
				addBlock(dk, g, hh*hd)
			}
			return dk, dv
		}
		// block r−h is the one this rank received after h hops; its
		// gradient goes back the way it came, gathering each rank's share
		dk, dv := contrib((r + 1) % n)
		for h := n - 1; h >= 1; h-- {
			var err error
			if dk, err = hopBack(ctx, r, 5, dk); err != nil {
				return err
			}
			if dv, err = hopBack(ctx, r, 6, dv); err != nil {
				return err
			}
			mk, mv := contrib((r - h + 1 + n) % n)
			addInto(dk, mk)
			addInto(dv, mv)
		}
		// the single-device gradients of this rank's K and V rows: the
		// queries of every rank, in rank order, against every key
		var allQ []int
		for i := range n {
			allQ = append(allQ, rowsOf(i)...)
		}
		all := make([][]*rt.Tensor, n)
		for i := range n {
			all[i] = dsOf(i)
		}
		var wantDK, wantDV []*rt.Tensor
		for hh := range a.Heads {
			var dsAll, pAll []*rt.Tensor
			for i := range n {
				dsAll = append(dsAll, all[i][hh])
				pAll = append(pAll, probs[i][hh].p)
			}
			gk := matmul(box(rt.ConcatDim(dsAll, 0), 0, a.Seq, col0[r], lr), box(gather(q, allQ), 0, a.Seq, hh*hd, hd), true, false)
			for i := range f64(gk) {
				f64(gk)[i] /= math.Sqrt(float64(hd))
			}
			wantDK = append(wantDK, gk)
			wantDV = append(wantDV, matmul(box(rt.ConcatDim(pAll, 0), 0, a.Seq, col0[r], lr), box(gather(do, allQ), 0, a.Seq, hh*hd, hd), true, false))
		}
		near(t, joinHeads(wantDV), dv, fmt.Sprintf("dV rows of rank %d", r))
		near(t, joinHeads(wantDK), dk, fmt.Sprintf("dK rows of rank %d", r))
		return nil
	})
	return fwd, bwd
}

// addBlock adds g into columns [c0, c0+g's width) of dst.
func addBlock(dst, g *rt.Tensor, c0 int) {
	w, h := dst.Shape[1], g.Shape[1]
	for i := range g.Shape[0] {
		for c := range h {
			f64(dst)[i*w+c0+c] += f64(g)[i*h+c]
		}
	}
}

func TestRingAttentionBytesEqualTheRuntimes(t *testing.T) {
	for _, c := range []struct {
		n, seq, heads, hidden int
		causal, zigzag        bool
	}{
		{2, 8, 1, 4, false, false}, {3, 7, 2, 4, true, false}, {4, 10, 2, 6, false, false}, {1, 5, 1, 3, true, false},
		{2, 8, 1, 4, true, true}, {3, 11, 2, 4, true, true}, {4, 13, 1, 2, true, true},
	} {
		t.Run(fmt.Sprintf("n%d_L%d_causal=%v_zigzag=%v", c.n, c.seq, c.causal, c.zigzag), func(t *testing.T) {
			a := algo.Attention{Batch: 1, Seq: c.seq, Heads: c.heads, Hidden: c.hidden, Elem: 8}
			rows := func(r int) []int {
				o, l := mesh.Split(c.seq, c.n, r)
				return positions(nil, o+l)[o:]
			}
			if c.zigzag {
				rows = func(r int) []int {
					var out []int
					for _, ch := range algo.ZigzagRows(c.seq, c.n, r) {
						out = append(out, positions(nil, ch[0]+ch[1])[ch[0]:]...)
					}
					return out
				}
			}
			fwd, bwd := ringAttention(t, a, c.n, c.causal, rows)
			for r := range c.n {
				cost := a.Ring(c.n, nil, r)
				if c.zigzag {
					cost = a.RingBalanced(c.n, nil, r)
				}
				require.Equal(t, fwd[r], cost.Sent(algo.Forward), "rank %d forward", r)
				require.Equal(t, bwd[r], cost.Sent(algo.Backward), "rank %d backward", r)
			}
		})
	}
}

// ulysses runs Ulysses on p ranks: all-to-all Q, K, V to head shards,
// attention per head, all-to-all O back; backward dO in, dQ, dK, dV out.
func ulysses(t *testing.T, a algo.Attention, p int) {
	rng := rand.New(rand.NewPCG(uint64(p), 9))
	full := make([][3]*rt.Tensor, a.Batch) // Q, K, V per sequence
	for b := range full {
		for i := range 3 {
			full[b][i] = random(rng, a.Seq, a.Hidden)
		}
	}
	w := newWorld(t, mesh.New("sp", mesh.Axis{Name: "sp", Size: p}))
	seqLens, headLens := make([]int, p), make([]int, p)
	for i := range p {
		_, seqLens[i] = mesh.Split(a.Seq, p, i)
		headLens[i] = a.Hidden / p
	}
	// stack is [B, rows, cols] of the given box of every sequence's tensor i
	stack := func(i, r0, nr, c0, nc int) *rt.Tensor {
		var parts []*rt.Tensor
		for b := range a.Batch {
			x := box(full[b][i], r0, nr, c0, nc)
			parts = append(parts, rt.FromSlice([]int{1, nr, nc}, f64(x)))
		}
		return rt.ConcatDim(parts, 0)
	}
	toHeads := func(ctx context.Context, g *rt.Ring, x *rt.Tensor) (*rt.Tensor, error) {
		y, err := g.AllToAll(ctx, x, 2, headLens, 1, seqLens)
		if err != nil {
			return nil, err
		}
		return y.(*rt.Tensor), nil
	}
	toSeq := func(ctx context.Context, g *rt.Ring, x *rt.Tensor) (*rt.Tensor, error) {
		y, err := g.AllToAll(ctx, x, 1, seqLens, 2, headLens)
		if err != nil {
			return nil, err
		}
		return y.(*rt.Tensor), nil
	}
	hp := a.Heads / p
	fwd := w.run(func(ctx context.Context, r int) error {
		g := w.group(r, 0)
		r0, lr := mesh.Split(a.Seq, p, r)
		var sharded [3]*rt.Tensor
		for i := range 3 {
			var err error
			if sharded[i], err = toHeads(ctx, g, stack(i, r0, lr, 0, a.Hidden)); err != nil {
				return err
			}
			near(t, stack(i, 0, a.Seq, r*a.Hidden/p, a.Hidden/p), sharded[i], fmt.Sprintf("head shard %d of rank %d", i, r))
		}
		// attention of this rank's heads, sequence by sequence
		var outs []*rt.Tensor
		for b := range a.Batch {
			sl := func(x *rt.Tensor) *rt.Tensor {
				return rt.FromSlice([]int{a.Seq, a.Hidden / p}, f64(rt.Extract(x, []int{b, 0, 0}, []int{1, a.Seq, a.Hidden / p})))
			}
			var hs []*rt.Tensor
			for _, h := range attend(sl(sharded[0]), sl(sharded[1]), sl(sharded[2]), hp, nil, nil, false) {
				hs = append(hs, h.o)
			}
			o := joinHeads(hs)
			outs = append(outs, rt.FromSlice([]int{1, a.Seq, a.Hidden / p}, f64(o)))
		}
		o, err := toSeq(ctx, g, rt.ConcatDim(outs, 0))
		if err != nil {
			return err
		}
		for b := range a.Batch {
			var hs []*rt.Tensor
			for _, h := range attend(full[b][0], full[b][1], full[b][2], a.Heads, nil, nil, false) {
				hs = append(hs, h.o)
			}
			want := box(joinHeads(hs), r0, lr, 0, a.Hidden)
			near(t, want, rt.FromSlice([]int{lr, a.Hidden}, f64(rt.Extract(o, []int{b, 0, 0}, []int{1, lr, a.Hidden}))), fmt.Sprintf("O rows of rank %d", r))
		}
		return nil
	})
	bwd := w.run(func(ctx context.Context, r int) error {
		g := w.group(r, 0)
		r0, lr := mesh.Split(a.Seq, p, r)
		if _, err := toHeads(ctx, g, stack(0, r0, lr, 0, a.Hidden)); err != nil { // dO
			return err
		}
		for i := range 3 { // dQ, dK, dV: head shards back to sequence shards
			back, err := toSeq(ctx, g, stack(i, 0, a.Seq, r*a.Hidden/p, a.Hidden/p))
			if err != nil {
				return err
			}
			near(t, stack(i, r0, lr, 0, a.Hidden), back, "round trip")
		}
		return nil
	})
	for r := range p {
		c, err := a.Ulysses(p, nil, r)
		require.NoError(t, err)
		require.Equal(t, fwd[r], c.Sent(algo.Forward), "rank %d forward", r)
		require.Equal(t, bwd[r], c.Sent(algo.Backward), "rank %d backward", r)
	}
}

func TestUlyssesBytesEqualTheRuntimes(t *testing.T) {
	for _, c := range []struct{ p, batch, seq, heads, hidden int }{{2, 1, 8, 2, 4}, {2, 3, 7, 4, 8}, {3, 2, 10, 3, 6}, {4, 1, 9, 8, 16}} {
		t.Run(fmt.Sprintf("p%d_B%d_L%d", c.p, c.batch, c.seq), func(t *testing.T) {
			ulysses(t, algo.Attention{Batch: c.batch, Seq: c.seq, Heads: c.heads, Hidden: c.hidden, Elem: 8}, c.p)
		})
	}
	_, err := algo.Attention{Batch: 1, Seq: 8, Heads: 3, Hidden: 6, Elem: 4}.Ulysses(2, nil, 0)
	require.ErrorContains(t, err, "the 3 heads must split evenly")
}
