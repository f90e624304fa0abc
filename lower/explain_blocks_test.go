package lower_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

// The blocks view against the algorithms' definitions
// (../shared/notes/algorithms.md), every expected label written here by
// hand: SUMMA — rank (i,j) holds X_ij and W_ij, at step t row i
// broadcasts X_it and column j broadcasts W_tj, C_ij += X_it·W_tj;
// Tesseract — rank (k,i,j) holds X_(k·q+i),j and W_ij, each depth layer
// runs SUMMA, dW is summed over depth; 3D — X all-gathered over the input
// axis, W over the weight axis, the product reduce-scattered over the
// output axis. The bytes each device sends are checked against the
// runtime's own count.

func blocksOf(t *testing.T, src string) *lower.BlocksReport {
	t.Helper()
	g, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	return lower.Blocks(p)
}

// words collapses runs of white space, so the goldens state the content
// and the alignment is tested once (TestBlocksGridAlignment).
func words(s string) string { return strings.Join(strings.Fields(s), " ") }

// terms is a label's terms, sorted: a sum's order is the order the
// collectives added in, which the algorithm does not fix.
func terms(label string) []string {
	parts := strings.Split(label, " + ")
	slices.Sort(parts)
	return parts
}

const summaSrc = `mesh M = [r=2, c=2]
local def summa(x {r: S(0), c: S(1)}, w {r: S(0), c: S(1)}) -> {r: S(0), c: S(1)} {
    q = axis_size(r)
    acc = 0
    for t in range(q) {
        acc = acc + broadcast(x, c, root=t) @ broadcast(w, r, root=t)
    }
    return acc
}
input X : f32[4, 4] = normal(0, 1)
input W : f32[4, 4] = normal(0, 1)
Y = summa(X, W)
output Y
`

func TestBlocksSUMMA2x2(t *testing.T) {
	// blocks are [2, 2] f32 = 16 B; a broadcast over 2 devices: the root
	// sends its block once, the other sends nothing
	const line = "acc = acc + broadcast(x, c, root=t) @ broadcast(w, r, root=t)"
	want := `blocks each device holds in local functions
  X[i,j]: block (i, j) of X as the call declares it split (':' a whole dim, {0,2} blocks 0 and 2, 0₁ piece 1 of block 0);
  · matrix product, ᵀ transpose, dX the gradient of X; bytes: what the device sends
call 1: summa at t.mesh:12:5: Y = summa(X, W)
  argument X as {r: S(0), c: S(1)}:
          c=0      c=1
    r=0   X[0,0]   X[0,1]
    r=1   X[1,0]   X[1,1]
  argument W as {r: S(0), c: S(1)}:
          c=0      c=1
    r=0   W[0,0]   W[0,1]
    r=1   W[1,0]   W[1,1]
  step 1
    broadcast over c, root c=0 (broadcast#4 at t.mesh:6:21 ← 12:5): ` + line + `
            c=0                    c=1
      r=0   X[0,0] → X[0,0] 16 B   X[0,1] → X[0,0] 0 B
      r=1   X[1,0] → X[1,0] 16 B   X[1,1] → X[1,0] 0 B
    broadcast over r, root r=0 (broadcast#5 at t.mesh:6:47 ← 12:5): ` + line + `
            c=0                    c=1
      r=0   W[0,0] → W[0,0] 16 B   W[0,1] → W[0,1] 16 B
      r=1   W[1,0] → W[0,0] 0 B    W[1,1] → W[0,1] 0 B
    acc:
            c=0             c=1
      r=0   X[0,0]·W[0,0]   X[0,0]·W[0,1]
      r=1   X[1,0]·W[0,0]   X[1,0]·W[0,1]
  step 2
    broadcast over c, root c=1 (broadcast#9 at t.mesh:6:21 ← 12:5): ` + line + `
            c=0                   c=1
      r=0   X[0,0] → X[0,1] 0 B   X[0,1] → X[0,1] 16 B
      r=1   X[1,0] → X[1,1] 0 B   X[1,1] → X[1,1] 16 B
    broadcast over r, root r=1 (broadcast#10 at t.mesh:6:47 ← 12:5): ` + line + `
            c=0                    c=1
      r=0   W[0,0] → W[1,0] 0 B    W[0,1] → W[1,1] 0 B
      r=1   W[1,0] → W[1,0] 16 B   W[1,1] → W[1,1] 16 B
    acc:
            c=0                             c=1
      r=0   X[0,0]·W[0,0] + X[0,1]·W[1,0]   X[0,0]·W[0,1] + X[0,1]·W[1,1]
      r=1   X[1,0]·W[0,0] + X[1,1]·W[1,0]   X[1,0]·W[0,1] + X[1,1]·W[1,1]
  result Y {r: S(0), c: S(1)}:
          c=0                                      c=1
    r=0   Y[0,0] = X[0,0]·W[0,0] + X[0,1]·W[1,0]   Y[0,1] = X[0,0]·W[0,1] + X[0,1]·W[1,1]
    r=1   Y[1,0] = X[1,0]·W[0,0] + X[1,1]·W[1,0]   Y[1,1] = X[1,0]·W[0,1] + X[1,1]·W[1,1]
`
	r := blocksOf(t, summaSrc)
	require.Equal(t, words(want), words(r.Text()))
}

// The library's SUMMA (stdlib par) gives the same result blocks.
func TestBlocksParSUMMA(t *testing.T) {
	r := blocksOf(t, "mesh M = [r=2, c=2]\nuse par\ninput X : f32[4, 6] = normal(0, 1)\ninput W : f32[6, 2] = normal(0, 1)\nY = par.summa(X, W)\noutput Y\n")
	require.Len(t, r.Calls, 1)
	res := r.Calls[0].Results[0]
	require.Equal(t, []string{"Y[0,0]", "Y[0,1]", "Y[1,0]", "Y[1,1]"}, res.Blocks)
	require.Equal(t, []string{
		"X[0,0]·W[0,0] + X[0,1]·W[1,0]", "X[0,0]·W[0,1] + X[0,1]·W[1,1]",
		"X[1,0]·W[0,0] + X[1,1]·W[1,0]", "X[1,0]·W[0,1] + X[1,1]·W[1,1]",
	}, res.Devices)
}

// Training SUMMA: the backward reduces dX_it to column t of each row and
// dW_tj to row t of each column, so dX_ij = Σ_k dY_ik·W_jkᵀ and
// dW_ij = Σ_k X_kiᵀ·dY_kj.
func TestBlocksSUMMABackward(t *testing.T) {
	src := `mesh M = [r=2, c=2]
use par
param X : f32[4, 4] {r: S(0), c: S(1)} = normal(0, 1)
param W : f32[4, 4] {r: S(0), c: S(1)} = normal(0, 0.3)
input T : f32[4, 4] = normal(0, 1)
train {
    Y = par.summa(X, W)
    loss = mse(Y, T)
    optimizer = sgd(lr=0.1)
    steps = 1
}
`
	r := blocksOf(t, src)
	require.Len(t, r.Calls, 2)
	require.False(t, r.Calls[0].Backward)
	bw := r.Calls[1]
	require.True(t, bw.Backward)
	require.Equal(t, []string{"dY[0,0]", "dY[0,1]", "dY[1,0]", "dY[1,1]"}, bw.Inputs[0].Devices)
	want := map[string][]string{
		"dX[0,0]": {"dY[0,0]·W[0,0]ᵀ", "dY[0,1]·W[0,1]ᵀ"},
		"dX[0,1]": {"dY[0,0]·W[1,0]ᵀ", "dY[0,1]·W[1,1]ᵀ"},
		"dX[1,0]": {"dY[1,0]·W[0,0]ᵀ", "dY[1,1]·W[0,1]ᵀ"},
		"dX[1,1]": {"dY[1,0]·W[1,0]ᵀ", "dY[1,1]·W[1,1]ᵀ"},
		"dW[0,0]": {"X[0,0]ᵀ·dY[0,0]", "X[1,0]ᵀ·dY[1,0]"},
		"dW[0,1]": {"X[0,0]ᵀ·dY[0,1]", "X[1,0]ᵀ·dY[1,1]"},
		"dW[1,0]": {"X[0,1]ᵀ·dY[0,0]", "X[1,1]ᵀ·dY[1,0]"},
		"dW[1,1]": {"X[0,1]ᵀ·dY[0,1]", "X[1,1]ᵀ·dY[1,1]"},
	}
	got := 0
	for _, res := range bw.Results {
		for d, b := range res.Blocks {
			w, ok := want[b]
			require.True(t, ok, "unexpected result block %s", b)
			require.Equal(t, w, terms(res.Devices[d]), b)
			got++
		}
	}
	require.Equal(t, 8, got, "dX and dW on 4 devices each")
}

// move is a written collective's expected after-labels and bytes, per
// device in mesh order.
type move struct {
	op    string
	after []string
	bytes []int64
}

func requireMoves(t *testing.T, c lower.BlockCall, want []move) {
	t.Helper()
	var got []lower.BlockMove
	for _, st := range c.Steps {
		got = append(got, st.Moves...)
	}
	require.Len(t, got, len(want))
	for i, w := range want {
		require.Equal(t, w.op, got[i].Op, "move %d", i+1)
		for d, dv := range got[i].Devices {
			require.Equal(t, w.after[d], dv.After, "move %d (%s) device %d", i+1, w.op, d)
			require.Equal(t, w.bytes[d], dv.Bytes, "move %d (%s) device %d", i+1, w.op, d)
		}
	}
}

func TestBlocksTesseract2x2x2(t *testing.T) {
	src := `mesh M = [d=2, r=2, c=2]
use par
input X : f32[8, 4] = normal(0, 1)
input W : f32[4, 4] = normal(0, 1)
Y = par.tesseract(X, W)
output Y
`
	r := blocksOf(t, src)
	require.Len(t, r.Calls, 1)
	c := r.Calls[0]
	// devices (k, i, j) in mesh order: X_(2k+i),j and W_ij (W repeated over depth)
	require.Equal(t, []string{"X[0,0]", "X[0,1]", "X[1,0]", "X[1,1]", "X[2,0]", "X[2,1]", "X[3,0]", "X[3,1]"}, c.Inputs[0].Devices)
	require.Equal(t, []string{"W[0,0]", "W[0,1]", "W[1,0]", "W[1,1]", "W[0,0]", "W[0,1]", "W[1,0]", "W[1,1]"}, c.Inputs[1].Devices)
	root0 := []int64{16, 0, 16, 0, 16, 0, 16, 0} // X blocks [2, 2] f32; root c=0
	root1 := []int64{0, 16, 0, 16, 0, 16, 0, 16}
	rowRoot0 := []int64{16, 16, 0, 0, 16, 16, 0, 0} // root r=0
	rowRoot1 := []int64{0, 0, 16, 16, 0, 0, 16, 16}
	requireMoves(t, c, []move{
		{"broadcast", []string{"X[0,0]", "X[0,0]", "X[1,0]", "X[1,0]", "X[2,0]", "X[2,0]", "X[3,0]", "X[3,0]"}, root0},
		{"broadcast", []string{"W[0,0]", "W[0,1]", "W[0,0]", "W[0,1]", "W[0,0]", "W[0,1]", "W[0,0]", "W[0,1]"}, rowRoot0},
		{"broadcast", []string{"X[0,1]", "X[0,1]", "X[1,1]", "X[1,1]", "X[2,1]", "X[2,1]", "X[3,1]", "X[3,1]"}, root1},
		{"broadcast", []string{"W[1,0]", "W[1,1]", "W[1,0]", "W[1,1]", "W[1,0]", "W[1,1]", "W[1,0]", "W[1,1]"}, rowRoot1},
	})
	res := c.Results[0]
	require.Equal(t, []string{"Y[0,0]", "Y[0,1]", "Y[1,0]", "Y[1,1]", "Y[2,0]", "Y[2,1]", "Y[3,0]", "Y[3,1]"}, res.Blocks)
	require.Equal(t, []string{
		"X[0,0]·W[0,0] + X[0,1]·W[1,0]", "X[0,0]·W[0,1] + X[0,1]·W[1,1]",
		"X[1,0]·W[0,0] + X[1,1]·W[1,0]", "X[1,0]·W[0,1] + X[1,1]·W[1,1]",
		"X[2,0]·W[0,0] + X[2,1]·W[1,0]", "X[2,0]·W[0,1] + X[2,1]·W[1,1]",
		"X[3,0]·W[0,0] + X[3,1]·W[1,0]", "X[3,0]·W[0,1] + X[3,1]·W[1,1]",
	}, res.Devices)
}

// Tesseract's weight gradient is summed over depth: every device's dW_tj
// has the terms of all four row blocks, from both depth layers.
func TestBlocksTesseractWeightGradientOverDepth(t *testing.T) {
	src := `mesh M = [d=2, r=2, c=2]
use par
input X : f32[8, 4] = normal(0, 1)
input T : f32[8, 4] = normal(0, 1)
param W : f32[4, 4] = normal(0, 0.3)
train {
    Y = par.tesseract(X, W)
    loss = mse(Y, T)
    optimizer = sgd(lr=0.1)
    steps = 1
}
`
	r := blocksOf(t, src)
	require.Len(t, r.Calls, 2)
	res := r.Calls[1].Results[0]
	require.Equal(t, "dW", res.Name)
	want := map[string][]string{
		"dW[0,0]": {"X[0,0]ᵀ·dY[0,0]", "X[1,0]ᵀ·dY[1,0]", "X[2,0]ᵀ·dY[2,0]", "X[3,0]ᵀ·dY[3,0]"},
		"dW[0,1]": {"X[0,0]ᵀ·dY[0,1]", "X[1,0]ᵀ·dY[1,1]", "X[2,0]ᵀ·dY[2,1]", "X[3,0]ᵀ·dY[3,1]"},
		"dW[1,0]": {"X[0,1]ᵀ·dY[0,0]", "X[1,1]ᵀ·dY[1,0]", "X[2,1]ᵀ·dY[2,0]", "X[3,1]ᵀ·dY[3,0]"},
		"dW[1,1]": {"X[0,1]ᵀ·dY[0,1]", "X[1,1]ᵀ·dY[1,1]", "X[2,1]ᵀ·dY[2,1]", "X[3,1]ᵀ·dY[3,1]"},
	}
	for d, b := range res.Blocks {
		require.Equal(t, want[b], terms(res.Devices[d]), "device %d holds %s", d, b)
	}
	var ops []string
	for _, st := range r.Calls[1].Steps {
		for _, mv := range st.Moves {
			ops = append(ops, mv.Op+" "+mv.Group)
		}
	}
	require.Contains(t, ops, "all_reduce over d", "the depth reduction of dW")
}

func TestBlocks3D2x2x2(t *testing.T) {
	src := `mesh M = [i=2, j=2, l=2]
use par
input X : f32[8, 8] = normal(0, 1)
input W : f32[8, 8] = normal(0, 1)
Y = par.linear_3d(X, W, a=i, b=j, w=l)
output Y
`
	r := blocksOf(t, src)
	require.Len(t, r.Calls, 1)
	c := r.Calls[0]
	// device (i, j, l): X split rows over i then l, columns over j:
	// X_(2i+l),j [2, 4]; W rows over j then l, columns over i: W_(2j+l),i [2, 4]
	require.Equal(t, []string{"X[0,0]", "X[1,0]", "X[0,1]", "X[1,1]", "X[2,0]", "X[3,0]", "X[2,1]", "X[3,1]"}, c.Inputs[0].Devices)
	require.Equal(t, []string{"W[0,0]", "W[1,0]", "W[2,0]", "W[3,0]", "W[0,1]", "W[1,1]", "W[2,1]", "W[3,1]"}, c.Inputs[1].Devices)
	all32 := []int64{32, 32, 32, 32, 32, 32, 32, 32} // a ring of 2 sends one [2, 4] f32 block
	requireMoves(t, c, []move{
		// gathered over i: row blocks l and 2+l (the strided set Y keeps)
		{"all_gather", []string{"X[{0,2},0]", "X[{1,3},0]", "X[{0,2},1]", "X[{1,3},1]", "X[{0,2},0]", "X[{1,3},0]", "X[{0,2},1]", "X[{1,3},1]"}, all32},
		// gathered over l: row blocks 2j and 2j+1, the rows X's column block j meets
		{"all_gather", []string{"W[{0,1},0]", "W[{0,1},0]", "W[{2,3},0]", "W[{2,3},0]", "W[{0,1},1]", "W[{0,1},1]", "W[{2,3},1]", "W[{2,3},1]"}, all32},
		// [4, 4] partial products, half of it sent
		{"reduce_scatter", []string{
			"X[0,0]·W[{0,1},0] + X[0,1]·W[{2,3},0]", "X[1,0]·W[{0,1},0] + X[1,1]·W[{2,3},0]",
			"X[2,0]·W[{0,1},0] + X[2,1]·W[{2,3},0]", "X[3,0]·W[{0,1},0] + X[3,1]·W[{2,3},0]",
			"X[0,0]·W[{0,1},1] + X[0,1]·W[{2,3},1]", "X[1,0]·W[{0,1},1] + X[1,1]·W[{2,3},1]",
			"X[2,0]·W[{0,1},1] + X[2,1]·W[{2,3},1]", "X[3,0]·W[{0,1},1] + X[3,1]·W[{2,3},1]",
		}, all32},
	})
	// Y in X's layout with i and j swapped: Y_(2j+l),i
	require.Equal(t, []string{"Y[0,0]", "Y[1,0]", "Y[2,0]", "Y[3,0]", "Y[0,1]", "Y[1,1]", "Y[2,1]", "Y[3,1]"}, c.Results[0].Blocks)
	require.Len(t, c.Steps, 2, "the gathers, then the reduce-scatter")
}

// The bytes the view says each device sends add up, per device, to what
// the runtime's collectives counted: broadcasts on rings of 3 (a binomial
// tree), all-gather, reduce-scatter and all-reduce rings (uneven chunks),
// all-to-all and shifts.
func TestBlocksBytesMatchRuntime(t *testing.T) {
	cases := map[string]string{
		"summa 3x3": "mesh M = [r=3, c=3]\nuse par\ninput X : f32[9, 6] = normal(0, 1)\ninput W : f32[6, 12] = normal(0, 1)\nY = par.summa(X, W)\noutput Y\n",
		"3d":        "mesh M = [i=2, j=2, l=2]\nuse par\ninput X : f32[8, 8] = normal(0, 1)\ninput W : f32[12, 8] = normal(0, 1)\nY = par.linear_3d(X, transpose(W), a=i, b=j, w=l)\noutput Y\n",
		"mlp 1d":    "mesh M = [t=3]\nuse par\ninput X : f32[5, 7] = normal(0, 1)\ninput W1 : f32[7, 6] = normal(0, 1)\ninput W2 : f32[6, 7] = normal(0, 1)\nY = par.mlp_1d(X, W1, W2)\noutput Y\n",
		"ring":      "mesh M = [s=4]\nuse par\ninput Q : f32[3, 8, 4] = normal(0, 1)\ninput K : f32[3, 8, 4] = normal(0, 1)\ninput V : f32[3, 8, 4] = normal(0, 1)\nO = par.ring_attention(Q, K, V, 0.5, 1)\noutput O\n",
		// a reduce to a root leaves a partial sum (zeros off the root);
		// bf16 partials travel in f32
		"reduce bf16": "mesh M = [r=3, c=2]\nlocal def f(x {r: S(0)}) -> {r: P, c: P} {\n    return reduce(broadcast(x, r, root=2), r, root=1) + reduce(x, c, root=0)\n}\ninput X : bf16[6, 4] = normal(0, 1)\nY = f(X)\noutput Y\n",
		// groups over two axes run axis by axis
		"two-axis groups": "mesh M = [r=2, c=3]\nlocal def f(x {r: S(0), c: S(1)}) -> {r: S(0)} {\n    g = all_gather(x, r, c, dim=0)\n    s = reduce_scatter(g, c, r, dim=0)\n    return all_reduce(s, r, c)\n}\ninput X : f32[4, 6] = normal(0, 1)\nY = f(X)\noutput Y\n",
		"ulysses":         "mesh M = [s=2]\nuse par\ninput Q : f32[3, 4, 8, 2] = normal(0, 1)\ninput K : f32[3, 4, 8, 2] = normal(0, 1)\ninput V : f32[3, 4, 8, 2] = normal(0, 1)\ninput m : f32[8, 8] = causal\nO = par.ulysses_attention(Q, K, V, m, 0.5)\noutput O\n",
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			g, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{})
			require.NoError(t, err)
			p, err := lower.Lower(g, lower.Options{})
			require.NoError(t, err)
			res, err := rt.Run(t.Context(), p, rt.Options{Backend: &rt.CPU{BLAS: rt.GonumBLAS{}}})
			require.NoError(t, err)
			sent := make([]int64, p.Mesh.Size())
			for _, c := range lower.Blocks(p).Calls {
				for _, st := range c.Steps {
					for _, mv := range st.Moves {
						for d, dv := range mv.Devices {
							sent[d] += dv.Bytes
						}
					}
				}
			}
			for d, st := range res.Devices {
				require.Equal(t, st.BytesSent, sent[d], "device %d", d)
			}
			require.Positive(t, slices.Max(sent))
		})
	}
}

// Cells line up in columns three spaces apart, whatever their length.
func TestBlocksGridAlignment(t *testing.T) {
	r := blocksOf(t, summaSrc)
	got := r.Pages(0)[0]
	require.Contains(t, got, "\n          c=0      c=1\n    r=0   X[0,0]   X[0,1]\n    r=1   X[1,0]   X[1,1]\n")
	last := r.Pages(0)[len(r.Pages(0))-1]
	require.Contains(t, last, "    r=0   Y[0,0] = X[0,0]·W[0,0] + X[0,1]·W[1,0]   Y[0,1] =")
}

// Sequence parallelism: Ulysses' all-to-all turns a sequence block into a
// head block over the whole sequence; ring attention's shifts bring
// device i the K and V blocks of device i−h after h hops.
func TestBlocksSequenceParallel(t *testing.T) {
	u := blocksOf(t, "mesh M = [s=2]\nuse par\ninput Q : f32[3, 4, 8, 2] = normal(0, 1)\ninput K : f32[3, 4, 8, 2] = normal(0, 1)\ninput V : f32[3, 4, 8, 2] = normal(0, 1)\ninput m : f32[8, 8] = causal\nO = par.ulysses_attention(Q, K, V, m, 0.5)\noutput O\n")
	require.Equal(t, []string{"Q[:,:,0,:]", "Q[:,:,1,:]"}, u.Calls[0].Inputs[0].Devices)
	qh := u.Calls[0].Steps[0].Moves[0]
	require.Equal(t, "all_to_all", qh.Op)
	// [3, 4, 4, 2] f32 blocks, half of each sent
	require.Equal(t, []lower.BlockDevice{{Before: "Q[:,:,0,:]", After: "Q[:,0,:,:]", Bytes: 192}, {Before: "Q[:,:,1,:]", After: "Q[:,1,:,:]", Bytes: 192}}, qh.Devices)

	r := blocksOf(t, "mesh M = [s=4]\nuse par\ninput Q : f32[3, 8, 2] = normal(0, 1)\ninput K : f32[3, 8, 2] = normal(0, 1)\ninput V : f32[3, 8, 2] = normal(0, 1)\nO = par.ring_attention(Q, K, V, 0.5, 0)\noutput O\n")
	var shifts []lower.BlockMove
	for _, st := range r.Calls[0].Steps {
		shifts = append(shifts, st.Moves...)
	}
	require.Len(t, shifts, 6, "K and V, 3 hops")
	for h := 1; h <= 3; h++ {
		for d := range 4 {
			src := (d - h + 4) % 4
			for k, name := range []string{"K", "V"} {
				dv := shifts[2*(h-1)+k].Devices[d]
				require.Equal(t, fmt.Sprintf("%s[:,%d,:]", name, src), dv.After, "hop %d device %d", h, d)
				require.Equal(t, int64(3*2*2*4), dv.Bytes) // a [3, 2, 2] f32 block
			}
		}
	}
	// the output on device 1 was computed from Q's block 1 and every K and V block
	require.Equal(t, "O⟨K[:,0,:]ᵀ, K[:,1,:]ᵀ, K[:,2,:]ᵀ, K[:,3,:]ᵀ, Q[:,1,:], V[:,0,:], V[:,1,:], V[:,2,:], … 1 more⟩", r.Calls[0].Results[0].Devices[1])
}

// 3D backward: dY gathered over the output axis j, X̂ᵀ·dŶ reduce-scattered
// over the weight axis l, so device (i, j, l) holds dW_(2j+l),i = the sum
// over the gathered row sets R of X[R, piece l of column block j]ᵀ·dY[R, i].
func TestBlocks3DWeightGradient(t *testing.T) {
	src := `mesh M = [i=2, j=2, l=2]
use par
input X : f32[8, 8] = normal(0, 1)
input T : f32[8, 8] = normal(0, 1)
param W : f32[8, 8] = normal(0, 0.3)
train {
    Y = par.linear_3d(X, W, a=i, b=j, w=l)
    loss = mse(Y, T)
    optimizer = sgd(lr=0.05)
    steps = 1
}
`
	r := blocksOf(t, src)
	require.Len(t, r.Calls, 2)
	bw := r.Calls[1]
	require.Equal(t, "all_gather over j, dim 0", bw.Steps[0].Moves[0].Op+" "+bw.Steps[0].Moves[0].Group)
	res := bw.Results[0]
	require.Equal(t, []string{"dW[0,0]", "dW[1,0]", "dW[2,0]", "dW[3,0]", "dW[0,1]", "dW[1,1]", "dW[2,1]", "dW[3,1]"}, res.Blocks)
	want := [][]string{
		{"X[{0,2},0₀]ᵀ·dY[{0,2},0]", "X[{1,3},0₀]ᵀ·dY[{1,3},0]"},
		{"X[{0,2},0₁]ᵀ·dY[{0,2},0]", "X[{1,3},0₁]ᵀ·dY[{1,3},0]"},
		{"X[{0,2},1₀]ᵀ·dY[{0,2},0]", "X[{1,3},1₀]ᵀ·dY[{1,3},0]"},
		{"X[{0,2},1₁]ᵀ·dY[{0,2},0]", "X[{1,3},1₁]ᵀ·dY[{1,3},0]"},
		{"X[{0,2},0₀]ᵀ·dY[{0,2},1]", "X[{1,3},0₀]ᵀ·dY[{1,3},1]"},
		{"X[{0,2},0₁]ᵀ·dY[{0,2},1]", "X[{1,3},0₁]ᵀ·dY[{1,3},1]"},
		{"X[{0,2},1₀]ᵀ·dY[{0,2},1]", "X[{1,3},1₀]ᵀ·dY[{1,3},1]"},
		{"X[{0,2},1₁]ᵀ·dY[{0,2},1]", "X[{1,3},1₁]ᵀ·dY[{1,3},1]"},
	}
	for d := range want {
		require.Equal(t, want[d], terms(res.Devices[d]), "device %d", d)
	}
}

// Megatron's MLP trained: the backward is one call (its results' global
// accumulations in between do not cut it), the gradient entering it is
// named after the call's result, and its one collective is the all-reduce
// of the input's gradient (algorithms.md, 1D: the column-parallel layer's
// input gradient is partial).
func TestBlocksMegatronBackward(t *testing.T) {
	src := `mesh M = [t=2]
use par
param X : f32[4, 6] = normal(0, 1)
input T : f32[4, 6] = normal(0, 1)
param W1 : f32[6, 8] = normal(0, 0.3)
param W2 : f32[8, 6] = normal(0, 0.3)
train {
    Y = par.mlp_1d(X, W1, W2)
    loss = mse(Y, T)
    optimizer = sgd(lr=0.1)
    steps = 1
}
`
	r := blocksOf(t, src)
	require.Len(t, r.Calls, 2)
	require.Equal(t, []string{"gelu(X·W1[:,0])·W2[0,:] + gelu(X·W1[:,1])·W2[1,:]", "gelu(X·W1[:,0])·W2[0,:] + gelu(X·W1[:,1])·W2[1,:]"}, r.Calls[0].Results[0].Devices)
	bw := r.Calls[1]
	require.Equal(t, "dY", bw.Inputs[0].Name)
	var names []string
	for _, res := range bw.Results {
		names = append(names, res.Name)
	}
	slices.Sort(names)
	require.Equal(t, []string{"dW1", "dW2", "dX"}, names)
	require.Len(t, bw.Steps, 1)
	require.Len(t, bw.Steps[0].Moves, 1)
	require.Equal(t, "all_reduce over t", bw.Steps[0].Moves[0].Op+" "+bw.Steps[0].Moves[0].Group)
	for _, res := range bw.Results {
		if res.Name == "dW2" {
			require.Equal(t, []string{"dW2[0,:]", "dW2[1,:]"}, res.Blocks)
			require.Equal(t, []string{"(gelu(X·W1[:,0]))ᵀ·dY", "(gelu(X·W1[:,1]))ᵀ·dY"}, res.Devices)
		}
	}
}

// On 8×8 SUMMA's result is written as the sum over the running block
// index: Y_ij = Σ_t X_it·W_tj.
func TestBlocksSUMMASigma(t *testing.T) {
	r := blocksOf(t, "mesh M = [r=8, c=8]\nuse par\ninput X : f32[16, 16] = normal(0, 1)\ninput W : f32[16, 8] = normal(0, 1)\nY = par.summa(X, W)\noutput Y\n")
	res := r.Calls[0].Results[0]
	for d := range 64 {
		i, j := d/8, d%8
		require.Equal(t, fmt.Sprintf("Y[%d,%d]", i, j), res.Blocks[d])
		require.Equal(t, fmt.Sprintf("Σ_t X[%d,t]·W[t,%d]", i, j), res.Devices[d])
	}
}

// A group over two axes is ordered as the call lists them: reduce_scatter
// over (c, r) gives device (r, c) piece 2c+r of the gathered blocks (the
// runtime computes the same: its Y rows are 6·X00, 6·X02, 6·X11, 6·X01,
// 6·X10, 6·X12 for a [2, 3] X, checked by hand).
func TestBlocksTwoAxisGroups(t *testing.T) {
	src := "mesh M = [r=2, c=3]\nlocal def f(x {r: S(0), c: S(1)}) -> {r: S(0), c: S(0)} {\n    g = all_gather(x, r, c, dim=0)\n    return reduce_scatter(g, c, r, dim=0)\n}\ninput X : f32[2, 3] = normal(0, 1)\nY = f(X)\noutput Y\n"
	r := blocksOf(t, src)
	g6 := "cat(X[0,0], X[0,1], X[0,2], X[1,0], X[1,1], X[1,2]; dim 0)"
	requireMoves(t, r.Calls[0], []move{
		// the last listed axis first: over c the 1-element block goes to 2
		// peers, then over r the 3 gathered ones to 1: 5 elements
		{"all_gather", []string{g6, g6, g6, g6, g6, g6}, []int64{20, 20, 20, 20, 20, 20}},
		// over c: 6 elements → 2 (4 sent), then over r: 2 → 1 (1 sent)
		{"reduce_scatter", []string{"6·X[0,0]", "6·X[0,2]", "6·X[1,1]", "6·X[0,1]", "6·X[1,0]", "6·X[1,2]"}, []int64{20, 20, 20, 20, 20, 20}},
	})
}
