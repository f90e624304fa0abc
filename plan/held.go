package plan

import (
	"github.com/meshrun/meshrun/internal/size"
	"github.com/meshrun/meshrun/sbp"
)

// Held is Peak's replay of rank r's device memory kept per instruction:
// the bytes held once each instruction has allocated its output (top)
// and once it has freed what it frees (after). Package planner composes
// a pipeline rank's memory from its actions' profiles.
func (p *Plan) Held(r int) (top, after []int64) {
	prog := p.ProgramOf(r)
	top, after = make([]int64, len(prog.Instrs)), make([]int64, len(prog.Instrs))
	slot := make([]int64, prog.NumSlots())
	coord := p.Mesh.Coord(r)
	var cur int64
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		if in.Out >= 0 && deviceTier.holds(in) {
			slot[in.Out] = int64(sbp.LocalNumel(p.Mesh, in.Shape, in.Placement, coord)) * int64(in.DType.Size())
			cur = size.AddBytes(cur, slot[in.Out])
		}
		top[i] = cur
		for _, s := range in.Free {
			cur -= slot[s]
		}
		after[i] = cur
	}
	return top, after
}
