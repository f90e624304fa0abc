package cli

// The local-view examples compare nothing themselves: `meshrun check`
// compares each sharded run with the same program on size-1 axes. That
// proves the sharding right, not the formula: a helper written wrongly is
// wrong on one device too. These tests pin the formulas: the helpers the
// examples write (train/transformer_2d's layernorm and attention) against
// the built-in ops, and long_attention's ring and Ulysses outputs against
// its plain formula, each on the example's own mesh.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

// runOutputs runs a program with `meshrun run --out` and reads the named
// outputs back.
func runOutputs(t *testing.T, path string, names ...string) map[string]*rt.Tensor {
	t.Helper()
	dir := t.TempDir()
	code, out, errs := meshrun(t, "", "run", path, "--out", dir)
	require.Equal(t, ExitOK, code, "%s%s", out, errs)
	got := map[string]*rt.Tensor{}
	for _, n := range names {
		h, data, err := npy.ReadFile(filepath.Join(dir, n+".npy"))
		require.NoError(t, err, n)
		got[n] = rt.FromSlice(h.Shape, data)
	}
	return got
}

func requireClose(t *testing.T, want, got *rt.Tensor, what string) {
	t.Helper()
	d := rt.CompareTensors(got, want, 1e-5, 1e-6)
	require.True(t, d.OK, "%s: max abs err %g, rel %g", what, d.MaxAbs, d.MaxRel)
}

func TestTransformer2DHelpersAreTheFormulas(t *testing.T) {
	src := readExample(t, "train/transformer_2d")
	head, rest, ok := strings.Cut(src, "# Attention on the device's block")
	require.True(t, ok, "the example's helpers moved: update this test")
	defs, _, ok := strings.Cut(rest, "train {")
	require.True(t, ok)
	// γ and β not 1 and 0, so a helper that dropped them would show
	head = strings.Replace(head, "param g1 : f32[16] {c: S(0)} = ones", "param g1 : f32[16] {c: S(0)} = normal(1, 0.5)", 1)
	head = strings.Replace(head, "param b1 : f32[16] {c: S(0)} = zeros", "param b1 : f32[16] {c: S(0)} = normal(0, 0.5)", 1)
	prog := head + "# Attention on the device's block" + defs + `
def heads(t) {
    return permute(reshape(t, 4, 6, 4, 4), 0, 2, 1, 3)
}
q = x @ Wq
k = x @ Wk
v = x @ Wv
A = attention_2d(q, k, v, mask, 6, 4)
R = reshape(permute(softmax((heads(q) @ transpose(heads(k))) * 0.5 + mask, axis=-1) @ heads(v), 0, 2, 1, 3), 24, 16)
L = layernorm_2d(x * 3 + 1, g1, b1)
LR = layernorm(x * 3 + 1, g1, b1)
output A
output R
output L
output LR
`
	path := writeFile(t, t.TempDir(), "helpers.mesh", prog)
	got := runOutputs(t, path, "A", "R", "L", "LR")
	requireClose(t, got["R"], got["A"], "attention_2d vs per-head softmax(q kᵀ/√4 + mask) v")
	requireClose(t, got["LR"], got["L"], "layernorm_2d vs layernorm")
}

func TestLongAttentionAlgorithmsAreThePlainFormula(t *testing.T) {
	path, err := filepath.Abs("../../examples/long_attention.mesh")
	require.NoError(t, err)
	_, err = os.Stat(path)
	require.NoError(t, err)
	got := runOutputs(t, path, "ring", "ulysses", "plain")
	requireClose(t, got["plain"], got["ring"], "ring attention")
	requireClose(t, got["plain"], got["ulysses"], "Ulysses")
}
