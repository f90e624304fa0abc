package plan_test

import (
	"slices"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// addInPlace is an op for these tests alone (registered in this test
// binary only): an elementwise sum whose result may be written over its
// first argument and, as a second result, over its second (ops.Op.InPlace).
const addInPlace = "add_in_place"

func init() {
	ops.Register(ops.Op{Name: addInPlace, Family: "test", Kind: ops.Fused, InPlace: []int{0, 1}})
}

// donatingPlan is, on a mesh of two, s0 = a, s1 = b (f32[8] split: 16
// bytes a rank each), s2 = add_in_place(s0, s1) written over s0
// (Donate), s0 and s1 freed there; output s2.
func donatingPlan() *plan.Plan {
	m := mesh.New("M", mesh.Axis{Name: "x", Size: 2})
	split := sbp.NdSBP{sbp.S(0)}
	src := func(name string) plan.Tensor {
		return plan.Tensor{Name: name, Role: "input", DType: ir.F32, Shape: []int{8}, Placement: split, Home: -1}
	}
	source := func(i, out int) plan.Instr {
		return plan.Instr{Kind: plan.Source, Label: src("ab"[i : i+1]).Name, Src: i, DType: ir.F32, Shape: []int{8}, Placement: split, Out: out}
	}
	add := plan.Instr{Kind: plan.Compute, Label: "add", DType: ir.F32, Shape: []int{8}, Placement: split,
		Kernel:   &plan.Kernel{Op: addInPlace, DType: ir.F32, Shape: []int{8}, ArgDTypes: []ir.DType{ir.F32, ir.F32}, ArgShapes: [][]int{{8}, {8}}},
		ArgPlace: []sbp.NdSBP{split, split}, Args: []int{0, 1}, Out: 2, Donate: []int{0}, Free: []int{0, 1}}
	return &plan.Plan{
		Mesh: m, Sources: []plan.Tensor{src("a"), src("b")}, Outputs: []plan.Tensor{src("y")},
		Programs: []*plan.Program{{Instrs: []plan.Instr{source(0, 0), source(1, 1), add}, SlotType: []ir.DType{ir.F32, ir.F32, ir.F32, ir.F32}, OutputSlots: []int{2}}},
	}
}

// TestDonationInReplayAndDump: a donated result allocates nothing and
// its argument's free returns nothing: the add holds 32 bytes at its top
// (a, b; the sum in a's buffer) where fresh it holds 48, and 16 after
// (the sum); the dump says which slot's buffer the result takes.
func TestDonationInReplayAndDump(t *testing.T) {
	p := donatingPlan()
	require.NoError(t, p.Verify())
	require.Equal(t, int64(32), p.Peak(0))
	top, after := p.Held(1)
	require.Equal(t, []int64{16, 32, 32}, top)
	require.Equal(t, []int64{16, 32, 16}, after)
	require.Equal(t, []int64{32, 32}, p.TotalPeaks())
	require.Contains(t, p.Dump(), "s2 = add_in_place -> add(s0, s1) f32[8] {S(0)} free[0 1] donate[s0→s2]")
	p.Programs[0].Instrs[2].Donate = nil
	require.Equal(t, int64(48), p.Peak(0))
	require.NotContains(t, p.Dump(), "donate")
}

// TestVerifierRejectsABadDonation: one broken rule at a time, each
// rejected by the plan verifier with the instruction and the rule.
func TestVerifierRejectsABadDonation(t *testing.T) {
	for _, c := range []struct {
		name    string
		breakIt func(p *plan.Plan)
		want    string
	}{
		{"not a compute", func(p *plan.Plan) { p.Programs[0].Instrs[1].Donate = []int{0} }, "only a compute instruction may"},
		{"one per result", func(p *plan.Plan) { p.Programs[0].Instrs[2].Donate = []int{0, 1} }, "2 donations for 1 results"},
		{"no such argument", func(p *plan.Plan) { p.Programs[0].Instrs[2].Donate = []int{2} }, "reuses argument 3 of 2"},
		{"not where the kernel runs in place", func(p *plan.Plan) { p.Programs[0].Instrs[2].Donate = []int{1} },
			"result 1 of add_in_place is written over argument 2, where its kernel does not run in place"},
		{"an op that never runs in place", func(p *plan.Plan) { p.Programs[0].Instrs[2].Kernel.Op = "add" },
			"result 1 of add is written over argument 1, where its kernel does not run in place"},
		{"two results, one argument", func(p *plan.Plan) {
			in := &p.Programs[0].Instrs[2]
			in.Outs, in.Donate = []int{3}, []int{0, 0}
		}, "two results reuse argument 1"},
		{"another placement", func(p *plan.Plan) {
			in := &p.Programs[0].Instrs[2]
			in.ArgPlace = []sbp.NdSBP{{sbp.B}, in.ArgPlace[1]}
		}, "not the same block"},
		{"another shape", func(p *plan.Plan) {
			in := &p.Programs[0].Instrs[2]
			in.Kernel.ArgShapes = [][]int{{2, 4}, {8}}
		}, "not the same block"},
		{"another dtype", func(p *plan.Plan) {
			in := &p.Programs[0].Instrs[2]
			in.Kernel.ArgDTypes = []ir.DType{ir.F64, ir.F32}
		}, "not the same block"},
		{"lives on", func(p *plan.Plan) { p.Programs[0].Instrs[2].Free = []int{1} }, "lives on after the instruction"},
		{"read twice", func(p *plan.Plan) {
			in := &p.Programs[0].Instrs[2]
			in.Args, in.Free = []int{0, 0}, []int{0}
		}, "also reads as argument 2"},
		{"read later", func(p *plan.Plan) {
			prog := p.Programs[0]
			neg := prog.Instrs[2]
			neg.Label, neg.Args, neg.ArgPlace, neg.Out, neg.Donate, neg.Free = "neg", []int{0}, neg.ArgPlace[:1], 3, nil, nil
			neg.Kernel = &plan.Kernel{Op: "neg", DType: ir.F32, Shape: []int{8}, ArgDTypes: []ir.DType{ir.F32}, ArgShapes: [][]int{{8}}}
			prog.Instrs = append(prog.Instrs, neg)
		}, "reads slot 0, whose buffer instruction 2 gave to its result"},
		{"kept as an output", func(p *plan.Plan) { p.Programs[0].OutputSlots = []int{0} }, "slot 0 is kept after the program"},
		{"sent before", func(p *plan.Plan) {
			prog := p.Programs[0]
			send := plan.Instr{Kind: plan.Send, Label: "a", DType: ir.F32, Shape: []int{8}, Placement: prog.Instrs[0].Placement,
				ArgPlace: []sbp.NdSBP{prog.Instrs[0].Placement}, Args: []int{0}, Out: -1, Peer: plan.Peer{Axes: []int{0}, Shift: []int{1}}}
			prog.Instrs = append(prog.Instrs[:2], send, prog.Instrs[2])
		}, "reuses slot 0, a send's argument or a collective's or recv's result"},
		{"received", func(p *plan.Plan) {
			in := &p.Programs[0].Instrs[0]
			in.Kind, in.Src, in.Peer = plan.Recv, 0, plan.Peer{Axes: []int{0}, Shift: []int{1}}
		}, "reuses slot 0, a send's argument or a collective's or recv's result"},
	} {
		p := donatingPlan()
		c.breakIt(p)
		err := p.Verify()
		require.Error(t, err, c.name)
		require.ErrorContains(t, err, c.want, c.name)
		if !slices.Contains([]string{"kept as an output"}, c.name) {
			require.ErrorContains(t, err, "instruction ", c.name) // which one, and where
		}
	}
}
