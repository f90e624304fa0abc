package plan

import (
	"github.com/meshrun/meshrun/internal/size"
	"github.com/meshrun/meshrun/sbp"
)

// Peak replays rank r's allocations in device memory: every slot holds
// its local block from the instruction that writes it until the
// instruction that frees it. The runtime's accounting counts the same
// tensors, so its measured peak equals this one. Slots in the host tier
// (Instr.Host) are not device memory: HostPeak counts them.
func (p *Plan) Peak(r int) int64 {
	return p.peakIn(r, false)
}

// HostPeak is Peak for rank r's host tier: the most bytes its host memory
// holds at once (0 without offload).
func (p *Plan) HostPeak(r int) int64 {
	return p.peakIn(r, true)
}

func (p *Plan) peakIn(r int, host bool) int64 {
	var peak int64
	p.replayTier(r, host, func(_ int, cur int64) bool {
		peak = max(peak, cur)
		return true
	})
	return peak
}

// HasHost reports whether some program keeps slots in the host tier.
func (p *Plan) HasHost() bool {
	for _, prog := range p.Programs {
		for i := range prog.Instrs {
			if prog.Instrs[i].Host {
				return true
			}
		}
	}
	return false
}

// Peaks is Peak of every rank. A rank's peak depends only on its program
// and the sizes of its blocks, which depend only on its coordinates on the
// axes that split some block unevenly (sbp.MarkVarying); ranks that agree
// on both share one replay, so 4096 ranks of evenly split programs cost
// one replay per program.
func (p *Plan) Peaks() []int64 { return p.peaks(false) }

// HostPeaks is HostPeak of every rank, shared as Peaks shares.
func (p *Plan) HostPeaks() []int64 { return p.peaks(true) }

func (p *Plan) peaks(host bool) []int64 {
	peaks := make([]int64, p.Mesh.Size())
	varying := make(map[*Program][]bool)
	first := make(map[peakKey]int) // the rank whose replay the others reuse
	for r := range peaks {
		prog := p.ProgramOf(r)
		v, ok := varying[prog]
		if !ok {
			v = p.varyingAxes(prog)
			varying[prog] = v
		}
		k := peakKey{prog, p.coordOn(r, v)}
		if f, ok := first[k]; ok {
			peaks[r] = peaks[f]
			continue
		}
		first[k] = r
		peaks[r] = p.peakIn(r, host)
	}
	return peaks
}

// peakKey identifies ranks with equal peaks: the program and the
// coordinates on the axes that vary its block sizes (row-major index).
type peakKey struct {
	prog  *Program
	coord int
}

// varyingAxes marks the axes whose coordinate changes the size of some
// block prog allocates.
func (p *Plan) varyingAxes(prog *Program) []bool {
	v := make([]bool, len(p.Mesh.Axes))
	for i := range prog.Instrs {
		if in := &prog.Instrs[i]; in.Out >= 0 {
			sbp.MarkVarying(p.Mesh, in.Shape, in.Placement, v)
		}
	}
	return v
}

// coordOn is rank r's row-major index over the marked axes alone.
func (p *Plan) coordOn(r int, marked []bool) int {
	idx := 0
	for a, c := range p.Mesh.Coord(r) {
		if marked[a] {
			idx = idx*p.Mesh.Axes[a].Size + c
		}
	}
	return idx
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
	p.replayTier(r, false, visit)
}

// replayTier is replay over the slots of one tier (host or device); a
// slot of the other tier counts nothing.
func (p *Plan) replayTier(r int, host bool, visit func(i int, cur int64) bool) {
	prog := p.ProgramOf(r)
	var cur int64
	slot := make([]int64, prog.NumSlots())
	coord := p.Mesh.Coord(r)
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		if in.Out >= 0 && in.Host == host {
			n := int64(sbp.LocalNumel(p.Mesh, in.Shape, in.Placement, coord))
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
