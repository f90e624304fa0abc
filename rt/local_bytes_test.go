package rt

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/algo"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// The bytes the local view's algorithms (stdlib/par.mesh) send, as the
// runtime counts them, against the closed forms of
// shared/notes/algorithms.md written out here, and against package algo.
// Each program is trained one step, so one run has the forward and the
// backward: every instruction the spmd pass emits is attributed to the
// value it serves (lower.Plan.InstrValue), which says whether it is a
// collective written in a local function (forward, or autodiff's transpose
// in the backward) or a conversion the compiler inserted (the loss's
// reduction, boundary boxing). The algorithm's figure is the written ones
// only; the inserted ones are asserted separately. Every written step is
// also checked against explain's "collectives written in local functions"
// (lower.Explain(p).Written): its bytes are the busiest device's, measured.
// The memory: a program whose outputs are exactly one operand leaves each
// device holding that operand's block (DeviceStats.Final), which must be
// the fraction of the whole the layout gives it.

// 1D: Megatron's column layer: forward nothing; backward the partial dX
// all-reduced, 2(p−1)/p·mk (the notes' ring all-reduce, p | mk).
func TestLocalBytes1DColumn(t *testing.T) {
	const p, m, k, n = 3, 4, 6, 9
	lp, c := trainOnce(t, fmt.Sprintf("[t=%d]", p),
		"param X : f32[4, 6] = normal(0, 1)\nparam W : f32[6, 9] {t: S(1)} = normal(0, 0.3)\ninput T : f32[4, 9] = normal(0, 1)",
		"mse(par.linear_col(X, W), T)")
	requirePerRank(t, "forward", c.fwd, func(int) int64 { return 0 })
	requirePerRank(t, "backward", c.bwd, func(int) int64 { return 2 * (p - 1) * m * k / p * f32 })
	requireOnlyLoss(t, lp, c)
	costs := algo.GEMM{M: m, K: k, N: n, Elem: f32}.Costs(algo.Layout{Kind: algo.OneDColumn, Q: p}, nil)
	requirePerRank(t, "forward vs algo", c.fwd, algoSent(costs, algo.Forward))
	requirePerRank(t, "backward vs algo", c.bwd, algoSent(costs, algo.Backward))
}

// 1D row: forward the partial Y all-reduced, 2(p−1)/p·mn; backward nothing.
func TestLocalBytes1DRow(t *testing.T) {
	const p, m, k, n = 2, 4, 6, 3
	lp, c := trainOnce(t, fmt.Sprintf("[t=%d]", p),
		"param X : f32[4, 6] {t: S(1)} = normal(0, 1)\nparam W : f32[6, 3] {t: S(0)} = normal(0, 0.3)\ninput T : f32[4, 3] = normal(0, 1)",
		"mse(par.linear_row(X, W), T)")
	requirePerRank(t, "forward", c.fwd, func(int) int64 { return 2 * (p - 1) * m * n / p * f32 })
	requirePerRank(t, "backward", c.bwd, func(int) int64 { return 0 })
	requireOnlyLoss(t, lp, c)
	costs := algo.GEMM{M: m, K: k, N: n, Elem: f32}.Costs(algo.Layout{Kind: algo.OneDRow, Q: p}, nil)
	requirePerRank(t, "forward vs algo", c.fwd, algoSent(costs, algo.Forward))
	requirePerRank(t, "backward vs algo", c.bwd, algoSent(costs, algo.Backward))
}

// Megatron's MLP: one all-reduce of [m, h] each way.
func TestLocalBytesMegatronMLP(t *testing.T) {
	const p, m, h, f = 2, 4, 6, 8
	lp, c := trainOnce(t, fmt.Sprintf("[t=%d]", p),
		"param X : f32[4, 6] = normal(0, 1)\nparam W1 : f32[6, 8] {t: S(1)} = normal(0, 0.3)\nparam W2 : f32[8, 6] {t: S(0)} = normal(0, 0.3)\ninput T : f32[4, 6] = normal(0, 1)",
		"mse(par.mlp_1d(X, W1, W2), T)")
	ar := int64(2 * (p - 1) * m * h / p * f32)
	requirePerRank(t, "forward", c.fwd, func(int) int64 { return ar })
	requirePerRank(t, "backward", c.bwd, func(int) int64 { return ar })
	requireOnlyLoss(t, lp, c)
	for r := range p {
		a := algo.MegatronMLP(m, h, f, f32, p, nil, r)
		require.Equal(t, a.Sent(algo.Forward), c.fwd[r], "forward vs algo, rank %d", r)
		require.Equal(t, a.Sent(algo.Backward), c.bwd[r], "backward vs algo, rank %d", r)
	}
}

// SUMMA on q×q: at step t row i broadcasts X_it from column t and column j
// broadcasts W_tj from row t. Over the q steps every member is the root
// once, and a binomial tree's members send p−1 blocks in all, so each rank
// sends exactly q−1 blocks of each kind: (q−1)(mk+kn)/q² forward. The
// backward is autodiff's transposes: the reduces of dX_it to column t
// and of dW_tj to row t, every member but the root sending once per step:
// (q−1)(mk+kn)/q² again. The notes' backward re-broadcasts X_it and W_tj
// (Optimus, to keep no broadcast buffers); autodiff keeps the forward's
// broadcast blocks instead and sends half as much.
func TestLocalBytesSUMMA(t *testing.T) {
	for _, s := range []struct{ q, m, k, n int }{{2, 8, 6, 4}, {3, 9, 6, 12}, {3, 7, 5, 8}} {
		t.Run(fmt.Sprintf("q=%d %dx%dx%d", s.q, s.m, s.k, s.n), func(t *testing.T) {
			q, m, k, n := s.q, s.m, s.k, s.n
			pl := "{r: S(0), c: S(1)}"
			lp, c := trainOnce(t, fmt.Sprintf("[r=%d, c=%d]", q, q),
				fmt.Sprintf("param X : f32[%d, %d] %s = normal(0, 1)\nparam W : f32[%d, %d] %s = normal(0, 0.3)\ninput T : f32[%d, %d] = normal(0, 1)", m, k, pl, k, n, pl, m, n),
				"mse(par.summa(X, W), T)")
			// the blocks that move: mk/q² and kn/q² (padded: the largest)
			xb, wb := int64(cdiv(m, q)*cdiv(k, q)*f32), int64(cdiv(k, q)*cdiv(n, q)*f32)
			tree := func(r int) int64 { // the binomial trees, step by step
				i, j := r/q, r%q
				var sent int64
				for t := range q {
					sent += int64(children((j-t+q)%q, q))*xb + int64(children((i-t+q)%q, q))*wb
				}
				return sent
			}
			closed := int64(q-1) * (xb + wb)
			requirePerRank(t, "forward, tree by tree", c.fwd, tree)
			requirePerRank(t, "forward, (q−1)(mk+kn)/q²", c.fwd, func(int) int64 { return closed })
			requirePerRank(t, "backward, (q−1)(mk+kn)/q²", c.bwd, func(int) int64 { return closed })
			requireOnlyLoss(t, lp, c)
			// one broadcast costs its root ⌈lg q⌉ blocks: explain's figure
			for _, w := range lower.Explain(lp).Written {
				if w.Kind == "broadcast" {
					blk := xb
					if w.Axis == "r" {
						blk = wb
					}
					require.Equal(t, float64(int64(ceilLg(q))*blk), w.Bytes, "%s over %s", w.Value, w.Axis)
				}
			}
			costs := algo.GEMM{M: m, K: k, N: n, Elem: f32, Padded: true}.Costs(algo.Layout{Kind: algo.TwoD, Q: q}, nil)
			requirePerRank(t, "forward vs algo", c.fwd, algoSent(costs, algo.Forward))
			requirePerRank(t, "backward vs algo", c.bwd, algoSent(costs, algo.Backward))
		})
	}
}

// cdiv is ⌈a/b⌉: a padded block's length.
func cdiv(a, b int) int { return (a + b - 1) / b }

// 2.5D on d×q×q: each depth layer runs SUMMA on its m/d rows, and W's
// gradient is all-reduced over depth: forward (q−1)(mk/d+kn)/q², backward
// the same in reduces (as in SUMMA) plus 2(d−1)/d·kn/q² in the depth
// all-reduce — which is asserted by TestLocalBytesTesseractSumsWOverDepthOnce.
func TestLocalBytesTesseract(t *testing.T) {
	for _, s := range tesseractSizes {
		t.Run(fmt.Sprintf("d=%d q=%d %dx%dx%d", s.d, s.q, s.m, s.k, s.n), func(t *testing.T) {
			d, q, m, k, n := s.d, s.q, s.m, s.k, s.n
			lp, c := trainTesseract(t, d, q, m, k, n)
			summa := int64((q - 1) * (cdiv(cdiv(m, d), q)*cdiv(k, q) + cdiv(k, q)*cdiv(n, q)) * f32)
			requirePerRank(t, "forward, (q−1)(mk/d+kn)/q²", c.fwd, func(int) int64 { return summa })
			requirePerRank(t, "backward reduces, (q−1)(mk/d+kn)/q²", c.bwdBy["reduce"], func(int) int64 { return summa })
			require.ElementsMatch(t, []string{"reduce", "all_reduce"}, mapsKeys(c.bwdBy), "the backward's collectives")
			requireOnlyLoss(t, lp, c)
			costs := algo.GEMM{M: m, K: k, N: n, Elem: f32, Padded: true}.Costs(algo.Layout{Kind: algo.TwoHalfD, Q: q, D: d}, nil)
			requirePerRank(t, "forward vs algo", c.fwd, algoSent(costs, algo.Forward))
		})
	}
}

var tesseractSizes = []struct{ d, q, m, k, n int }{{2, 2, 8, 6, 4}, {3, 2, 12, 4, 6}, {2, 3, 12, 6, 6}, {2, 2, 9, 5, 7}}

func trainTesseract(t *testing.T, d, q, m, k, n int) (*lower.Plan, comms) {
	return trainOnce(t, fmt.Sprintf("[d=%d, r=%d, c=%d]", d, q, q),
		fmt.Sprintf("param X : f32[%d, %d] {d: S(0), r: S(0), c: S(1)} = normal(0, 1)\nparam W : f32[%d, %d] {r: S(0), c: S(1)} = normal(0, 0.3)\ninput T : f32[%d, %d] = normal(0, 1)", m, k, k, n, m, n),
		"mse(par.tesseract(X, W), T)")
}

func mapsKeys(m map[string][]int64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// 2.5D sums W's gradient over depth once: tesseract makes w vary over d
// before its loop (pvary), so the per-step broadcast blocks all feed one
// all-reduce of dW — q of them before that line (48 B instead of 24 on the
// first size, q times the formula on each).
func TestLocalBytesTesseractSumsWOverDepthOnce(t *testing.T) {
	for _, s := range tesseractSizes {
		t.Run(fmt.Sprintf("d=%d q=%d %dx%dx%d", s.d, s.q, s.m, s.k, s.n), func(t *testing.T) {
			d, q, m, k, n := s.d, s.q, s.m, s.k, s.n
			_, c := trainTesseract(t, d, q, m, k, n)
			depth := int64(2 * (d - 1) * cdiv(k, q) * cdiv(n, q) / d * f32) // d | the W block here
			requirePerRank(t, "depth all-reduce of dW, 2(d−1)/d·kn/q²", c.bwdBy["all_reduce"], func(int) int64 { return depth })
			costs := algo.GEMM{M: m, K: k, N: n, Elem: f32, Padded: true}.Costs(algo.Layout{Kind: algo.TwoHalfD, Q: q, D: d}, nil)
			requirePerRank(t, "backward vs algo", c.bwd, algoSent(costs, algo.Backward))
		})
	}
}

// 3D on q×q×q: forward all-gather X over a, W over w, reduce-scatter Y
// over b; backward all-gather dY over b, reduce-scatter dX over a and dW
// over w: (q−1)/q·(mk+kn+mn)/q² each way (the notes' 2(q−1)/q·… is the
// two passes together). The mesh is [i, j, l] with a=i, b=j, w=l; algo's
// mesh [x, y, z] has the same roles in the same order.
func TestLocalBytes3D(t *testing.T) {
	for _, s := range []struct{ q, m, k, n int }{{2, 8, 8, 4}, {3, 9, 18, 6}, {2, 7, 8, 5}} {
		t.Run(fmt.Sprintf("q=%d %dx%dx%d", s.q, s.m, s.k, s.n), func(t *testing.T) {
			q, m, k, n := s.q, s.m, s.k, s.n
			lp, c := trainOnce(t, fmt.Sprintf("[i=%d, j=%d, l=%d]", q, q, q),
				fmt.Sprintf("param X : f32[%d, %d] {i: S(0), l: S(0), j: S(1)} = normal(0, 1)\nparam W : f32[%d, %d] {j: S(0), l: S(0), i: S(1)} = normal(0, 0.3)\ninput T : f32[%d, %d] = normal(0, 1)", m, k, k, n, m, n),
				"mse(par.linear_3d(X, W, a=i, b=j, w=l), T)")
			// q−1 blocks of each: mk/q³, kn/q³, mn/q³ (padded: the largest)
			rows := cdiv(cdiv(m, q), q)
			each := int64((q - 1) * (rows*cdiv(k, q) + cdiv(k, q*q)*cdiv(n, q) + rows*cdiv(n, q)) * f32)
			requirePerRank(t, "forward, (q−1)/q·(mk+kn+mn)/q²", c.fwd, func(int) int64 { return each })
			requirePerRank(t, "backward, (q−1)/q·(mk+kn+mn)/q²", c.bwd, func(int) int64 { return each })
			requireOnlyLoss(t, lp, c)
			costs := algo.GEMM{M: m, K: k, N: n, Elem: f32, Padded: true}.Costs(algo.Layout{Kind: algo.ThreeD, Q: q}, nil)
			requirePerRank(t, "forward vs algo", c.fwd, algoSent(costs, algo.Forward))
			requirePerRank(t, "backward vs algo", c.bwd, algoSent(costs, algo.Backward))
		})
	}
}

// Two 3D layers, the second with a and b exchanged: Y of the first is laid
// out as the second's X wants it (no conversion between them), and each
// layer sends its own (q−1)/q·(mk+kn+mn)/q² each way. algo's second layer
// runs on [x=j, y=i, z=l]: its rank at (x, y, z) is the runtime's (y, x, z).
func TestLocalBytes3DTwoLayers(t *testing.T) {
	const q, m, k, h, n = 2, 8, 8, 4, 8
	lp, c := trainOnce(t, "[i=2, j=2, l=2]",
		"param X : f32[8, 8] {i: S(0), l: S(0), j: S(1)} = normal(0, 1)\nparam W1 : f32[8, 4] {j: S(0), l: S(0), i: S(1)} = normal(0, 0.3)\n"+
			"param W2 : f32[4, 8] {i: S(0), l: S(0), j: S(1)} = normal(0, 0.3)\ninput T : f32[8, 8] = normal(0, 1)",
		"mse(par.linear_3d(tanh(par.linear_3d(X, W1, a=i, b=j, w=l)), W2, a=j, b=i, w=l), T)")
	layers := int64((q-1)*(m*k+k*h+m*h)/(q*q*q)*f32 + (q-1)*(m*h+h*n+m*n)/(q*q*q)*f32)
	requirePerRank(t, "forward, both layers", c.fwd, func(int) int64 { return layers })
	requirePerRank(t, "backward, both layers", c.bwd, func(int) int64 { return layers })
	requireOnlyLoss(t, lp, c)
	l := algo.Layout{Kind: algo.ThreeD, Q: q}
	first := algo.GEMM{M: m, K: k, N: h, Elem: f32}.Costs(l, nil)
	second := algo.GEMM{M: m, K: h, N: n, Elem: f32}.Costs(l, nil)
	swapped := func(r int) int { // the runtime's rank (i, j, l) is algo's (x=j, y=i, z=l)
		co := l.Mesh().Coord(r)
		return (co[1]*q+co[0])*q + co[2]
	}
	for _, pass := range []algo.Pass{algo.Forward, algo.Backward} {
		got := c.fwd
		if pass == algo.Backward {
			got = c.bwd
		}
		requirePerRank(t, string(pass)+" vs algo", got, func(r int) int64 { return first[r].Sent(pass) + second[swapped(r)].Sent(pass) })
	}
}

// Ring attention over n: K and V blocks [B, L/n, H] make n−1 hops forward,
// 2(n−1)·B·L/n·H. The backward is the shifts' transposes: dK and dV make
// n−1 hops the other way, 2(n−1)·B·L/n·H; the forward's K and V blocks
// are kept, not sent again.
func TestLocalBytesRingAttention(t *testing.T) {
	for _, s := range []struct{ n, b, l, h, causal int }{{2, 3, 4, 2, 1}, {3, 2, 6, 4, 0}, {4, 1, 8, 2, 1}} {
		t.Run(fmt.Sprintf("n=%d causal=%d", s.n, s.causal), func(t *testing.T) {
			n, b, l, h := s.n, s.b, s.l, s.h
			shape := fmt.Sprintf("f32[%d, %d, %d]", b, l, h)
			lp, c := trainOnce(t, fmt.Sprintf("[s=%d]", n),
				fmt.Sprintf("param Q : %s {s: S(1)} = normal(0, 1)\nparam K : %s {s: S(1)} = normal(0, 1)\nparam V : %s {s: S(1)} = normal(0, 1)\ninput T : %s = normal(0, 1)", shape, shape, shape, shape),
				fmt.Sprintf("mse(par.ring_attention(Q, K, V, 0.7, %d), T)", s.causal))
			hops := int64(2 * (n - 1) * b * l / n * h * f32)
			requirePerRank(t, "forward, 2(n−1)·B·L/n·H", c.fwd, func(int) int64 { return hops })
			requirePerRank(t, "backward, 2(n−1)·B·L/n·H", c.bwd, func(int) int64 { return hops })
			requireOnlyLoss(t, lp, c)
			a := algo.Attention{Batch: b, Seq: l, Heads: 1, Hidden: h, Elem: f32}
			for r := range n {
				cost := a.Ring(n, nil, r)
				require.Equal(t, cost.Sent(algo.Forward), c.fwd[r], "forward vs algo, rank %d", r)
				require.Equal(t, cost.Sent(algo.Backward), c.bwd[r], "backward vs algo, rank %d", r)
			}
		})
	}
}

// Ulysses over P: Q, K, V [B, heads, L, hd] from sequence to head shards
// and O back, four pairwise all-to-alls each sending (P−1)/P of the local
// block B·heads·(L/P)·hd: 4(P−1)/P·B·L·H/P with H = heads·hd; the
// backward's four transposes the same.
func TestLocalBytesUlysses(t *testing.T) {
	for _, s := range []struct{ p, b, heads, l, hd int }{{2, 3, 2, 4, 2}, {4, 1, 4, 8, 2}} {
		t.Run(fmt.Sprintf("P=%d", s.p), func(t *testing.T) {
			p, b, heads, l, hd := s.p, s.b, s.heads, s.l, s.hd
			shape := fmt.Sprintf("f32[%d, %d, %d, %d]", b, heads, l, hd)
			lp, c := trainOnce(t, fmt.Sprintf("[s=%d]", p),
				fmt.Sprintf("param Q : %s {s: S(2)} = normal(0, 1)\nparam K : %s {s: S(2)} = normal(0, 1)\nparam V : %s {s: S(2)} = normal(0, 1)\ninput T : %s = normal(0, 1)\ninput mask : f32[%d, %d] = causal", shape, shape, shape, shape, l, l),
				"mse(par.ulysses_attention(Q, K, V, mask, 0.7), T)")
			a2a := int64(4 * (p - 1) * b * l * heads * hd / (p * p) * f32)
			requirePerRank(t, "forward, 4(P−1)/P·B·L·H/P", c.fwd, func(int) int64 { return a2a })
			requirePerRank(t, "backward, 4(P−1)/P·B·L·H/P", c.bwd, func(int) int64 { return a2a })
			requireOnlyLoss(t, lp, c)
			a := algo.Attention{Batch: b, Seq: l, Heads: heads, Hidden: heads * hd, Elem: f32}
			for r := range p {
				cost, err := a.Ulysses(p, nil, r)
				require.NoError(t, err)
				require.Equal(t, cost.Sent(algo.Forward), c.fwd[r], "forward vs algo, rank %d", r)
				require.Equal(t, cost.Sent(algo.Backward), c.bwd[r], "backward vs algo, rank %d", r)
			}
		})
	}
}

// A boundary conversion is the compiler's, not the algorithm's: SUMMA with
// X a replicated param (no placement declared) slices it at the boundary
// for free, and its gradient, which the local function returns split
// S(0) × S(1), is all-gathered back to B over both axes — (q−1)/q·mk/q and
// then (q−1)/q·mk. The written collectives send what they send with X
// declared in the algorithm's layout.
func TestLocalBytesBoundaryConversions(t *testing.T) {
	const q, m, k, n = 2, 8, 6, 4
	p, c := trainOnce(t, "[r=2, c=2]",
		"param X : f32[8, 6] = normal(0, 1)\nparam W : f32[6, 4] {r: S(0), c: S(1)} = normal(0, 0.3)\ninput T : f32[8, 4] = normal(0, 1)",
		"mse(par.summa(X, W), T)")
	closed := int64((q - 1) * (m*k + k*n) / (q * q) * f32)
	requirePerRank(t, "forward", c.fwd, func(int) int64 { return closed })
	requirePerRank(t, "backward", c.bwd, func(int) int64 { return closed })
	loss := forLoss(p)
	gathered := make([]int64, len(c.insertedBy))
	for d, ins := range c.insertedBy {
		for _, s := range ins {
			if loss[s.name] != nil {
				continue
			}
			require.Equal(t, "all_gather", strings.SplitN(s.name, "(", 2)[0], "device %d: %s", d, s.name)
			gathered[d] += s.bytes
		}
	}
	requirePerRank(t, "dX all-gathered to B, (q−1)/q·(mk/q + mk)", gathered, func(int) int64 { return (q - 1) * (m*k/q + m*k) / q * f32 })
	// explain lists them among the collectives the compiler inserted
	var listed float64
	for _, cr := range lower.Explain(p).Collectives {
		if cr.Communicate && loss[cr.Kind+"("+cr.Value+")"] == nil {
			require.Equal(t, "all_gather", cr.Kind, "%s over %s", cr.Value, cr.Axis)
			listed += cr.Bytes
		}
	}
	require.Equal(t, float64(gathered[0]), listed, "explain's inserted collectives vs the bytes measured")
}

// explain prices a written all_reduce by the ring's balanced chunks, not
// the even-division 2(p−1)/p·G, which is not a byte count when p does not
// divide the elements: linear_row's all-reduce of Y [5, 4] (20 elements,
// f32) over 3 devices (chunks 7, 7, 6) makes the busiest device send 27
// elements, 108 bytes (the formula says 106.67).
func TestLocalBytesExplainAllReduceUneven(t *testing.T) {
	p := compileLocal(t, "mesh M = [t=3]\nuse par\ninput X : f32[5, 6] {t: S(1)} = normal(0, 1)\ninput W : f32[6, 4] {t: S(0)} = normal(0, 1)\nY = par.linear_row(X, W)\noutput Y\n")
	res, err := Run(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}})
	require.NoError(t, err)
	split(t, p, res)
}
