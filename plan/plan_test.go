package plan_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
	"github.com/stretchr/testify/require"
)

func allExamples(t *testing.T) []string {
	var files []string
	for _, pat := range []string{"../examples/*.mesh", "../examples/*/*.mesh", "../examples/*/*/*.mesh"} {
		m, err := filepath.Glob(pat)
		require.NoError(t, err)
		files = append(files, m...)
	}
	require.GreaterOrEqual(t, len(files), 11)
	return files
}

// Every example's plan survives Encode/Decode unchanged: the decoded plan
// encodes to the same bytes and dumps the same text.
func TestEncodeDecodeRoundTripsEveryExample(t *testing.T) {
	for _, f := range allExamples(t) {
		p, _, err := lower.CompileFile(f, lang.CheckOptions{}, lower.Options{})
		require.NoError(t, err, f)
		data, err := plan.Marshal(p.Exec)
		require.NoError(t, err)
		q, err := plan.Decode(bytes.NewReader(data))
		require.NoError(t, err, f)
		again, err := plan.Marshal(q)
		require.NoError(t, err)
		require.Equal(t, data, again, f)
		require.Equal(t, p.Exec.Dump(), q.Dump(), f)
		require.NoError(t, q.Verify(), f)
	}
}

func TestDecodeRejectsWhatIsNotAPlan(t *testing.T) {
	_, err := plan.Decode(strings.NewReader("hello\n"))
	require.ErrorContains(t, err, "not a meshrun plan")
	_, err = plan.Decode(strings.NewReader("meshrun-plan v1\ngarbage"))
	require.ErrorContains(t, err, "decoding plan")
}

// An SPMD program is stored once however large the mesh.
func TestRanksShareOneProgram(t *testing.T) {
	src := "mesh M = [dp=64, tp=64]\ninput x : f32[128, 256] {S(0), B} = ones\nparam W : f32[256, 128] {B, S(1)} = ones\ny = x @ W\noutput y {S(0), B}\n"
	g, err := lang.CheckSource("big.mesh", []byte(src), lang.CheckOptions{})
	require.NoError(t, err)
	p, err := lower.Lower(g, lower.Options{})
	require.NoError(t, err)
	require.Len(t, p.Exec.Programs, 1)
	require.Nil(t, p.Exec.RankProgram)
	rp, err := p.Exec.Bind(4095)
	require.NoError(t, err)
	last := rp.Instrs[len(rp.Instrs)-1]
	require.Equal(t, []int{2, 128}, last.Out.Len)
	require.Len(t, last.Members, 64)
	require.Equal(t, 63, last.Index)
}

func TestMembersOfAMultiAxisGroup(t *testing.T) {
	m := mesh.New("M", mesh.Axis{Name: "a", Size: 2}, mesh.Axis{Name: "b", Size: 3}, mesh.Axis{Name: "c", Size: 2})
	// rank 7 = (1, 0, 1): its group over {a, c} varies a and c, b fixed at 0
	require.Equal(t, []int{0, 1, 6, 7}, m.Group(7, 0, 2))
	require.Equal(t, []int{6, 8, 10}, m.Group(6, 1))
	require.Len(t, m.Group(3, 0, 1, 2), 12)
	peer, err := plan.PeerOf(m, 11, plan.Peer{Axes: []int{1}, Shift: []int{1}})
	require.NoError(t, err)
	require.Equal(t, 7, peer) // (1, 2, 1) + b → (1, 0, 1): the ring wraps
}

// p2p builds a plan on a ring of n ranks whose programs are given per rank
// as instruction lists over one f32[4] slot type.
func p2p(n int, progs [][]plan.Instr, rankProg []int) *plan.Plan {
	m := mesh.New("M", mesh.Axis{Name: "pp", Size: n})
	p := &plan.Plan{Mesh: m, RankProgram: rankProg,
		Sources: []plan.Tensor{{Name: "x", Role: "input", DType: ir.F32, Shape: []int{4}, Placement: sbp.NdSBP{sbp.B}, Init: &ir.Init{Kind: "ones"}}},
		Outputs: []plan.Tensor{{Name: "y", DType: ir.F32, Shape: []int{4}, Placement: sbp.NdSBP{sbp.B}}}}
	for _, ins := range progs {
		prog := &plan.Program{Instrs: ins}
		top := 0
		for _, in := range ins {
			top = max(top, in.Out+1)
		}
		for range top {
			prog.SlotType = append(prog.SlotType, ir.F32)
		}
		prog.OutputSlots = []int{ins[len(ins)-1].Out}
		if prog.OutputSlots[0] < 0 {
			prog.OutputSlots[0] = 0
		}
		p.Programs = append(p.Programs, prog)
	}
	return p
}

func src(out int) plan.Instr {
	return plan.Instr{Kind: plan.Source, Label: "x", DType: ir.F32, Shape: []int{4}, Placement: sbp.NdSBP{sbp.B}, Out: out,
		Pos: ir.Pos{Filename: "p.mesh", Line: 1, Column: 1}}
}

func send(arg, shift, tag, line int) plan.Instr {
	return plan.Instr{Kind: plan.Send, Label: "x", DType: ir.F32, Shape: []int{4}, Placement: sbp.NdSBP{sbp.B}, Args: []int{arg}, Out: -1,
		Peer: plan.Peer{Axes: []int{0}, Shift: []int{shift}}, Tag: tag, Pos: ir.Pos{Filename: "p.mesh", Line: line, Column: 1}}
}

func recv(out, shift, tag, line int, shape ...int) plan.Instr {
	if shape == nil {
		shape = []int{4}
	}
	return plan.Instr{Kind: plan.Recv, Label: "x", DType: ir.F32, Shape: shape, Placement: sbp.NdSBP{sbp.B}, Out: out,
		Peer: plan.Peer{Axes: []int{0}, Shift: []int{shift}}, Tag: tag, Pos: ir.Pos{Filename: "p.mesh", Line: line, Column: 1}}
}

func TestVerifyAcceptsARingShift(t *testing.T) {
	// every rank sends to the next and receives from the previous: sends
	// are buffered, so this is not a deadlock
	p := p2p(4, [][]plan.Instr{{src(0), send(0, 1, 7, 2), recv(1, -1, 7, 3)}}, nil)
	require.NoError(t, p.Verify())
}

func TestVerifyFindsADeadlock(t *testing.T) {
	p := p2p(3, [][]plan.Instr{{src(0), recv(1, -1, 0, 2), send(0, 1, 0, 3)}}, nil)
	err := p.Verify()
	require.ErrorContains(t, err, "deadlock")
	require.ErrorContains(t, err, "rank 0 at instruction 1, recv(x) tag 0 (p.mesh:2:1): waits for rank 2")
	require.ErrorContains(t, err, "rank 2 at instruction 1")
}

func TestVerifyFindsAMessageNobodyReceives(t *testing.T) {
	// rank 0 sends twice to rank 1, which receives once
	p := p2p(2, [][]plan.Instr{
		{src(0), send(0, 1, 0, 2), send(0, 1, 0, 3)},
		{recv(0, -1, 0, 4)},
	}, []int{0, 1})
	require.ErrorContains(t, p.Verify(), "rank 0 sends send(x) tag 0 at p.mesh:3:1 to rank 1, which never receives it")
}

func TestVerifyFindsMismatchedTagsAndTypes(t *testing.T) {
	p := p2p(2, [][]plan.Instr{{src(0), send(0, 1, 1, 2)}, {recv(0, -1, 2, 3)}}, []int{0, 1})
	require.ErrorContains(t, p.Verify(), "rank 1 at instruction 0, recv(x) tag 2 (p.mesh:3:1): waits for rank 0")
	p = p2p(2, [][]plan.Instr{{src(0), send(0, 1, 0, 2)}, {recv(0, -1, 0, 3, 8)}}, []int{0, 1})
	require.ErrorContains(t, p.Verify(), "rank 1's recv(x) tag 0 at p.mesh:3:1 expects f32[8] {B}; rank 0 sent f32[4] {B} at p.mesh:2:1")
}

func TestWellFormedCatchesBrokenPrograms(t *testing.T) {
	p := p2p(2, [][]plan.Instr{{recv(0, 1, 0, 1), send(1, 1, 0, 2)}}, nil)
	require.ErrorContains(t, p.WellFormed(), "reads slot 1 of 1")
	p = p2p(2, [][]plan.Instr{{src(0)}}, []int{0, 3})
	require.ErrorContains(t, p.WellFormed(), "rank 1 runs program 3")
	in := src(0)
	in.Placement = sbp.NdSBP{sbp.B, sbp.B}
	p = p2p(2, [][]plan.Instr{{in}}, nil)
	require.ErrorContains(t, p.WellFormed(), "for a mesh of 1 axes")
}

// TestKernelAsOperands: a matmul's transposed arguments get their last
// two dims swapped back (copies: the kernel's shapes are untouched); any
// other kernel's shapes come back as they are.
func TestKernelAsOperands(t *testing.T) {
	k := &plan.Kernel{Op: "matmul", TransB: true, ArgShapes: [][]int{{2, 3, 4}, {2, 5, 4}}}
	require.Equal(t, [][]int{{2, 3, 4}, {2, 4, 5}}, k.AsOperands(k.ArgShapes))
	require.Equal(t, [][]int{{2, 3, 4}, {2, 5, 4}}, k.ArgShapes)
	k.TransA = true
	require.Equal(t, [][]int{{2, 4, 3}, {2, 4, 5}}, k.AsOperands(k.ArgShapes))
	plain := &plan.Kernel{Op: "add", ArgShapes: [][]int{{3}, {3}}}
	require.Equal(t, plain.ArgShapes, plain.AsOperands(plain.ArgShapes))
}
