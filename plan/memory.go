package plan

import (
	"github.com/meshrun/meshrun/internal/size"
	"github.com/meshrun/meshrun/sbp"
)

// Peak replays rank r's allocations: every slot holds its local block from
// the instruction that writes it until the instruction that frees it. The
// runtime's accounting counts the same tensors, so its measured peak
// equals this one.
func (p *Plan) Peak(r int) int64 {
	var peak int64
	p.replay(r, func(_ int, cur int64) bool {
		peak = max(peak, cur)
		return true
	})
	return peak
}

// FirstOver is the first instruction of rank r after which the rank holds
// more than budget bytes, and what it holds then; ok is false when the
// rank never does. That instruction's value is the one that does not fit.
func (p *Plan) FirstOver(r int, budget int64) (instr int, held int64, ok bool) {
	p.replay(r, func(i int, cur int64) bool {
		if cur > budget {
			instr, held, ok = i, cur, true
			return false
		}
		return true
	})
	return instr, held, ok
}

// replay walks rank r's program, calling visit after each allocation with
// the instruction's index and the bytes then held, until visit returns
// false. Every block is at most size.MaxElements elements of at most 8
// bytes (the checker admits nothing larger); the running sum saturates
// (size.AddBytes) rather than wrap, so a program of very many such blocks
// reads as over every budget, never under.
func (p *Plan) replay(r int, visit func(i int, cur int64) bool) {
	prog := p.ProgramOf(r)
	var cur int64
	slot := make([]int64, prog.NumSlots())
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		if in.Out >= 0 {
			n := int64(sbp.Layout(p.Mesh, in.Shape, in.Placement, r).Numel())
			slot[in.Out] = n * int64(in.DType.Size())
			cur = size.AddBytes(cur, slot[in.Out])
			if !visit(i, cur) {
				return
			}
		}
		for _, s := range in.Free {
			cur -= slot[s]
		}
	}
}
