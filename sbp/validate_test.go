package sbp_test

// The brute-force validator. For every op on small shapes (uneven ones and
// shards of size zero included) it checks:
//
//  1. TestRulesAgainstReference — every signature a rule offers, on meshes
//     of 2, 3 and 4 devices and on 2×2: each device runs the kernel on its
//     blocks exactly as the signature places them, the blocks are assembled
//     under the signature's output placement, and the result must equal
//     the single-device kernel. A wrong rule fails here, naming itself.
//     Partial inputs are scattered so that a non-linear rule shows: see
//     scatterPartial.
//  2. TestEveryInputPlacement — the whole pipeline (inference, boxing,
//     runtime) for every combination of input placements (P(max) sources
//     on one-axis meshes too): the sharded run must equal the
//     single-device run. A missing rule fails here (lowering
//     errors), as does any op without a rule (TestEveryOpHasARule).

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// opCase is a small program whose last statement applies the op under test
// to the declared inputs.
type opCase struct {
	name string
	src  string
}

var opCases = []opCase{
	{"matmul", "input a : f64[5, 6] = normal(0, 1)\ninput b : f64[6, 3] = normal(0, 1)\ny = a @ b"},
	{"matmul_batched_shared", "input a : f64[2, 3, 4] = normal(0, 1)\ninput b : f64[4, 5] = normal(0, 1)\ny = a @ b"},
	{"matmul_batched", "input a : f64[3, 2, 4] = normal(0, 1)\ninput b : f64[3, 4, 3] = normal(0, 1)\ny = a @ b"},
	{"add", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[3, 5] = normal(0, 1)\ny = a + b"},
	{"add_broadcast", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[5] = normal(0, 1)\ny = a + b"},
	{"sub_broadcast_col", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[3, 1] = normal(0, 1)\ny = a - b"},
	{"mul", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[3, 5] = normal(0, 1)\ny = a * b"},
	{"mul_scalar", "input a : f64[3, 5] = normal(0, 1)\ny = a * 2.5"},
	{"div", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[3, 5] = uniform(1, 2)\ny = a / b"},
	{"div_broadcast", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[5] = uniform(1, 2)\ny = a / b"},
	{"minimum", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[5] = normal(0, 1)\ny = minimum(a, b)"},
	{"maximum", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[3, 5] = normal(0, 1)\ny = maximum(a, b)"},
	{"cast", "input a : f64[3, 5] = normal(0, 1)\ny = cast(a, \"f32\")"},
	{"cast_widen", "input a : f64[3, 5] = normal(0, 1)\ny = cast(cast(a, \"f32\"), \"f64\")"},
	{"cast_bf16", "input a : f64[3, 5] = normal(0, 1)\ny = cast(cast(a, \"f32\"), \"bf16\")"},
	{"where", "input c : f64[3, 1] = uniform(0, 2)\ninput a : f64[3, 5] = normal(0, 1)\ninput b : f64[5] = normal(0, 1)\ny = where(c - 1, a, b)"},
	{"nonfinite", "input a : f64[3, 5] = normal(0, 1)\ny = nonfinite(a / (a - a))"},
	{"neg", "input a : f64[3, 5] = normal(0, 1)\ny = -a"},
	{"exp", "input a : f64[3, 5] = normal(0, 1)\ny = exp(a)"},
	{"log", "input a : f64[3, 5] = uniform(0.5, 2)\ny = log(a)"},
	{"sqrt", "input a : f64[3, 5] = uniform(0.5, 2)\ny = sqrt(a)"},
	{"tanh", "input a : f64[3, 5] = normal(0, 1)\ny = tanh(a)"},
	{"relu", "input a : f64[3, 5] = normal(0, 1)\ny = relu(a)"},
	{"gelu", "input a : f64[3, 5] = normal(0, 1)\ny = gelu(a)"},
	{"sigmoid", "input a : f64[3, 5] = normal(0, 1)\ny = sigmoid(a)"},
	{"softmax_1", "input a : f64[3, 5] = normal(0, 1)\ny = softmax(a, axis=1)"},
	{"softmax_0", "input a : f64[3, 5] = normal(0, 1)\ny = softmax(a, 0)"},
	{"log_softmax", "input a : f64[3, 5] = normal(0, 1)\ny = log_softmax(a, axis=-1)"},
	{"layernorm", "input a : f64[3, 5] = normal(0, 1)\ninput g : f64[5] = normal(1, 0.1)\ninput b : f64[5] = normal(0, 0.1)\ny = layernorm(a, g, b)"},
	{"sum_0", "input a : f64[3, 5] = normal(0, 1)\ny = sum(a, axis=0)"},
	{"sum_1", "input a : f64[3, 5] = normal(0, 1)\ny = sum(a, axis=1)"},
	{"sum_all", "input a : f64[3, 5] = normal(0, 1)\ny = sum(a)"},
	{"mean_0", "input a : f64[3, 5] = normal(0, 1)\ny = mean(a, axis=0)"},
	{"mean_all", "input a : f64[3, 5] = normal(0, 1)\ny = mean(a)"},
	{"mean_3d", "input a : f64[2, 3, 5] = normal(0, 1)\ny = mean(a, axis=1)"},
	{"max_1", "input a : f64[3, 5] = normal(0, 1)\ny = max(a, axis=1)"},
	{"max_all", "input a : f64[3, 5] = normal(0, 1)\ny = max(a)"},
	{"transpose", "input a : f64[3, 5] = normal(0, 1)\ny = transpose(a)"},
	{"permute", "input a : f64[2, 3, 4] = normal(0, 1)\ny = permute(a, 2, 0, 1)"},
	{"reshape_split", "input a : f64[4, 6] = normal(0, 1)\ny = reshape(a, 2, 2, 6)"},
	{"reshape_flatten", "input a : f64[4, 6] = normal(0, 1)\ny = reshape(a, 24)"},
	{"reshape_merge", "input a : f64[2, 3, 4] = normal(0, 1)\ny = reshape(a, 6, 4)"},
	{"reshape_unit", "input a : f64[1, 3, 4] = normal(0, 1)\ny = reshape(a, 3, 4)"},
	{"reshape_unit_out", "input a : f64[3, 4] = normal(0, 1)\ny = reshape(a, 3, 1, 4)"},
	{"reshape_uneven", "input a : f64[3, 4] = normal(0, 1)\ny = reshape(a, 3, 2, 2)"},
	{"concat_0", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[2, 5] = normal(0, 1)\ny = concat(a, b, axis=0)"},
	{"concat_1", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[3, 2] = normal(0, 1)\ny = concat(a, b, axis=1)"},
	{"slice_1", "input a : f64[5, 6] = normal(0, 1)\ny = slice(a, 1, 1, 4)"},
	{"slice_0", "input a : f64[5, 6] = normal(0, 1)\ny = slice(a, 0, 2, 5)"},
	{"embedding", "input W : f64[7, 4] = normal(0, 1)\ninput i : i64[3, 2] = uniform(0, 7)\ny = embedding(W, i)"},
	{"embedding_i32", "input W : f64[5, 3] = normal(0, 1)\ninput i : i32[5] = uniform(0, 5)\ny = embedding(W, i)"},
	{"cross_entropy", "input a : f64[5, 4] = normal(0, 1)\ninput t : i64[5] = uniform(0, 4)\ny = cross_entropy(a, t)"},
	{"mse", "input a : f64[3, 5] = normal(0, 1)\ninput b : f64[3, 5] = normal(0, 1)\ny = mse(a, b)"},
	// fused optimizer ops
	{"adam_moment", "input m : f64[3, 5] = normal(0, 1)\ninput g : f64[3, 5] = normal(0, 1)\ny = adam_moment(m, g, 0.9)"},
	{"adam_moment2", "input m : f64[3, 5] = uniform(0, 1)\ninput g : f64[3, 5] = normal(0, 1)\ny = adam_moment2(m, g, 0.99)"},
	{"adam_update", "input p : f64[3, 5] = normal(0, 1)\ninput s : f64[] = uniform(0.1, 0.2)\ny = adam_update(p, p * 0.5, p * p + 0.1, s, 0.9, 0.00000001, 0.99)"},
	// the three chained, which lowering fuses into adam_fused (one
	// instruction, three results: see TestFusedRulesAgainstReference)
	// (two sources, as adam_update's case: every input placement of five
	// would be hundreds of thousands of runs; the broadcast is the
	// program's peak, so that fusing grows none and the pass fuses)
	{"adam_fused", "input p : f64[3, 5] = normal(0, 1)\ninput s : f64[] = uniform(0.1, 0.2)\ng = p - 0.25\nk = s + sum(broadcast_to(p, 20, 3, 5)) * 0\ny = adam_update(p, adam_moment(p * 0.5, g, 0.9), adam_moment2(p * p + 0.1, g, 0.99), k, 0.9, 0.00000001, 0.99)"},
	// gradient helper ops
	{"relu_grad", "input a : f64[3, 5] = normal(0, 1)\ny = relu_grad(a)"},
	{"gelu_grad", "input a : f64[3, 5] = normal(0, 1)\ny = gelu_grad(a)"},
	{"softmax_grad", "input a : f64[3, 5] = uniform(0, 1)\ninput g : f64[3, 5] = normal(0, 1)\ny = softmax_grad(a, g, 1)"},
	{"softmax_grad_0", "input a : f64[3, 5] = uniform(0, 1)\ninput g : f64[3, 5] = normal(0, 1)\ny = softmax_grad(a, g, axis=0)"},
	{"normalize", "input a : f64[3, 5] = normal(0, 1)\ny = normalize(a)"},
	{"normalize_grad", "input a : f64[2, 3, 5] = normal(0, 1)\ninput d : f64[2, 3, 5] = normal(0, 1)\ny = normalize_grad(a, d, eps=0.01)"},
	{"max_grad", "input a : f64[3, 5] = normal(0, 1)\ninput m : f64[3] = normal(0, 1)\ninput g : f64[3] = normal(0, 1)\ny = max_grad(a, m, g, 1)"},
	{"max_grad_all", "input a : f64[3, 5] = normal(0, 1)\ninput m : f64[] = normal(0, 1)\ninput g : f64[] = normal(0, 1)\ny = max_grad(a, m, g)"},
	{"broadcast_to", "input a : f64[3, 1] = normal(0, 1)\ny = broadcast_to(a, 2, 3, 5)"},
	{"broadcast_to_row", "input a : f64[5] = normal(0, 1)\ny = broadcast_to(a, 3, 5)"},
	{"pad", "input a : f64[3, 5] = normal(0, 1)\ny = pad(a, 1, 2, 1)"},
	{"embedding_grad", "input i : i64[3, 2] = uniform(0, 7)\ninput g : f64[3, 2, 4] = normal(0, 1)\ny = embedding_grad(i, g, 7)"},
	{"cross_entropy_grad", "input a : f64[5, 4] = normal(0, 1)\ninput t : i64[5] = uniform(0, 4)\ninput g : f64[] = normal(0, 1)\ny = cross_entropy_grad(a, t, g)"},
}

var meshes = []*mesh.Mesh{
	mesh.New("M", mesh.Axis{Name: "x", Size: 2}),
	mesh.New("M", mesh.Axis{Name: "x", Size: 3}),
	mesh.New("M", mesh.Axis{Name: "x", Size: 4}),
	mesh.New("M", mesh.Axis{Name: "x", Size: 2}, mesh.Axis{Name: "y", Size: 2}),
}

func meshDecl(m *mesh.Mesh) string {
	var parts []string
	for _, a := range m.Axes {
		parts = append(parts, fmt.Sprintf("%s=%d", a.Name, a.Size))
	}
	return "mesh M = [" + strings.Join(parts, ", ") + "]\n"
}

func checkCase(t *testing.T, c opCase, m *mesh.Mesh) *ir.Graph {
	src := meshDecl(m) + c.src + "\noutput y\n"
	g, err := lang.CheckSource(c.name+".mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err, "%s", src)
	return g
}

func TestEveryOpHasARule(t *testing.T) {
	all := append(append(lang.BuiltinOps(), lang.GradOps()...), lang.OptimOps()...)
	for _, op := range all {
		_, ok := sbp.Lookup(op)
		require.True(t, ok, "op %s has no placement rule", op)
	}
	covered := map[string]bool{}
	for _, c := range opCases {
		g := checkCase(t, c, meshes[0])
		for _, v := range g.Values {
			covered[v.Op] = true
		}
	}
	for _, op := range all {
		require.True(t, covered[op], "the validator has no case for op %s", op)
	}
	for _, c := range opCases { // the fused kernels: in the plans, never in the graphs
		p, err := lower.Lower(checkCase(t, c, meshes[0]), lower.Options{})
		require.NoError(t, err, c.name)
		for _, prog := range p.Exec.Programs {
			for _, in := range prog.Instrs {
				if in.Kernel != nil {
					covered[in.Kernel.Op] = true
				}
			}
		}
	}
	for _, op := range sbp.Ops() {
		if o, ok := ops.Lookup(op); ok && o.Kind == ops.Tier {
			// no program can call the copies between device and host
			// memory (offload): a copy returns each block as it is, so
			// its rule is right when every signature keeps the placement
			rule, _ := sbp.Lookup(op)
			sigs := rule.Sigs(&sbp.OpDesc{Op: op, In: [][]int{{3, 5}}, Out: []int{3, 5}})
			require.Len(t, sigs, 5, op) // S(0), S(1), B, P, P(max)
			for _, s := range sigs {
				require.Equal(t, s.In[0], s.Out, op)
			}
			continue
		}
		require.True(t, covered[op], "op %s has a rule but no validator case", op)
	}
}

// logical makes deterministic logical inputs for the op's arguments.
func logical(t *testing.T, v *ir.Value, seed int64) []*rt.Tensor {
	r := rand.New(rand.NewSource(seed))
	var out []*rt.Tensor
	for _, a := range v.Args {
		x := rt.NewTensor(a.Type.DType, a.Type.Shape)
		switch d := x.Data.(type) {
		case []float64:
			for i := range d {
				switch {
				case a.Op == "const":
					d[i] = a.Attrs.Scalar
				case a.Attrs.Init != nil && a.Attrs.Init.Kind == "uniform":
					d[i] = a.Attrs.Init.A + (a.Attrs.Init.B-a.Attrs.Init.A)*r.Float64()
				default:
					d[i] = r.NormFloat64()
				}
				d[i] = quantize(d[i], 40)
			}
		case []float32:
			for i := range d {
				d[i] = float32(quantize(r.NormFloat64(), 12))
			}
		case []int64:
			for i := range d {
				d[i] = int64(r.Intn(int(a.Attrs.Init.B)))
			}
		case []int32:
			for i := range d {
				d[i] = int32(r.Intn(int(a.Attrs.Init.B)))
			}
		default:
			t.Fatalf("validator inputs: unsupported %s", a.Type)
		}
		out = append(out, x)
	}
	return out
}

func TestRulesAgainstReference(t *testing.T) {
	cpu := &rt.CPU{BLAS: rt.GonumBLAS{}}
	checked := 0
	defer func() { t.Logf("%d signatures checked", checked) }()
	for _, c := range opCases {
		for _, m := range meshes {
			g := checkCase(t, c, m)
			v := g.Outputs[0].Value
			rule, ok := sbp.Lookup(v.Op)
			require.True(t, ok, "missing rule for %s", v.Op)
			args := logical(t, v, 1)
			one := mesh.New("M", m.Single().Axes...)
			want, err := cpu.Compute(&rt.OpCall{Kernel: lower.KernelOf(v), Args: args, In: blocksFor(one, v, sbp.NdSig{In: broadcasts(len(args), m.NumAxes())}, 0), Out: sbp.Layout(one, v.Type.Shape, sbp.Broadcasts(m.NumAxes()), 0)})
			require.NoError(t, err)
			sigs, err := sbp.NdSigs(rule, lower.Desc(v), m)
			require.NoError(t, err)
			for _, s := range sigs {
				if !intsNeverPartial(v, s) {
					continue
				}
				name := fmt.Sprintf("%s on %s: %v -> %s", c.name, m, s.In, s.Out)
				parts := make([]*rt.Tensor, m.Size())
				for d := 0; d < m.Size(); d++ {
					local := make([]*rt.Tensor, len(args))
					for i := range args {
						local[i] = scatterPartial(t, m, args[i], s.In[i], d)
					}
					out, err := cpu.Compute(&rt.OpCall{Kernel: lower.KernelOf(v), Args: local, In: blocksFor(m, v, s, d), Out: sbp.Layout(m, v.Type.Shape, s.Out, d)})
					require.NoError(t, err, name)
					parts[d] = out
				}
				got, err := rt.Assemble(m, v.Type, s.Out, parts)
				require.NoError(t, err, name)
				diff := rt.CompareTensors(got, want, 1e-9, 1e-12)
				checked++
				require.True(t, diff.OK, "wrong rule: %s (why: %v): max abs err %g", name, s.Why, diff.MaxAbs)
			}
		}
	}
}

// quantize rounds x to a multiple of 2^-bits: then x plus the validator's
// integer offsets (below 2^10) is exact in the tensor's dtype (f64: 40
// fraction bits, f32: 12), while x still has more precision than a
// narrower dtype keeps, so a cast of partial values rounds differently
// from a cast of their sum.
func quantize(x float64, bits int) float64 {
	return math.Round(math.Ldexp(x, bits)) / math.Ldexp(1, bits)
}

// partialOffset is the validator's offset at global element e: an integer
// multiple of 64 in [-128, 128], fixed per element.
func partialOffset(e int) float64 {
	return float64(64 * (int(splitmix(uint64(e))%5) - 2))
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// scatterPartial cuts a logical tensor into device dev's block under pl
// like rt.Scatter, but gives partial blocks values on which a wrong rule
// shows: P(sum) partials are the value plus large offsets that cancel
// exactly across the group (not the value on one device and zeros on the
// others, which every op maps to a correct-looking partial), and P(max)
// partials hold the value on one device per element and smaller values or
// -inf, the runtime's placeholder, on the others.
func scatterPartial(t *testing.T, m *mesh.Mesh, full *rt.Tensor, pl sbp.NdSBP, dev int) *rt.Tensor {
	b := sbp.Layout(m, full.Shape, pl, dev)
	blk := rt.Extract(full, b.Off, b.Len)
	if len(b.Partial) == 0 {
		return blk
	}
	coord := m.Coord(dev)
	q, size, reduce := 0, 1, pl[b.Partial[0]].Reduce
	for _, a := range b.Partial {
		require.Equal(t, reduce, pl[a].Reduce, "the validator cannot scatter %s", pl)
		q, size = q*m.Axes[a].Size+coord[a], size*m.Axes[a].Size
	}
	d, ok := blk.Data.([]float64)
	if !ok {
		f := blk.Float64s()
		d = f
		defer func() { fill(blk, f) }()
	}
	for i := range d {
		e := globalIndex(full.Shape, b, i)
		o := partialOffset(e)
		switch {
		case reduce == sbp.Sum && q == 0:
			d[i] += float64(size-1) * o
		case reduce == sbp.Sum:
			d[i] = -o
		case int(splitmix(uint64(e)+7)%uint64(size)) == q:
			// the owner keeps the value
		case o == 0:
			d[i] = math.Inf(-1)
		default:
			d[i] -= math.Abs(o)
		}
	}
	return blk
}

// globalIndex is the flat index in the logical tensor of element i of
// block b.
func globalIndex(shape []int, b sbp.Block, i int) int {
	idx := make([]int, len(shape))
	for k := len(shape) - 1; k >= 0; k-- {
		idx[k] = b.Off[k] + i%b.Len[k]
		i /= b.Len[k]
	}
	e := 0
	for k := range shape {
		e = e*shape[k] + idx[k]
	}
	return e
}

// fill writes float64 values back into a float32 tensor (exactly: the
// values are quantized, see quantize).
func fill(x *rt.Tensor, v []float64) {
	if d, ok := x.Data.([]float32); ok {
		for i := range d {
			d[i] = float32(v[i])
		}
	}
}

func broadcasts(n, axes int) []sbp.NdSBP {
	out := make([]sbp.NdSBP, n)
	for i := range out {
		out[i] = sbp.Broadcasts(axes)
	}
	return out
}

func blocksFor(m *mesh.Mesh, v *ir.Value, s sbp.NdSig, dev int) []sbp.Block {
	var out []sbp.Block
	for i, a := range v.Args {
		out = append(out, sbp.Layout(m, a.Type.Shape, s.In[i], dev))
	}
	return out
}

func intsNeverPartial(v *ir.Value, s sbp.NdSig) bool {
	for i, a := range v.Args {
		if a.Type.DType.IsInt() && s.In[i].HasPartial() {
			return false
		}
	}
	return true
}

// withMaxPartials adds, for every placement with P(sum) entries, the same
// placement with P(max) there: sources may be declared either way. Only on
// one-axis meshes: on 2×2 the combinations of several sources would triple
// the test's time, and the differential fuzz covers P(max) on nd meshes.
func withMaxPartials(pls []sbp.NdSBP, m *mesh.Mesh) []sbp.NdSBP {
	if m.NumAxes() > 1 {
		return pls
	}
	out := append([]sbp.NdSBP(nil), pls...)
	for _, p := range pls {
		if !p.HasPartial() {
			continue
		}
		q := p.Clone()
		for a, e := range q {
			if e.IsP() {
				q[a] = sbp.PMax
			}
		}
		out = append(out, q)
	}
	return out
}

func TestEveryInputPlacement(t *testing.T) {
	if testing.Short() {
		t.Skip("brute force over every input placement")
	}
	ctx := context.Background()
	runs := 0
	defer func() { t.Logf("%d sharded runs checked", runs) }()
	for _, c := range opCases {
		for _, m := range meshes {
			g := checkCase(t, c, m)
			ref, err := lower.Lower(g, lower.Options{Mesh: m.Single()})
			require.NoError(t, err)
			want, err := rt.Run(ctx, ref, rt.Options{Backend: &rt.CPU{BLAS: rt.GonumBLAS{}}})
			require.NoError(t, err)
			var sources []*ir.Value
			for _, v := range g.Values {
				if v.IsSource() {
					sources = append(sources, v)
				}
			}
			combos := []map[string]sbp.NdSBP{{}}
			for _, s := range sources {
				var next []map[string]sbp.NdSBP
				for _, combo := range combos {
					for _, p := range withMaxPartials(sbp.All(s.Type.Rank(), m.NumAxes(), s.Type.DType.IsFloat()), m) {
						c2 := map[string]sbp.NdSBP{s.Name: p}
						for k, v := range combo {
							c2[k] = v
						}
						next = append(next, c2)
					}
				}
				combos = next
			}
			for _, force := range combos {
				name := fmt.Sprintf("%s on %s with %v", c.name, m, force)
				p, err := lower.Lower(g, lower.Options{Force: force, Verify: true})
				require.NoError(t, err, name)
				got, err := rt.Run(ctx, p, rt.Options{Backend: &rt.CPU{BLAS: rt.GonumBLAS{}}})
				require.NoError(t, err, name)
				runs++
				diff := rt.CompareTensors(got.Outputs[0], want.Outputs[0], 1e-9, 1e-12)
				require.True(t, diff.OK, "%s: sharded differs from single device by %g", name, diff.MaxAbs)
			}
		}
	}
}
