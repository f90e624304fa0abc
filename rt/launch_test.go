package rt

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

// A hand-written ring shift (the pattern of ring attention and of pipeline
// stage transfers): every rank sends its block to the next rank with a tag
// and receives the previous rank's. Programs differ per rank only in the
// slot they read back, to exercise RankProgram.
func TestSendRecvRingShiftOnTheLocalLauncher(t *testing.T) {
	const n = 4
	m := mesh.New("M", mesh.Axis{Name: "pp", Size: n})
	split := sbp.NdSBP{sbp.S(0)}
	at := ir.Pos{Filename: "ring.mesh", Line: 3, Column: 5}
	mk := func(kind plan.Kind, shift, out int, args ...int) plan.Instr {
		return plan.Instr{Kind: kind, Label: "x", DType: ir.F32, Shape: []int{2 * n}, Placement: split, Args: args, Out: out,
			Peer: plan.Peer{Axes: []int{0}, Shift: []int{shift}}, Tag: 3, Pos: at}
	}
	source := plan.Instr{Kind: plan.Source, Label: "x", DType: ir.F32, Shape: []int{2 * n}, Placement: split, Out: 0, Pos: at}
	prog := &plan.Program{SlotType: []ir.DType{ir.F32, ir.F32}, OutputSlots: []int{1},
		Instrs: []plan.Instr{source, mk(plan.Send, 1, -1, 0), mk(plan.Recv, -1, 1)}}
	p := &plan.Plan{Mesh: m, Programs: []*plan.Program{prog, prog}, RankProgram: []int{0, 1, 0, 1},
		Sources: []plan.Tensor{{Name: "x", Role: "hyper", DType: ir.F32, Shape: []int{2 * n}, Placement: split}},
		Outputs: []plan.Tensor{{Name: "y", DType: ir.F32, Shape: []int{2 * n}, Placement: split}}}
	require.NoError(t, p.Verify())
	l, err := NewLocal(context.Background(), p, Options{})
	require.NoError(t, err)
	res, err := l.Run(context.Background(), func(r int) Feed {
		return func(int) (Buffer, error) { return FromSlice([]int{2}, []float32{float32(r), float32(10 * r)}), nil }
	})
	require.NoError(t, err)
	// block r of the output came from rank r-1
	require.Equal(t, []float32{3, 30, 0, 0, 1, 10, 2, 20}, res.Output("y").Data)
	require.Equal(t, int64(8), res.Devices[0].BytesSent)
}

// A plan decoded from its encoding runs to the same outputs, bit for bit,
// as the plan the compiler produced: nothing the workers need is lost.
func TestDecodedPlansRunLikeTheOriginals(t *testing.T) {
	files, err := filepath.Glob("../examples/*.mesh")
	require.NoError(t, err)
	for _, f := range files {
		p, _, err := lower.CompileFile(f, lang.CheckOptions{}, lower.Options{})
		require.NoError(t, err, f)
		want, err := Run(context.Background(), p, Options{})
		require.NoError(t, err, f)
		data, err := plan.Marshal(p.Exec)
		require.NoError(t, err)
		q, err := plan.Decode(bytes.NewReader(data))
		require.NoError(t, err)
		l, err := NewLocal(context.Background(), q, Options{})
		require.NoError(t, err)
		got, err := l.Run(context.Background(), nil)
		require.NoError(t, err, f)
		require.Equal(t, want.Names, got.Names)
		for i := range want.Outputs {
			require.Equal(t, want.Outputs[i].Data, got.Outputs[i].Data, "%s: %s", f, want.Names[i])
		}
	}
}

// A group may span several mesh axes (2.5D and 3D algorithms need it): an
// all-reduce over both axes of a 2×3 mesh sums all six ranks' values.
func TestCollectiveOnAGroupSpanningTwoAxes(t *testing.T) {
	m := mesh.New("M", mesh.Axis{Name: "a", Size: 2}, mesh.Axis{Name: "b", Size: 3})
	pp, bb := sbp.NdSBP{sbp.P, sbp.P}, sbp.NdSBP{sbp.B, sbp.B}
	at := ir.Pos{Filename: "g.mesh", Line: 2, Column: 1}
	step := &sbp.Step{Axis: 0, From: pp, To: bb, Kind: sbp.AllReduce}
	prog := &plan.Program{SlotType: []ir.DType{ir.F64, ir.F64}, OutputSlots: []int{1}, Instrs: []plan.Instr{
		{Kind: plan.Source, Label: "x", DType: ir.F64, Shape: []int{2}, Placement: pp, Out: 0, Pos: at},
		{Kind: plan.Collective, Label: "x", Step: step, Group: 0, DType: ir.F64, Shape: []int{2}, Placement: bb,
			ArgPlace: []sbp.NdSBP{pp}, Args: []int{0}, Out: 1, Free: []int{0}, Pos: at},
	}}
	p := &plan.Plan{Mesh: m, Groups: []plan.Group{{Axes: []int{0, 1}}}, Programs: []*plan.Program{prog},
		Sources: []plan.Tensor{{Name: "x", Role: "hyper", DType: ir.F64, Shape: []int{2}, Placement: pp}},
		Outputs: []plan.Tensor{{Name: "y", DType: ir.F64, Shape: []int{2}, Placement: bb}}}
	require.NoError(t, p.Verify())
	l, err := NewLocal(context.Background(), p, Options{})
	require.NoError(t, err)
	res, err := l.Run(context.Background(), func(r int) Feed {
		return func(int) (Buffer, error) { return FromSlice([]int{2}, []float64{float64(r), 1}), nil }
	})
	require.NoError(t, err)
	require.Equal(t, []float64{15, 6}, res.Output("y").Data)
}
