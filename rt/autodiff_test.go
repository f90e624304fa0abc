package rt

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// gradCase: inputs (name → shape, and whether values must be positive or
// are indices below a bound) and an expression y of them.
type gradInput struct {
	name  string
	dtype string
	shape []int
	pos   bool // positive values (log, sqrt, div)
	bound int  // integer inputs: values in [0, bound)
}

type gradCase struct {
	name   string
	inputs []gradInput
	expr   string
}

func in(name string, shape ...int) gradInput {
	return gradInput{name: name, dtype: "f64", shape: shape}
}
func posIn(name string, shape ...int) gradInput {
	return gradInput{name: name, dtype: "f64", shape: shape, pos: true}
}
func idxIn(name string, bound int, shape ...int) gradInput {
	return gradInput{name: name, dtype: "i64", shape: shape, bound: bound}
}

var gradCases = []gradCase{
	{"matmul", []gradInput{in("a", 3, 4), in("b", 4, 2)}, "a @ b"},
	{"matmul_batched_shared", []gradInput{in("a", 2, 3, 4), in("b", 4, 2)}, "a @ b"},
	{"matmul_batched", []gradInput{in("a", 2, 3, 4), in("b", 2, 4, 2)}, "a @ b"},
	{"matmul_2d_batched", []gradInput{in("a", 3, 4), in("b", 2, 4, 2)}, "a @ b"},
	{"add_broadcast", []gradInput{in("a", 3, 4), in("b", 4)}, "a + b"},
	{"sub_broadcast", []gradInput{in("a", 3, 1), in("b", 2, 3, 4)}, "a - b"},
	{"mul", []gradInput{in("a", 3, 4), in("b", 3, 4)}, "a * b * 1.5"},
	{"div", []gradInput{in("a", 3, 4), posIn("b", 3, 1)}, "a / b"},
	{"neg_exp", []gradInput{in("a", 3, 4)}, "exp(-a)"},
	{"log_sqrt", []gradInput{posIn("a", 3, 4)}, "log(a) + sqrt(a)"},
	{"tanh_sigmoid", []gradInput{in("a", 3, 4)}, "tanh(a) + sigmoid(a)"},
	{"relu_gelu", []gradInput{in("a", 3, 4)}, "relu(a) + gelu(a)"},
	{"softmax", []gradInput{in("a", 3, 4)}, "softmax(a, axis=1)"},
	{"softmax_0", []gradInput{in("a", 3, 4)}, "softmax(a, axis=0)"},
	{"log_softmax", []gradInput{in("a", 2, 3, 4)}, "log_softmax(a, axis=1)"},
	{"layernorm", []gradInput{in("a", 2, 3, 5), in("g", 5), in("b", 5)}, "layernorm(a, g, b)"},
	{"sum_mean", []gradInput{in("a", 3, 4)}, "sum(a, axis=0) + mean(a, axis=0) * 2"},
	{"mean_all", []gradInput{in("a", 3, 4)}, "mean(a) + sum(a)"},
	{"max", []gradInput{in("a", 3, 4)}, "max(a, axis=1)"},
	{"max_all", []gradInput{in("a", 3, 4)}, "max(a)"},
	{"transpose_permute", []gradInput{in("a", 2, 3, 4)}, "permute(a, 2, 0, 1) * 2 + transpose(permute(a, 2, 1, 0), 1, 2)"},
	{"reshape", []gradInput{in("a", 4, 6)}, "reshape(a, 2, 3, 4)"},
	{"concat_slice", []gradInput{in("a", 3, 4), in("b", 2, 4)}, "slice(concat(a, b, axis=0), 0, 1, 4)"},
	{"embedding", []gradInput{in("W", 5, 3), idxIn("i", 5, 2, 4)}, "embedding(W, i)"},
	{"cross_entropy", []gradInput{in("x", 6, 4), idxIn("t", 4, 6)}, "cross_entropy(x, t)"},
	{"mse", []gradInput{in("a", 3, 4), in("b", 3, 4)}, "mse(a, b)"},
	{"to", []gradInput{in("a", 4, 4)}, "to(a, {a: B}) * 3"},
	{"minimum_maximum", []gradInput{in("a", 3, 4), in("b", 4)}, "minimum(a, b) + maximum(a, b * 2)"},
	{"where", []gradInput{in("c", 3, 1), in("a", 3, 4), in("b", 4)}, "where(relu(c), a, b * 3) + nonfinite(a)"},
	{"mlp", []gradInput{in("x", 4, 3), in("w1", 3, 5), in("b1", 5), in("w2", 5, 2)}, "gelu(x @ w1 + b1) @ w2"},
}

func writeNpy(t *testing.T, path string, shape []int, data any) {
	t.Helper()
	require.NoError(t, npy.WriteFile(path, shape, data))
}

// gradProgram builds: y = expr; L = sum(y * w) for fixed random w;
// output L and ∂L/∂x for every float input.
func gradProgram(c gradCase, yShape []int, meshDecl string, placements map[string]string) string {
	var b strings.Builder
	b.WriteString(meshDecl + "\n")
	for _, x := range c.inputs {
		fmt.Fprintf(&b, "input %s : %s%s %s = load(%q)\n", x.name, x.dtype, ir.ShapeString(x.shape), placements[x.name], x.name+".npy")
	}
	fmt.Fprintf(&b, "y = %s\n", c.expr)
	if yShape != nil {
		fmt.Fprintf(&b, "input w_ : f64%s = load(\"w_.npy\")\n", ir.ShapeString(yShape))
		b.WriteString("L = sum(y * w_)\noutput L\n")
		for _, x := range c.inputs {
			if x.dtype == "f64" {
				fmt.Fprintf(&b, "d_%s = grad(L, %s)\noutput d_%s\n", x.name, x.name, x.name)
			}
		}
	}
	return b.String()
}

func runProgram(t *testing.T, dir, src string, m *ir.Graph, opts lower.Options) *Result {
	t.Helper()
	g := m
	if g == nil {
		var err error
		g, err = lang.CheckSource(filepath.Join(dir, "p.mesh"), []byte(src), lang.CheckOptions{Dir: dir})
		require.NoError(t, err, "%s\n%s", src, lang.Render(err, map[string][]byte{filepath.Join(dir, "p.mesh"): []byte(src)}))
	}
	opts.Verify = true
	p, err := lower.Lower(g, opts)
	require.NoError(t, err, src)
	res, err := Run(context.Background(), p, Options{Backend: &CPU{BLAS: GonumBLAS{}}})
	require.NoError(t, err, src)
	return res
}

// TestGradientsMatchFiniteDifferences checks every op's gradient (f64)
// against central differences, and the same gradients computed on a 2×2
// mesh with split inputs against the single-device ones.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for _, c := range gradCases {
		dir := t.TempDir()
		data := map[string][]float64{}
		for _, x := range c.inputs {
			n := 1
			for _, d := range x.shape {
				n *= d
			}
			if x.dtype == "i64" {
				ix := make([]int64, n)
				for i := range ix {
					ix[i] = int64(r.Intn(x.bound))
				}
				writeNpy(t, filepath.Join(dir, x.name+".npy"), x.shape, ix)
				continue
			}
			v := make([]float64, n)
			for i := range v {
				v[i] = r.NormFloat64()
				if x.pos {
					v[i] = 0.5 + r.Float64()
				}
			}
			data[x.name] = v
			writeNpy(t, filepath.Join(dir, x.name+".npy"), x.shape, v)
		}
		// the shape of y, then the weights of the scalar loss
		g0, err := lang.CheckSource("p.mesh", []byte(gradProgram(c, nil, "mesh M = [a=1]", nil)+"output y\n"), lang.CheckOptions{Dir: dir})
		require.NoError(t, err, c.name)
		yShape := g0.Outputs[0].Value.Type.Shape
		w := make([]float64, max(1, numel(yShape)))
		for i := range w {
			w[i] = r.NormFloat64()
		}
		writeNpy(t, filepath.Join(dir, "w_.npy"), yShape, w)
		src := gradProgram(c, yShape, "mesh M = [a=1]", nil)
		base := runProgram(t, dir, src, nil, lower.Options{})

		const h = 1e-6
		for _, x := range c.inputs {
			if x.dtype != "f64" {
				continue
			}
			ad := base.Output("d_" + x.name).Float64s()
			orig := data[x.name]
			for i := range orig {
				loss := func(delta float64) float64 {
					v := append([]float64{}, orig...)
					v[i] += delta
					writeNpy(t, filepath.Join(dir, x.name+".npy"), x.shape, v)
					return runProgram(t, dir, src, nil, lower.Options{}).Output("L").Float64s()[0]
				}
				fd := (loss(h) - loss(-h)) / (2 * h)
				require.InDelta(t, fd, ad[i], 1e-6*(1+math.Abs(fd)), "%s: d/d%s[%d]", c.name, x.name, i)
			}
			writeNpy(t, filepath.Join(dir, x.name+".npy"), x.shape, orig)
		}

		// sharded: the same gradients on a 2×2 mesh with inputs split
		pl := map[string]string{}
		for _, x := range c.inputs {
			switch len(x.shape) {
			case 0:
			case 1:
				pl[x.name] = "{S(0), B}"
			default:
				pl[x.name] = "{S(0), S(1)}"
			}
		}
		sharded := runProgram(t, dir, gradProgram(c, yShape, "mesh M = [a=2, b=2]", pl), nil, lower.Options{})
		for _, name := range base.Names {
			d := CompareTensors(sharded.Output(name), base.Output(name), 1e-9, 1e-12)
			require.True(t, d.OK, "%s: sharded %s differs from one device by %g", c.name, name, d.MaxAbs)
		}
	}
}

func TestGradientPlacementsAreDual(t *testing.T) {
	// data parallel: W is replicated, x split by rows; dW comes out partial
	// and the output's {B} needs one all-reduce — the gradient of B is P.
	src := `mesh M = [dp=4]
input x : f32[8, 3] {S(0)} = normal(0, 1)
param W : f32[3, 2] {B} = normal(0, 1)
loss = mean(x @ W)
dW = grad(loss, W)
output dW {B}
`
	g, err := lang.CheckSource("dp.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{Verify: true})
	require.NoError(t, err)
	require.Equal(t, "{P}", p.Placement[g.Outputs[0].Value].String())
	var kinds []sbp.Collective
	for _, c := range p.Convs {
		for _, s := range c.Path.Steps {
			kinds = append(kinds, s.Kind)
		}
	}
	require.Equal(t, []sbp.Collective{sbp.AllReduce}, kinds)
}
