package rt

import (
	"fmt"
	"testing"

	"github.com/meshrun/meshrun/algo"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// The memory of the local view's algorithms: each operand's block on each
// device, by the runtime's accounting, against the fraction of the whole
// the layout gives it, against algo, and the blocks' places against the
// rectangles algo draws.

// heldBlocks runs the program once per operand, with that operand as the
// only output, and returns the bytes each device holds at the end: the
// operand's block, by the runtime's memory accounting.
func heldBlocks(t *testing.T, head, call string, operands ...string) map[string][]int64 {
	t.Helper()
	out := map[string][]int64{}
	for _, o := range operands {
		p := compileLocal(t, fmt.Sprintf("%s\nY = %s\noutput %s\n", head, call, o))
		res, err := Run(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}})
		require.NoError(t, err)
		for _, d := range res.Devices {
			out[o] = append(out[o], d.Final)
		}
	}
	return out
}

// Per-device memory of each operand: the fraction of the whole tensor
// the layout gives a device (the notes: SUMMA 1/q² each; 2.5D X and Y
// 1/(dq²), W 1/q²; 3D X [m/q², k/q], W [k/q², n/q], Y [m/q², n/q]: 1/q³
// each — par.linear_3d's comment says 1/q² of X and Y, which is what the
// gathered X̂ and the product hold, not the operands), and algo's figures.
func TestLocalMemoryGEMMs(t *testing.T) {
	type frac struct{ x, w, y int } // each operand's denominator
	cases := []struct {
		name, mesh, xpl, wpl, call string
		m, k, n                    int
		frac                       frac
		layout                     algo.Layout
	}{
		{"1d column p=3", "[t=3]", "", "{t: S(1)}", "par.linear_col(X, W)", 4, 6, 9, frac{1, 3, 3}, algo.Layout{Kind: algo.OneDColumn, Q: 3}},
		{"1d row p=2", "[t=2]", "{t: S(1)}", "{t: S(0)}", "par.linear_row(X, W)", 4, 6, 3, frac{2, 2, 1}, algo.Layout{Kind: algo.OneDRow, Q: 2}},
		{"2d q=3", "[r=3, c=3]", "{r: S(0), c: S(1)}", "{r: S(0), c: S(1)}", "par.summa(X, W)", 9, 6, 12, frac{9, 9, 9}, algo.Layout{Kind: algo.TwoD, Q: 3}},
		{"2.5d d=2 q=2", "[d=2, r=2, c=2]", "{d: S(0), r: S(0), c: S(1)}", "{r: S(0), c: S(1)}", "par.tesseract(X, W)", 8, 6, 4, frac{8, 4, 8}, algo.Layout{Kind: algo.TwoHalfD, Q: 2, D: 2}},
		{"3d q=2", "[i=2, j=2, l=2]", "{i: S(0), l: S(0), j: S(1)}", "{j: S(0), l: S(0), i: S(1)}", "par.linear_3d(X, W, a=i, b=j, w=l)", 8, 8, 4, frac{8, 8, 8}, algo.Layout{Kind: algo.ThreeD, Q: 2}},
		{"3d q=3", "[i=3, j=3, l=3]", "{i: S(0), l: S(0), j: S(1)}", "{j: S(0), l: S(0), i: S(1)}", "par.linear_3d(X, W, a=i, b=j, w=l)", 9, 18, 6, frac{27, 27, 27}, algo.Layout{Kind: algo.ThreeD, Q: 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			head := fmt.Sprintf("mesh M = %s\nuse par\ninput X : f32[%d, %d] %s = normal(0, 1)\ninput W : f32[%d, %d] %s = normal(0, 1)",
				c.mesh, c.m, c.k, c.xpl, c.k, c.n, c.wpl)
			held := heldBlocks(t, head, c.call, "X", "W", "Y")
			g := algo.GEMM{M: c.m, K: c.k, N: c.n, Elem: f32}
			costs := g.Costs(c.layout, nil)
			requirePerRank(t, "X's block", held["X"], func(int) int64 { return int64(c.m * c.k / c.frac.x * f32) })
			requirePerRank(t, "W's block", held["W"], func(int) int64 { return int64(c.k * c.n / c.frac.w * f32) })
			requirePerRank(t, "Y's block", held["Y"], func(int) int64 { return int64(c.m * c.n / c.frac.y * f32) })
			requireHeldAsAlgo(t, head, c.call, g, c.layout)
			requirePerRank(t, "X's block vs algo", held["X"], func(r int) int64 { return costs[r].Inputs })
			requirePerRank(t, "W's block vs algo", held["W"], func(r int) int64 { return costs[r].Weights })
			requirePerRank(t, "Y's block vs algo", held["Y"], func(r int) int64 { return costs[r].Outputs })
		})
	}
}

// requireHeldAsAlgo checks that every device's blocks of X, W and Y — the
// rectangles the runtime materialises the sources in and assembles the
// output from — are the ones algo.Held draws (meshrun gemm --svg): the
// same mesh, rank for rank.
func requireHeldAsAlgo(t *testing.T, head, call string, g algo.GEMM, l algo.Layout) {
	t.Helper()
	p := compileLocal(t, fmt.Sprintf("%s\nY = %s\noutput X\noutput W\noutput Y\n", head, call))
	ex := p.Exec
	require.Equal(t, l.Mesh().Size(), ex.Mesh.Size())
	for i, o := range []algo.Operand{algo.X, algo.W, algo.Y} {
		out := ex.Outputs[i]
		for r := range ex.Mesh.Size() {
			b := sbp.Layout(ex.Mesh, out.Shape, out.Placement, r)
			require.Equal(t, algo.Rect{R0: b.Off[0], NR: b.Len[0], C0: b.Off[1], NC: b.Len[1]}, g.Held(l, o, r),
				"%s: %c on device %d %s", l, o, r, ex.Mesh.CoordString(r))
		}
	}
}

// Attention: Q, K, V and the output are split by sequence, 1/n each.
func TestLocalMemoryAttention(t *testing.T) {
	const b, l, h = 2, 8, 4
	for _, n := range []int{2, 4} {
		ring := heldBlocks(t, fmt.Sprintf("mesh M = [s=%d]\nuse par\ninput Q : f32[%d, %d, %d] {s: S(1)} = normal(0, 1)\ninput K : f32[%d, %d, %d] {s: S(1)} = normal(0, 1)\ninput V : f32[%d, %d, %d] {s: S(1)} = normal(0, 1)",
			n, b, l, h, b, l, h, b, l, h), "par.ring_attention(Q, K, V, 0.5, 1)", "Q", "K", "Y")
		a := algo.Attention{Batch: b, Seq: l, Heads: 1, Hidden: h, Elem: f32}
		for _, o := range []string{"Q", "K", "Y"} {
			requirePerRank(t, fmt.Sprintf("ring n=%d: %s's block", n, o), ring[o], func(int) int64 { return b * l * h / int64(n) * f32 })
		}
		requirePerRank(t, fmt.Sprintf("ring n=%d: Q, K, V vs algo", n), ring["Q"], func(r int) int64 { return a.Ring(n, nil, r).Inputs / 3 })
		requirePerRank(t, fmt.Sprintf("ring n=%d: O vs algo", n), ring["Y"], func(r int) int64 { return a.Ring(n, nil, r).Outputs })
		const heads, hd = 4, 2
		uly := heldBlocks(t, fmt.Sprintf("mesh M = [s=%d]\nuse par\ninput Q : f32[%d, %d, %d, %d] {s: S(2)} = normal(0, 1)\ninput K : f32[%d, %d, %d, %d] {s: S(2)} = normal(0, 1)\ninput V : f32[%d, %d, %d, %d] {s: S(2)} = normal(0, 1)\ninput mask : f32[%d, %d] = causal",
			n, b, heads, l, hd, b, heads, l, hd, b, heads, l, hd, l, l), "par.ulysses_attention(Q, K, V, mask, 0.5)", "Q", "Y")
		u := algo.Attention{Batch: b, Seq: l, Heads: heads, Hidden: heads * hd, Elem: f32}
		for _, o := range []string{"Q", "Y"} {
			requirePerRank(t, fmt.Sprintf("ulysses n=%d: %s's block", n, o), uly[o], func(int) int64 { return b * heads * l * hd / int64(n) * f32 })
		}
		requirePerRank(t, fmt.Sprintf("ulysses n=%d: O vs algo", n), uly["Y"], func(r int) int64 {
			c, err := u.Ulysses(n, nil, r)
			require.NoError(t, err)
			return c.Outputs
		})
	}
}
