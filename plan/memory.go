package plan

import (
	"github.com/meshrun/meshrun/sbp"
)

// Peak replays rank r's allocations: every slot holds its local block from
// the instruction that writes it until the instruction that frees it. The
// runtime's accounting counts the same tensors, so its measured peak
// equals this one.
func (p *Plan) Peak(r int) int64 {
	prog := p.ProgramOf(r)
	var cur, peak int64
	size := make([]int64, prog.NumSlots())
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		if in.Out >= 0 {
			n := int64(sbp.Layout(p.Mesh, in.Shape, in.Placement, r).Numel())
			size[in.Out] = n * int64(in.DType.Size())
			cur += size[in.Out]
			peak = max(peak, cur)
		}
		for _, s := range in.Free {
			cur -= size[s]
		}
	}
	return peak
}
