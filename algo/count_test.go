package algo_test

import (
	"math"
	"testing"

	"github.com/meshrun/meshrun/algo"
	"github.com/meshrun/meshrun/mesh"
	"github.com/stretchr/testify/require"
)

// An element-by-element count, with no runtime and no formula: every
// element a rank needs for its products and does not hold must reach it
// once, and every element of a partial sum a rank does not keep must
// leave it once. Summed over the ranks, what arrives is what is sent, so
// the totals must equal the sum of algo's per-rank bytes.

type cell struct {
	t    byte // 'X', 'W', 'Y'
	r, c int
}

// cells lists the elements of rows [r0, r0+nr) × columns [c0, c0+nc).
func cells(t byte, r0, nr, c0, nc int) []cell {
	var out []cell
	for i := r0; i < r0+nr; i++ {
		for j := c0; j < c0+nc; j++ {
			out = append(out, cell{t, i, j})
		}
	}
	return out
}

// missing counts the elements of need a rank does not hold.
func missing(need, held []cell) int {
	h := map[cell]bool{}
	for _, c := range held {
		h[c] = true
	}
	n := 0
	for _, c := range need {
		if !h[c] {
			n++
		}
	}
	return n
}

func totalSent(g algo.GEMM, l algo.Layout, p algo.Pass) int64 {
	var s int64
	for _, c := range g.Costs(l, nil) {
		s += c.Sent(p)
	}
	return s
}

// SUMMA's forward: rank (i,j) needs row block i of X and column block j
// of W, and holds one block of each.
func TestSUMMAForwardCountsEveryBlockOnce(t *testing.T) {
	for _, c := range []struct{ q, m, k, n int }{{2, 4, 4, 4}, {3, 6, 6, 6}, {3, 7, 5, 4}} {
		g := algo.GEMM{M: c.m, K: c.k, N: c.n, Elem: 1}
		got := 0
		for i := range c.q {
			for j := range c.q {
				ri, rn := mesh.Split(c.m, c.q, i)
				ki, kin := mesh.Split(c.k, c.q, i)
				kj, kjn := mesh.Split(c.k, c.q, j)
				nj, njn := mesh.Split(c.n, c.q, j)
				held := append(cells('X', ri, rn, kj, kjn), cells('W', ki, kin, nj, njn)...)
				need := append(cells('X', ri, rn, 0, c.k), cells('W', 0, c.k, nj, njn)...)
				got += missing(need, held)
			}
		}
		require.Equal(t, int64(got), totalSent(g, algo.Layout{Kind: algo.TwoD, Q: c.q}, algo.Forward), "%+v", c)
	}
}

// 3D (par.linear_3d's layout): rank (a,b,c) needs X's rows R_c (sub-block
// c of every row block) in k block b, and W's k block b in n block a; it
// holds sub-block c of X's row block a and of W's k block b. Of its
// partial Y (rows R_c, n block a) it keeps sub-block c of row block b —
// the rest leaves it.
func TestThreeDCountsEveryElementOnce(t *testing.T) {
	for _, c := range []struct{ q, m, k, n int }{{2, 4, 4, 4}, {2, 5, 7, 3}, {3, 9, 9, 9}, {3, 10, 8, 7}} {
		g := algo.GEMM{M: c.m, K: c.k, N: c.n, Elem: 1}
		in, out := 0, 0
		q := c.q
		sub := func(n, i, s int) (int, int) {
			o, l := mesh.Split(n, q, i)
			so, sl := mesh.Split(l, q, s)
			return o + so, sl
		}
		for a := range q {
			for b := range q {
				for cc := range q {
					kb0, kb := mesh.Split(c.k, q, b)
					na0, na := mesh.Split(c.n, q, a)
					var needX, partial []cell
					for i := range q {
						r0, nr := sub(c.m, i, cc)
						needX = append(needX, cells('X', r0, nr, kb0, kb)...)
						partial = append(partial, cells('Y', r0, nr, na0, na)...)
					}
					x0, xl := sub(c.m, a, cc)
					w0, wl := sub(c.k, b, cc)
					y0, yl := sub(c.m, b, cc)
					held := append(cells('X', x0, xl, kb0, kb), cells('W', w0, wl, na0, na)...)
					need := append(needX, cells('W', kb0, kb, na0, na)...)
					in += missing(need, held)
					out += missing(partial, cells('Y', y0, yl, na0, na))
				}
			}
		}
		require.Equal(t, int64(in+out), totalSent(g, algo.Layout{Kind: algo.ThreeD, Q: q}, algo.Forward), "%+v", c)
		// backward: dY gathered like X was, dX and dW partials scattered
		// like Y was — the same three volumes
		require.Equal(t, int64(in+out), totalSent(g, algo.Layout{Kind: algo.ThreeD, Q: q}, algo.Backward), "%+v", c)
	}
}

// The symbolic formulas the table prints, written here as arithmetic, hold
// for sizes every mesh divides (each rank sends the same then).
func TestFormulasHoldForEvenSizes(t *testing.T) {
	m, k, n := 36.0, 72.0, 144.0
	g := algo.GEMM{M: 36, K: 72, N: 144, Elem: 1}
	type want struct {
		mem, fwd, bwd float64
		mf, mb        int
	}
	for _, c := range []struct {
		l algo.Layout
		w want
	}{
		{algo.Layout{Kind: algo.OneDColumn, Q: 4}, want{m*k + (k*n+m*n)/4, 0, 2 * 3.0 / 4 * m * k, 0, 6}},
		{algo.Layout{Kind: algo.OneDRow, Q: 4}, want{(m*k+k*n)/4 + m*n, 2 * 3.0 / 4 * m * n, 0, 6, 0}},
		{algo.Layout{Kind: algo.TwoD, Q: 3}, want{(m*k + k*n + m*n) / 9, 2 * (m*k + k*n) / 9, 2 * (m*k + k*n) / 9, 4, 4}},
		{algo.Layout{Kind: algo.TwoHalfD, Q: 3, D: 2}, want{(m*k+m*n)/18 + k*n/9, 2 * (m*k/2 + k*n) / 9, 2*(m*k/2+k*n)/9 + k*n/9, 4, 6}},
		{algo.Layout{Kind: algo.ThreeD, Q: 3}, want{(m*k + k*n + m*n) / 27, 2.0 / 3 * (m*k + k*n + m*n) / 9, 2.0 / 3 * (m*k + k*n + m*n) / 9, 6, 6}},
	} {
		for _, r := range g.Costs(c.l, nil) {
			require.Equal(t, int64(math.Round(c.w.mem)), r.Memory(), "%s memory", c.l)
			require.Equal(t, int64(math.Round(c.w.fwd)), r.Sent(algo.Forward), "%s forward", c.l)
			require.Equal(t, int64(math.Round(c.w.bwd)), r.Sent(algo.Backward), "%s backward", c.l)
			require.Equal(t, c.w.mf, r.Msgs(algo.Forward), "%s forward messages", c.l)
			require.Equal(t, c.w.mb, r.Msgs(algo.Backward), "%s backward messages", c.l)
		}
	}
}

// Times worked by hand for m = k = n = 8, f32, α = 1 µs, 1 GB/s, γ = 0.5 ns/B.
func TestTimesByHand(t *testing.T) {
	g := algo.GEMM{M: 8, K: 8, N: 8, Elem: 4}
	links := algo.Links{"": {Alpha: 1e-6, Beta: 1e-9, Gamma: 0.5e-9}}
	cases := []struct {
		l        algo.Layout
		fwd, bwd float64
	}{
		// 2×2: blocks of 16 elements, 64 B; each of 2 steps broadcasts
		// one X and one W block in one round: 2·(2α + 128β). Backward
		// two reduces of 64 B per step: 2·(2α + 128β + 128γ).
		{algo.Layout{Kind: algo.TwoD, Q: 2}, 4e-6 + 256e-9, 4e-6 + 256e-9 + 128e-9},
		// 1D row on 4: all-reduce of 256 B: 6α, 384 B sent, 192 B reduced.
		{algo.Layout{Kind: algo.OneDRow, Q: 4}, 6e-6 + 384e-9 + 96e-9, 0},
		// 3D 2×2×2: three ring collectives of 2 ranks, each sending one
		// sub-block of 8 elements (32 B); the reduce-scatter reduces it.
		{algo.Layout{Kind: algo.ThreeD, Q: 2}, 3e-6 + 96e-9 + 16e-9, 3e-6 + 96e-9 + 32e-9},
		// 2.5D 2×2×2: each layer's SUMMA on 4×4 X blocks of 8 elements
		// (32 B) and W blocks of 64 B; backward reduces them and adds the
		// depth all-reduce of dW_ij (64 B, 2 ranks: 2α, 64 B sent, 32 B
		// reduced).
		{algo.Layout{Kind: algo.TwoHalfD, Q: 2, D: 2}, 2 * (2e-6 + 96e-9), 2*(2e-6+96e-9+96*0.5e-9) + 2e-6 + 64e-9 + 16e-9},
	}
	for _, c := range cases {
		for _, r := range g.Costs(c.l, links) {
			lf, tf := r.Time(algo.Forward)
			lb, tb := r.Time(algo.Backward)
			require.InDelta(t, c.fwd, lf+tf, 1e-15, "%s rank %d forward", c.l, r.Rank)
			require.InDelta(t, c.bwd, lb+tb, 1e-15, "%s rank %d backward", c.l, r.Rank)
		}
	}
}

func TestLayoutsFitTheDevices(t *testing.T) {
	names := func(p int) []string {
		var out []string
		for _, l := range algo.Layouts(p) {
			require.Equal(t, p, l.Devices(), l.String())
			require.Equal(t, p, l.Mesh().Size(), l.String())
			out = append(out, l.String())
		}
		return out
	}
	require.Equal(t, []string{"1D column p=4", "1D row p=4", "2D SUMMA 2×2", "2.5D Tesseract 1×1×4 (DP)"}, names(4))
	require.Equal(t, []string{"1D column p=8", "1D row p=8", "2.5D Tesseract 1×1×8 (DP)", "2.5D Tesseract 2×2×2", "3D 2×2×2"}, names(8))
	require.Equal(t, []string{"1D column p=64", "1D row p=64", "2D SUMMA 8×8", "2.5D Tesseract 1×1×64 (DP)",
		"2.5D Tesseract 2×2×16", "2.5D Tesseract 4×4×4", "3D 4×4×4"}, names(64))
	require.Equal(t, []string{"1D column p=6", "1D row p=6", "2.5D Tesseract 1×1×6 (DP)"}, names(6))
}

// Padded: every block that moves is the largest of its split, so every
// rank sends the same — (q−1)(⌈m/q⌉⌈k/q⌉ + ⌈k/q⌉⌈n/q⌉) for SUMMA each way,
// (q−1)(⌈⌈m/q⌉/q⌉⌈k/q⌉ + ⌈k/q²⌉⌈n/q⌉ + ⌈⌈m/q⌉/q⌉⌈n/q⌉) for 3D — while the
// operands are held balanced; for sizes that divide it changes nothing.
func TestPaddedBlocks(t *testing.T) {
	cdiv := func(a, b int) int64 { return int64((a + b - 1) / b) }
	for _, c := range []struct{ q, m, k, n int }{{3, 7, 5, 8}, {2, 9, 8, 5}, {3, 10, 9, 4}} {
		g := algo.GEMM{M: c.m, K: c.k, N: c.n, Elem: 1, Padded: true}
		q := int64(c.q)
		summa := (q - 1) * (cdiv(c.m, c.q)*cdiv(c.k, c.q) + cdiv(c.k, c.q)*cdiv(c.n, c.q))
		rows := cdiv(int(cdiv(c.m, c.q)), c.q)
		threeD := (q - 1) * (rows*cdiv(c.k, c.q) + cdiv(c.k, c.q*c.q)*cdiv(c.n, c.q) + rows*cdiv(c.n, c.q))
		for _, l := range []struct {
			l    algo.Layout
			want int64
		}{{algo.Layout{Kind: algo.TwoD, Q: c.q}, summa}, {algo.Layout{Kind: algo.ThreeD, Q: c.q}, threeD}} {
			balanced := algo.GEMM{M: c.m, K: c.k, N: c.n, Elem: 1}.Costs(l.l, nil)
			for r, cost := range g.Costs(l.l, nil) {
				require.Equal(t, l.want, cost.Sent(algo.Forward), "%s %+v rank %d forward", l.l, c, r)
				require.Equal(t, l.want, cost.Sent(algo.Backward), "%s %+v rank %d backward", l.l, c, r)
				require.Equal(t, balanced[r].Memory(), cost.Memory(), "%s %+v rank %d: operands held balanced", l.l, c, r)
			}
		}
	}
	even := algo.GEMM{M: 36, K: 18, N: 9, Elem: 4} // every layout of 9 devices divides them
	padded := even
	padded.Padded = true
	for _, l := range algo.Layouts(9) {
		for r := range l.Devices() {
			require.Equal(t, even.Cost(l, nil, r), padded.Cost(l, nil, r), "%s rank %d", l, r)
		}
	}
}
