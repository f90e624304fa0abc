package lower

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/meshrun/meshrun/bench/gptsrc"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// spmdPlans lowers the examples, the uneven program and a pipelined GPT
// through the spmd pass only, where InstrValue still maps each instruction
// of the one program to its value.
func spmdPlans(t *testing.T) map[string]*Plan { return plansUntil(t, "spmd") }

// plansUntil is spmdPlans through the pass named last.
func plansUntil(t *testing.T, last string) map[string]*Plan {
	srcs := map[string][]byte{"uneven.mesh": []byte(unevenSource)}
	var gpt bytes.Buffer
	gptsrc.Write(&gpt, 8, true)
	srcs["gpt.mesh"] = gpt.Bytes()
	graphs := map[string]*ir.Graph{}
	for name, src := range srcs {
		g, err := lang.CheckSource(name, src, lang.CheckOptions{})
		require.NoError(t, err)
		graphs[name] = g
	}
	for _, name := range examples(t) {
		g, _, err := lang.CheckFile("../examples/"+name+".mesh", lang.CheckOptions{})
		require.NoError(t, err)
		graphs[name] = g
	}
	plans := map[string]*Plan{}
	for name, g := range graphs {
		p, err := newPlan(g, Options{})
		require.NoError(t, err)
		for _, pass := range Passes {
			require.NoError(t, runPass(p, pass), name)
			if pass.Name == last {
				break
			}
		}
		plans[name] = p
	}
	return plans
}

// Every compute instruction's shared kernel and position text equal what
// KernelOf and Where build afresh for its value, and sharing happens
// (the pipelined GPT repeats each kernel per layer and micro-batch).
func TestInternedKernelsMatchFreshOnes(t *testing.T) {
	for name, p := range spmdPlans(t) {
		computes := 0
		kernels := map[*plan.Kernel]bool{}
		for i, in := range p.Exec.Programs[0].Instrs {
			v := p.InstrValue[i]
			if in.Kind == plan.Source {
				require.Equal(t, v.Where(), in.Where, "%s %s", name, in.Label)
			}
			if in.Kind != plan.Compute || isLocalOp(v) {
				continue
			}
			computes++
			kernels[in.Kernel] = true
			require.True(t, reflect.DeepEqual(KernelOf(v), in.Kernel), "%s %s: kernel %+v, fresh %+v", name, in.Label, *in.Kernel, *KernelOf(v))
			require.Equal(t, v.Where(), in.Where, "%s %s", name, in.Label)
		}
		if name == "gpt.mesh" {
			require.Less(t, len(kernels), computes/8, "the micro-batches and layers share kernels")
		}
	}
}

// The gemm fusion pass, which runs after spmd, sets TransA/TransB on a
// copy of a matmul's kernel: the shared kernels of every other
// instruction stay what KernelOf gives, and no fused kernel is shared
// with an instruction that was not fused.
func TestFusionLeavesSharedKernelsAlone(t *testing.T) {
	fusedSome := false
	for name, p := range plansUntil(t, "fuse") {
		plain := map[*plan.Kernel]bool{}
		var fused []*plan.Kernel
		for i, in := range p.Exec.Programs[0].Instrs {
			v := p.InstrValue[i]
			if in.Kind != plan.Compute || isLocalOp(v) {
				continue
			}
			if in.Kernel.TransA || in.Kernel.TransB {
				fused = append(fused, in.Kernel)
				continue
			}
			plain[in.Kernel] = true
			require.True(t, reflect.DeepEqual(KernelOf(v), in.Kernel), "%s %s", name, in.Label)
		}
		for _, k := range fused {
			require.False(t, plain[k], "%s: a fused kernel is shared with an unfused instruction", name)
		}
		fusedSome = fusedSome || len(fused) > 0
	}
	require.True(t, fusedSome, "some example has a fused matmul")
}

// kernelKey encodes every field KernelOf copies; a new field in
// plan.Kernel or ir.Attrs must be added to it (and then here). TransA and
// TransB are not KernelOf's: only the fusion pass sets them, on a copy.
func TestKernelKeyCoversKernel(t *testing.T) {
	require.Equal(t, 8, reflect.TypeFor[plan.Kernel]().NumField(), "plan.Kernel changed: update kernelKey")
	require.Equal(t, 13, reflect.TypeFor[ir.Attrs]().NumField(), "ir.Attrs changed: update kernelKey")
	base, variants := oneFieldVariants()
	seen := map[string]int{}
	for i, f := range variants {
		v := base()
		f(v)
		k := string(kernelKey(nil, v))
		j, dup := seen[k]
		require.False(t, dup, "variants %d and %d share a key", j, i)
		seen[k] = i
	}
}

// The tables by value ID hold what Plan.Placement and Plan.Choice hold.
func TestByIDTablesMatchTheMaps(t *testing.T) {
	for name, p := range spmdPlans(t) {
		require.Len(t, p.Placement, len(p.Values), name)
		for _, v := range p.Values {
			require.Equal(t, p.Placement[v], p.placeByID[v.ID], "%s %s", name, v.Label())
			require.Same(t, p.Choice[v], p.choiceOf(v), "%s %s", name, v.Label())
		}
		for i, c := range p.Convs {
			require.Equal(t, i, c.ID, name)
		}
	}
}

// Pieces of a window never share elements, even past a chunk's end, and
// an append to one leaves the next alone.
func TestWindowPiecesAreDisjoint(t *testing.T) {
	var w window[int]
	var pieces [][]int
	for i := range 3000 {
		p := w.take(i % 7)
		require.Len(t, p, i%7)
		require.Equal(t, len(p), cap(p))
		for k := range p {
			p[k] = i
		}
		pieces = append(pieces, p)
	}
	_ = append(pieces[10], -1)
	for i, p := range pieces {
		for _, x := range p {
			require.Equal(t, i, x)
		}
	}
}

// explain's shared strings and slices (reportMemo, textMemo) equal what
// formatting each field afresh gives, for every op and argument of the
// examples, the uneven program and a pipelined GPT; and the text written
// as it renders is the text built as one string.
func TestReportMemoMatchesFreshFormatting(t *testing.T) {
	plans := testPlansAndGPT(t)
	for name, p := range plans {
		r := Explain(p)
		tm := newTextMemo()
		for k, v := range p.Values {
			o := r.Ops[k]
			require.Equal(t, v.Label(), o.Value, name)
			require.Equal(t, ir.FormatPos(v.Pos), o.Where, name)
			require.Equal(t, formatAll(v.Calls), o.CalledFrom, "%s %s", name, o.Value)
			require.Equal(t, p.Placement[v].String(), o.Placement, "%s %s", name, o.Value)
			require.Equal(t, v.Type.DType.String(), o.DType, name)
			require.Equal(t, shortWhere(o.Where)+via(o.CalledFrom), tm.where(o.Where, o.CalledFrom), name)
			require.Equal(t, ir.ShapeString(o.Local), tm.shape(o.Local), name)
			ch := p.Choice[v]
			if ch == nil {
				require.Nil(t, o.Inputs, name)
				continue
			}
			if v.Op != "to" {
				require.Equal(t, dedupe(ch.Sig.Why), o.Why, "%s %s", name, o.Value)
			}
			for i, a := range v.Args {
				require.Equal(t, a.Label(), o.Inputs[i].Value, name)
				require.Equal(t, p.Placement[a].String(), o.Inputs[i].Placement, "%s %s arg %d", name, o.Value, i)
				if ch.ArgConv[i] != nil {
					require.Equal(t, ch.Sig.In[i].String(), o.Inputs[i].Converted, name)
				}
			}
		}
		k := 0
		for _, c := range p.Convs {
			for _, st := range c.Path.Steps {
				cr := r.Collectives[k]
				k++
				require.Equal(t, c.Value.Label(), cr.Value, name)
				require.Equal(t, st.From.String(), cr.From, name)
				require.Equal(t, st.To.String(), cr.To, name)
				require.Equal(t, ir.FormatPos(c.Pos), cr.Where, name)
				require.Equal(t, formatAll(c.Calls), cr.CalledFrom, name)
			}
		}
		require.Len(t, r.Collectives, k, name)
		var streamed bytes.Buffer
		require.NoError(t, r.WriteText(&streamed))
		require.Equal(t, r.Text(), streamed.String(), "%s: WriteText writes Text's text", name)
	}
}

// testPlansAndGPT is testPlans and an 8-layer pipelined GPT (bench's
// generator), "gpt pipelined".
func testPlansAndGPT(t *testing.T) map[string]*Plan {
	t.Helper()
	plans := testPlans(t)
	var gpt bytes.Buffer
	gptsrc.Write(&gpt, 8, true)
	g, err := lang.CheckSource("gpt.mesh", gpt.Bytes(), lang.CheckOptions{})
	require.NoError(t, err)
	plans["gpt pipelined"], err = Lower(g, Options{})
	require.NoError(t, err)
	return plans
}

// oneFieldVariants is a value (base makes a fresh one) and edits that
// each change one field a kernel or placement key reads: the op, the
// result's and an argument's dtype and shape (nil and empty too),
// every attribute, the argument count. The first edit changes nothing.
func oneFieldVariants() (base func() *ir.Value, variants []func(v *ir.Value)) {
	base = func() *ir.Value {
		a := &ir.Value{Op: "x", Type: ir.Type{DType: ir.F32, Shape: []int{4}}}
		return &ir.Value{Op: "sum", Type: ir.Type{DType: ir.F32, Shape: []int{4}}, Args: []*ir.Value{a}}
	}
	variants = []func(v *ir.Value){
		func(v *ir.Value) {},
		func(v *ir.Value) { v.Op = "max" },
		func(v *ir.Value) { v.Type.DType = ir.F64 },
		func(v *ir.Value) { v.Type.Shape = []int{2, 2} },
		func(v *ir.Value) { v.Type.Shape = nil },
		func(v *ir.Value) { v.Type.Shape = []int{} },
		func(v *ir.Value) { v.Attrs.Axis = 1 },
		func(v *ir.Value) { v.Attrs.Perm = []int{0} },
		func(v *ir.Value) { v.Attrs.Perm = []int{} },
		func(v *ir.Value) { v.Attrs.Start = 1 },
		func(v *ir.Value) { v.Attrs.End = 1 },
		func(v *ir.Value) { v.Attrs.Eps = 1e-5 },
		func(v *ir.Value) { v.Attrs.Scalar = 2 },
		func(v *ir.Value) { v.Attrs.Regather = true },
		func(v *ir.Value) { v.Attrs.Axes = []int{0} },
		func(v *ir.Value) { v.Attrs.Root = 1 },
		func(v *ir.Value) { v.Attrs.Shift = []int{1} },
		func(v *ir.Value) { v.Attrs.Dim2 = 1 },
		func(v *ir.Value) { v.Attrs.Place = sbp.NdSBP{sbp.B} },
		func(v *ir.Value) { v.Args[0].Type.DType = ir.F64 },
		func(v *ir.Value) { v.Args[0].Type.Shape = []int{4, 1} },
		func(v *ir.Value) { v.Args[0].Type.Shape = nil },
		func(v *ir.Value) { v.Args[0].Type.Shape = []int{} },
		func(v *ir.Value) { v.Args = append(v.Args, v.Args[0]) },
	}
	return base, variants
}
