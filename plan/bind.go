package plan

import (
	"fmt"

	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/sbp"
)

// Bound is what one instruction means on one rank: the local blocks it
// reads and writes, and whom it talks to.
type Bound struct {
	In  []sbp.Block // the arguments' blocks as read
	Out sbp.Block   // the result's block (Send: the block sent)
	// Members are a collective's ranks in ring order, Index this rank's
	// position among them (for a local step: its coordinate on the step's
	// axis).
	Members []int
	Index   int
	// Lens is, for a step that gathers, scatters or exchanges along a dim,
	// every member's block length along it (uneven splits included): the
	// From dim for an all-gather, the To dim otherwise.
	Lens []int
	// CatLens is, for an all-to-all, every member's block length along the
	// dim it concatenates (the From split's dim).
	CatLens []int
	// Peer is the other rank of a Send or Recv.
	Peer int
}

// RankProgram is a program bound to one rank.
type RankProgram struct {
	Rank   int
	Prog   *Program
	Instrs []Bound // parallel to Prog.Instrs
}

// Bind computes rank r's local facts for every instruction of its program.
func (p *Plan) Bind(r int) (*RankProgram, error) {
	if r < 0 || r >= p.Mesh.Size() {
		return nil, fmt.Errorf("rank %d is outside the mesh %s (%d ranks)", r, p.Mesh, p.Mesh.Size())
	}
	prog := p.ProgramOf(r)
	rp := &RankProgram{Rank: r, Prog: prog, Instrs: make([]Bound, len(prog.Instrs))}
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		b := &rp.Instrs[i]
		b.Out = sbp.Layout(p.Mesh, in.Shape, in.Placement, r)
		b.In = make([]sbp.Block, len(in.ArgPlace))
		for j, pl := range in.ArgPlace {
			shape := in.Shape
			if in.Kernel != nil {
				shape = in.Kernel.ArgShapes[j]
			}
			b.In[j] = sbp.Layout(p.Mesh, shape, pl, r)
		}
		switch in.Kind {
		case Local:
			b.Index = p.Mesh.Coord(r)[in.Step.Axis]
		case Collective:
			if in.Group < 0 || in.Group >= len(p.Groups) {
				return nil, fmt.Errorf("instruction %d (%s) uses group %d; the plan declares %d", i, in.Name(), in.Group, len(p.Groups))
			}
			b.Members = p.Mesh.Group(r, p.Groups[in.Group].Axes...)
			b.Index = indexOf(b.Members, r)
			b.Lens = stepLens(p.Mesh, in.Shape, in.Step, b.Members)
			if in.Step.Kind == sbp.AllToAll {
				b.CatLens = dimLens(p.Mesh, in.Shape, in.Step.From, in.Step.From[in.Step.Axis].Dim, b.Members)
			}
		case Send, Recv:
			peer, err := PeerOf(p.Mesh, r, in.Peer)
			if err != nil {
				return nil, fmt.Errorf("instruction %d (%s): %v", i, in.Name(), err)
			}
			b.Peer = peer
		}
	}
	return rp, nil
}

// PeerOf is the rank at r's coordinate shifted by p; shifts wrap around
// (a ring), so every rank has a peer.
func PeerOf(m *mesh.Mesh, r int, p Peer) (int, error) {
	if len(p.Axes) != len(p.Shift) {
		return 0, fmt.Errorf("peer has %d axes and %d shifts", len(p.Axes), len(p.Shift))
	}
	c := m.Coord(r)
	for i, a := range p.Axes {
		if a < 0 || a >= m.NumAxes() {
			return 0, fmt.Errorf("peer shifts along axis %d; the mesh has %d", a, m.NumAxes())
		}
		n := m.Axes[a].Size
		c[a] = ((c[a]+p.Shift[i])%n + n) % n
	}
	return m.Device(c), nil
}

func indexOf(xs []int, x int) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// stepLens lists the group members' block lengths along the dim a step
// cuts or joins (nil for steps that need none).
func stepLens(m *mesh.Mesh, shape []int, st *sbp.Step, members []int) []int {
	pl, dim := st.To, -1
	switch st.Kind {
	case sbp.AllGather:
		pl, dim = st.From, st.From[st.Axis].Dim
	case sbp.ReduceScatter, sbp.AllToAll:
		dim = st.To[st.Axis].Dim
	}
	if dim < 0 {
		return nil
	}
	return dimLens(m, shape, pl, dim, members)
}

// dimLens lists the members' block lengths along dim under pl.
func dimLens(m *mesh.Mesh, shape []int, pl sbp.NdSBP, dim int, members []int) []int {
	out := make([]int, len(members))
	for i, d := range members {
		out[i] = sbp.Layout(m, shape, pl, d).Len[dim]
	}
	return out
}
