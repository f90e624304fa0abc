package sbp_test

import (
	"context"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// TestFusedRulesAgainstReference is TestRulesAgainstReference for the
// kernels with several results that lowering makes (ops.Fused: no program
// calls them, so no graph holds them). For adam_fused on [3, 5] f64, on
// every validator mesh and under every nd signature its rule offers, each
// device runs the fused kernel on its blocks as the signature places
// them; each of the three results, assembled under the signature's output
// placement, must equal what the three separate ops (adam_moment,
// adam_moment2, adam_update) compute on one device.
func TestFusedRulesAgainstReference(t *testing.T) {
	require.Equal(t, []string{"adam_fused"}, ops.Names(ops.Fused), "a new fused kernel needs its case here")
	ctx := context.Background()
	cpu := &rt.CPU{BLAS: rt.GonumBLAS{}}
	shape := []int{3, 5}
	vec := func(seed int64, lo float64) *rt.Tensor {
		x := rt.NewTensor(ir.F64, shape)
		for i, d := 0, x.Data.([]float64); i < len(d); i++ {
			d[i] = lo + quantize(float64((int(splitmix(uint64(seed)*64+uint64(i))%2001)-1000))/1000, 20)
		}
		return x
	}
	scalar := func(v float64) *rt.Tensor {
		x := rt.NewTensor(ir.F64, []int{})
		x.Data.([]float64)[0] = v
		return x
	}
	// p, m, v ≥ 0, g; β1, β2, step, root_bc2, eps, decay
	args := []*rt.Tensor{vec(1, 0), vec(2, 0), vec(3, 1), vec(4, 0), scalar(0.9), scalar(0.99), scalar(0.05), scalar(0.9), scalar(1e-8), scalar(0.99)}
	kernel := func(op string, idx ...int) *plan.Kernel {
		k := &plan.Kernel{Op: op, DType: ir.F64, Shape: shape}
		for _, i := range idx {
			k.ArgDTypes, k.ArgShapes = append(k.ArgDTypes, ir.F64), append(k.ArgShapes, args[i].Shape)
		}
		return k
	}
	one := mesh.New("M", mesh.Axis{Name: "x", Size: 1})
	whole := sbp.Layout(one, shape, sbp.Broadcasts(1), 0)
	run := func(k *plan.Kernel, a ...*rt.Tensor) *rt.Tensor {
		in := make([]sbp.Block, len(a))
		for i, x := range a {
			in[i] = sbp.Layout(one, x.Shape, sbp.Broadcasts(1), 0)
		}
		out, err := cpu.Compute(&rt.OpCall{Kernel: k, Args: a, In: in, Out: whole})
		require.NoError(t, err)
		return out
	}
	nm := run(kernel("adam_moment", 1, 3, 4), args[1], args[3], args[4])
	nv := run(kernel("adam_moment2", 2, 3, 5), args[2], args[3], args[5])
	np := run(kernel("adam_update", 0, 1, 2, 6, 7, 8, 9), args[0], nm, nv, args[6], args[7], args[8], args[9])
	want := []*rt.Tensor{np, nm, nv}

	fk := kernel("adam_fused", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	rule, ok := sbp.Lookup("adam_fused")
	require.True(t, ok)
	desc := &sbp.OpDesc{Op: "adam_fused", Out: shape}
	for _, a := range args {
		desc.In = append(desc.In, a.Shape)
	}
	checked := 0
	for _, m := range meshes {
		sigs, err := sbp.NdSigs(rule, desc, m)
		require.NoError(t, err)
		for _, s := range sigs {
			parts := make([][]*rt.Tensor, 3)
			for d := 0; d < m.Size(); d++ {
				local := make([]rt.Buffer, len(args))
				in := make([]sbp.Block, len(args))
				for i, a := range args {
					local[i] = scatterPartial(t, m, a, s.In[i], d)
					in[i] = sbp.Layout(m, a.Shape, s.In[i], d)
				}
				res, err := rt.LaunchResults(ctx, cpu, fk, local, in, sbp.Layout(m, shape, s.Out, d), 3)
				require.NoError(t, err, "%s: %v", m, s)
				for k := range parts {
					parts[k] = append(parts[k], res[k].(*rt.Tensor))
				}
			}
			for k := range parts {
				got, err := rt.Assemble(m, ir.Type{DType: ir.F64, Shape: shape}, s.Out, parts[k])
				require.NoError(t, err)
				diff := rt.CompareTensors(got, want[k], 0, 0)
				require.True(t, diff.OK, "wrong rule: adam_fused on %s: %v -> %s, result %d: max abs err %g", m, s.In, s.Out, k, diff.MaxAbs)
			}
			checked++
		}
	}
	require.Greater(t, checked, 10)
	t.Logf("%d signatures checked", checked)
}
