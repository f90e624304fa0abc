package rt

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// The local view's algorithms (stdlib/par.mesh) against the plain global
// formulas they compute: each program holds both, the algorithm on its
// mesh and the formula placed by the compiler, and every pair of outputs
// must agree. Gradients: the same model trained with the algorithm and with
// the formula (the same parameter names, so the same initial values) ends
// with the same parameters.

func runLocal(t *testing.T, src string) *Result {
	t.Helper()
	g, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	res, err := Run(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}})
	require.NoError(t, err)
	return res
}

func requireSame(t *testing.T, res *Result, got, want string) {
	t.Helper()
	g, w := res.Output(got), res.Output(want)
	require.NotNil(t, g, got)
	require.NotNil(t, w, want)
	require.Equal(t, w.Shape, g.Shape, "%s vs %s", got, want)
	d := CompareWithin(g, w, DefaultTolerance(ir.F32, 8))
	require.True(t, d.OK, "%s vs %s: max abs err %g, rel %g", got, want, d.MaxAbs, d.MaxRel)
}

func TestLocalGEMMs(t *testing.T) {
	cases := []struct{ name, mesh, decls, call string }{
		{"1d column", "[t=3]", "input X : f32[5, 4] = normal(0, 1)\ninput W : f32[4, 9] {t: S(1)} = normal(0, 1)", "par.linear_col(X, W)"},
		{"1d row", "[t=2]", "input X : f32[5, 6] {t: S(1)} = normal(0, 1)\ninput W : f32[6, 3] {t: S(0)} = normal(0, 1)", "par.linear_row(X, W)"},
		{"2d q=2", "[r=2, c=2]", "input X : f32[8, 6] {r: S(0), c: S(1)} = normal(0, 1)\ninput W : f32[6, 4] {r: S(0), c: S(1)} = normal(0, 1)", "par.summa(X, W)"},
		{"2d q=3 non-square", "[r=3, c=3]", "input X : f32[9, 6] = normal(0, 1)\ninput W : f32[6, 12] = normal(0, 1)", "par.summa(X, W)"},
		{"2d on other axes", "[dp=2, tp=2]", "input X : f32[4, 10] = normal(0, 1)\ninput W : f32[10, 2] = normal(0, 1)", "par.summa(X, W, r=tp, c=dp)"},
		{"2.5d d=1", "[d=1, r=2, c=2]", "input X : f32[4, 6] = normal(0, 1)\ninput W : f32[6, 8] = normal(0, 1)", "par.tesseract(X, W)"},
		{"2.5d d=2", "[d=2, r=2, c=2]", "input X : f32[8, 6] = normal(0, 1)\ninput W : f32[6, 4] = normal(0, 1)", "par.tesseract(X, W)"},
		{"2.5d d=2 q=3", "[d=2, r=3, c=3]", "input X : f32[6, 9] = normal(0, 1)\ninput W : f32[9, 3] = normal(0, 1)", "par.tesseract(X, W)"},
		{"2d uneven", "[r=2, c=2]", "input X : f32[7, 5] = normal(0, 1)\ninput W : f32[5, 3] = normal(0, 1)", "par.summa(X, W)"},
		{"2d q=3 uneven", "[r=3, c=3]", "input X : f32[10, 7] = normal(0, 1)\ninput W : f32[7, 5] = normal(0, 1)", "par.summa(X, W)"},
		{"1d row uneven", "[t=3]", "input X : f32[5, 7] = normal(0, 1)\ninput W : f32[7, 2] = normal(0, 1)", "par.linear_row(X, W)"},
		{"2.5d uneven", "[d=2, r=2, c=2]", "input X : f32[9, 5] = normal(0, 1)\ninput W : f32[5, 3] = normal(0, 1)", "par.tesseract(X, W)"},
		{"3d uneven", "[i=2, j=2, l=2]", "input X : f32[7, 8] = normal(0, 1)\ninput W : f32[5, 8] = normal(0, 1)", "par.linear_3d(X, transpose(W), a=i, b=j, w=l)"},
		{"3d q=2", "[i=2, j=2, l=2]", "input X : f32[8, 8] = normal(0, 1)\ninput W : f32[12, 8] = normal(0, 1)", "par.linear_3d(X, transpose(W), a=i, b=j, w=l)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// the formula: the second argument as written (transpose(W) for 3d)
			args := strings.TrimSuffix(c.call[strings.Index(c.call, "(")+1:], ")")
			parts := strings.SplitN(args, ", ", 3)
			src := fmt.Sprintf("mesh M = %s\nuse par\n%s\nY = %s\nZ = %s @ %s\noutput Y\noutput Z\n", c.mesh, c.decls, c.call, parts[0], parts[1])
			res := runLocal(t, src)
			requireSame(t, res, "Y", "Z")
		})
	}
}

func TestLocalAttention(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("ring zigzag s=%d", n), func(t *testing.T) {
			src := fmt.Sprintf(`mesh M = [s=%d]
use par
input Q : f32[3, %d, 4] = normal(0, 1)
input K : f32[3, %d, 4] = normal(0, 1)
input V : f32[3, %d, 4] = normal(0, 1)
input mask : f32[%d, %d] = causal
O = par.unzigzag(par.ring_attention_zigzag(par.zigzag(Q, %d), par.zigzag(K, %d), par.zigzag(V, %d), 0.5), %d)
R = softmax((Q @ transpose(K)) * 0.5 + mask, axis=-1) @ V
output O
output R
`, n, 4*n, 4*n, 4*n, 4*n, 4*n, n, n, n, n)
			requireSame(t, runLocal(t, src), "O", "R")
		})
	}
	for _, c := range []struct{ mesh string }{{"[s=2]"}, {"[s=4]"}} {
		for _, causal := range []int{0, 1} {
			t.Run(fmt.Sprintf("ring %s causal=%d", c.mesh, causal), func(t *testing.T) {
				src := fmt.Sprintf(`mesh M = %s
use par
input Q : f32[3, 8, 4] = normal(0, 1)
input K : f32[3, 8, 4] = normal(0, 1)
input V : f32[3, 8, 4] = normal(0, 1)
input mask : f32[8, 8] = causal
O = par.ring_attention(Q, K, V, 0.5, %d)
R = softmax((Q @ transpose(K)) * 0.5 + mask * %d, axis=-1) @ V
output O
output R
`, c.mesh, causal, causal)
				requireSame(t, runLocal(t, src), "O", "R")
			})
			t.Run(fmt.Sprintf("ulysses %s causal=%d", c.mesh, causal), func(t *testing.T) {
				src := fmt.Sprintf(`mesh M = %s
use par
input Q : f32[3, 4, 8, 2] = normal(0, 1)
input K : f32[3, 4, 8, 2] = normal(0, 1)
input V : f32[3, 4, 8, 2] = normal(0, 1)
input mask : f32[8, 8] = causal
m = mask * %d
O = par.ulysses_attention(Q, K, V, m, 0.5)
R = softmax((Q @ transpose(K)) * 0.5 + m, axis=-1) @ V
output O
output R
`, c.mesh, causal)
				requireSame(t, runLocal(t, src), "O", "R")
			})
		}
	}
}

// trainBoth trains a model written with an algorithm and with the plain
// formula and compares the final parameters (and the losses).
func trainBoth(t *testing.T, mesh, decls, withAlgo, withFormula string) {
	t.Helper()
	train := func(body string) *TrainResult {
		src := fmt.Sprintf("mesh M = %s\nuse par\n%s\ntrain {\n%s\n    optimizer = sgd(lr=0.2)\n    steps = 3\n}\n", mesh, decls, body)
		g, err := lang.CheckSource("t.mesh", []byte(src), lang.CheckOptions{})
		require.NoError(t, err)
		p, err := lower.Lower(g, lower.Options{Verify: true})
		require.NoError(t, err)
		r, err := Train(t.Context(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}}, TrainConfig{})
		require.NoError(t, err)
		return r
	}
	a, b := train(withAlgo), train(withFormula)
	require.InDeltaSlice(t, b.Losses, a.Losses, 1e-5)
	require.Greater(t, a.Losses[0]-a.Losses[len(a.Losses)-1], 1e-4, "the model learns")
	for i, p := range b.Params {
		got := a.Param(p.Name)
		require.NotNil(t, got, p.Name)
		d := CompareWithin(got, b.Final[i], DefaultTolerance(ir.F32, 8))
		require.True(t, d.OK, "%s: max abs err %g, rel %g", p.Name, d.MaxAbs, d.MaxRel)
	}
}

func TestLocalGradients(t *testing.T) {
	t.Run("summa q=2", func(t *testing.T) {
		trainBoth(t, "[r=2, c=2]", "input X : f32[8, 6] = normal(0, 1)\ninput T : f32[8, 4] = normal(0, 1)\nparam W : f32[6, 4] {r: S(0), c: S(1)} = normal(0, 0.3)",
			"    loss = mse(tanh(par.summa(X, W)), T)", "    loss = mse(tanh(X @ W), T)")
	})
	t.Run("summa q=3 non-square, both operands trained", func(t *testing.T) {
		trainBoth(t, "[r=3, c=3]", "param X : f32[9, 6] = normal(0, 1)\ninput T : f32[9, 3] = normal(0, 1)\nparam W : f32[6, 3] = normal(0, 0.3)",
			"    loss = mse(par.summa(X, W), T)", "    loss = mse(X @ W, T)")
	})
	t.Run("tesseract d=2 (W's gradient summed over depth)", func(t *testing.T) {
		trainBoth(t, "[d=2, r=2, c=2]", "input X : f32[8, 6] = normal(0, 1)\ninput T : f32[8, 4] = normal(0, 1)\nparam W : f32[6, 4] = normal(0, 0.3)",
			"    loss = mse(tanh(par.tesseract(X, W)), T)", "    loss = mse(tanh(X @ W), T)")
	})
	t.Run("tesseract d=1 q=3 uneven", func(t *testing.T) {
		trainBoth(t, "[d=1, r=3, c=3]", "param X : f32[7, 5] = normal(0, 1)\ninput T : f32[7, 4] = normal(0, 1)\nparam W : f32[5, 4] = normal(0, 0.3)",
			"    loss = mse(tanh(par.tesseract(X, W)), T)", "    loss = mse(tanh(X @ W), T)")
	})
	t.Run("tesseract d=2 q=3", func(t *testing.T) {
		trainBoth(t, "[d=2, r=3, c=3]", "input X : f32[12, 6] = normal(0, 1)\ninput T : f32[12, 3] = normal(0, 1)\nparam W : f32[6, 3] = normal(0, 0.3)",
			"    loss = mse(tanh(par.tesseract(X, W)), T)", "    loss = mse(tanh(X @ W), T)")
	})
	t.Run("3d q=3", func(t *testing.T) {
		trainBoth(t, "[i=3, j=3, l=3]", "param X : f32[9, 18] = normal(0, 1)\ninput T : f32[9, 6] = normal(0, 1)\nparam W : f32[18, 6] = normal(0, 0.3)",
			"    loss = mse(par.linear_3d(X, W, a=i, b=j, w=l), T)", "    loss = mse(X @ W, T)")
	})
	t.Run("3d two layers, roles swapped", func(t *testing.T) {
		trainBoth(t, "[i=2, j=2, l=2]", "input X : f32[8, 12] = normal(0, 1)\ninput T : f32[8, 4] = normal(0, 1)\nparam W1 : f32[12, 8] = normal(0, 0.3)\nparam W2 : f32[8, 4] = normal(0, 0.3)",
			"    h = tanh(par.linear_3d(X, W1, a=i, b=j, w=l))\n    loss = mse(par.linear_3d(h, W2, a=j, b=i, w=l), T)",
			"    loss = mse(tanh(X @ W1) @ W2, T)")
	})
	t.Run("summa uneven", func(t *testing.T) {
		trainBoth(t, "[r=2, c=2]", "param X : f32[7, 5] = normal(0, 1)\ninput T : f32[7, 3] = normal(0, 1)\nparam W : f32[5, 3] = normal(0, 0.3)",
			"    loss = mse(par.summa(X, W), T)", "    loss = mse(X @ W, T)")
	})
	t.Run("3d uneven", func(t *testing.T) {
		trainBoth(t, "[i=2, j=2, l=2]", "input X : f32[7, 8] = normal(0, 1)\ninput T : f32[7, 3] = normal(0, 1)\nparam W1 : f32[8, 8] = normal(0, 0.3)\nparam W2 : f32[8, 3] = normal(0, 0.3)",
			"    h = tanh(par.linear_3d(X, W1, a=i, b=j, w=l))\n    loss = mse(par.linear_3d(h, W2, a=j, b=i, w=l), T)",
			"    loss = mse(tanh(X @ W1) @ W2, T)")
	})
	t.Run("megatron mlp", func(t *testing.T) {
		trainBoth(t, "[t=2]", "param X : f32[4, 6] = normal(0, 1)\ninput T : f32[4, 6] = normal(0, 1)\nparam W1 : f32[6, 8] = normal(0, 0.3)\nparam W2 : f32[8, 6] = normal(0, 0.3)",
			"    loss = mse(par.mlp_1d(X, W1, W2), T)", "    loss = mse(gelu(X @ W1) @ W2, T)")
	})
	t.Run("ring attention causal", func(t *testing.T) {
		trainBoth(t, "[s=2]", "param Q : f32[3, 4, 2] = normal(0, 1)\nparam K : f32[3, 4, 2] = normal(0, 1)\nparam V : f32[3, 4, 2] = normal(0, 1)\ninput T : f32[3, 4, 2] = normal(0, 1)\ninput mask : f32[4, 4] = causal",
			"    loss = mse(par.ring_attention(Q, K, V, 0.7, 1), T)", "    loss = mse(softmax((Q @ transpose(K)) * 0.7 + mask, axis=-1) @ V, T)")
	})
	t.Run("ring attention zigzag", func(t *testing.T) {
		trainBoth(t, "[s=2]", "param Q : f32[3, 8, 2] = normal(0, 1)\nparam K : f32[3, 8, 2] = normal(0, 1)\nparam V : f32[3, 8, 2] = normal(0, 1)\ninput T : f32[3, 8, 2] = normal(0, 1)\ninput mask : f32[8, 8] = causal",
			"    loss = mse(par.unzigzag(par.ring_attention_zigzag(par.zigzag(Q, 2), par.zigzag(K, 2), par.zigzag(V, 2), 0.7), 2), T)",
			"    loss = mse(softmax((Q @ transpose(K)) * 0.7 + mask, axis=-1) @ V, T)")
	})
	t.Run("ring attention on a pipeline stage (1F1B)", func(t *testing.T) {
		// the shifts' axes are the mesh's without the pipeline axis, which
		// comes first here: lowering must put it back into their peers
		decls := "input X : f32[2, 4, 2] {s: S(1)} = normal(0, 1)\nparam Wq : f32[2, 2] = normal(0, 0.5)\nparam Wk : f32[2, 2] = normal(0, 0.5)\nparam W : f32[2, 2] = normal(0, 0.5)\ninput T : f32[2, 4, 2] = normal(0, 1)\ninput mask : f32[4, 4] = causal"
		pipe := "\n    pipeline = 1f1b\n    microbatches = 2"
		trainBoth(t, "[pipeline pp=2, s=2]", decls,
			"    a = par.ring_attention(X @ Wq, X @ Wk, X, 0.7, 1)\n    stage = 1\n    loss = mse(tanh(a @ W), T)"+pipe,
			"    a = softmax(((X @ Wq) @ transpose(X @ Wk)) * 0.7 + mask, axis=-1) @ X\n    stage = 1\n    loss = mse(tanh(a @ W), T)"+pipe)
	})
	t.Run("ulysses", func(t *testing.T) {
		trainBoth(t, "[s=2]", "param Q : f32[3, 2, 4, 2] = normal(0, 1)\nparam K : f32[3, 2, 4, 2] = normal(0, 1)\nparam V : f32[3, 2, 4, 2] = normal(0, 1)\ninput T : f32[3, 2, 4, 2] = normal(0, 1)\ninput mask : f32[4, 4] = causal",
			"    loss = mse(par.ulysses_attention(Q, K, V, mask, 0.7), T)", "    loss = mse(softmax((Q @ transpose(K)) * 0.7 + mask, axis=-1) @ V, T)")
	})
}

// Groups over several axes, multi-axis shifts and coordinates, against
// what they must give.
func TestLocalMultiAxisGroups(t *testing.T) {
	src := `mesh M = [a=2, b=3]
input x : f32[12, 2] = normal(0, 1)
local def gather2(v {a: S(0), b: S(0)}) {
    return all_gather(v, a, b, dim=0)
}
local def scatter2(v) -> {a: S(0), b: S(0)} {
    return reduce_scatter(v, a, b, dim=0)
}
local def reduce2(v {a: P, b: P}) {
    return all_reduce(v, a, b)
}
local def around(v {a: S(0), b: S(0)}) -> {a: S(0), b: S(0)} {
    w = shift(v, a=1, b=2)
    return shift(w, a=-1, b=-2) * 1 + shift(shift(w, b=1), a=1) * 0
}
local def coords(v {a: S(0), b: S(0)}) -> {a: S(0), b: S(0)} {
    return v * 0 + axis_index(a) * 3 + axis_index(b)
}
g = gather2(x)
s = scatter2(x)
x6 = x * 6
r = reduce2(x)
o = around(x)
c = coords(x)
output g
output x
output s
output x6
output r
output o
output c
`
	res := runLocal(t, src)
	requireSame(t, res, "g", "x")
	requireSame(t, res, "s", "x6")
	requireSame(t, res, "r", "x")
	requireSame(t, res, "o", "x")
	want := []float64{}
	for d := range 6 {
		want = append(want, float64(d), float64(d), float64(d), float64(d))
	}
	require.Equal(t, want, res.Output("c").Float64s())
}
