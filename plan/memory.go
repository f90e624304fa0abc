package plan

import (
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/internal/size"
	"github.com/meshrun/meshrun/sbp"
)

// Peak replays rank r's allocations in device memory: every slot holds
// its local block from the instruction that writes it until the
// instruction that frees it. The runtime's accounting counts the same
// tensors, so its measured peak equals this one. Slots in the host tier
// (Instr.Host) are not device memory: HostPeak counts them.
func (p *Plan) Peak(r int) int64 {
	return p.peakIn(r, deviceTier)
}

// HostPeak is Peak for rank r's host tier: the most bytes its host memory
// holds at once (0 without offload).
func (p *Plan) HostPeak(r int) int64 {
	return p.peakIn(r, hostTier)
}

// TotalPeak is Peak over both tiers (see TotalPeaks).
func (p *Plan) TotalPeak(r int) int64 {
	return p.peakIn(r, bothTiers)
}

// tier selects the slots a replay counts.
type tier uint8

const (
	deviceTier tier = iota
	hostTier
	bothTiers // one memory holding both, as the CPU backend's host tier shares the machine's RAM
)

func (t tier) holds(in *Instr) bool { return t == bothTiers || in.Host == (t == hostTier) }

func (p *Plan) peakIn(r int, t tier) int64 {
	var peak int64
	p.replayTier(r, t, func(_ int, cur int64) bool {
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
func (p *Plan) Peaks() []int64 { return p.peaks(deviceTier) }

// HostPeaks is HostPeak of every rank, shared as Peaks shares.
func (p *Plan) HostPeaks() []int64 { return p.peaks(hostTier) }

// TotalPeaks is every rank's peak of device and host tier together: what
// one memory holding both (the CPU backend's, where the host tier is the
// same RAM) must hold at once. Shared as Peaks shares.
func (p *Plan) TotalPeaks() []int64 { return p.peaks(bothTiers) }

func (p *Plan) peaks(t tier) []int64 {
	peaks := make([]int64, p.Mesh.Size())
	sizes := make(map[*Program]*blockSizes)
	first := make(map[peakKey]int)   // the rank whose replay the others reuse
	byBlocks := make(map[string]int) // the same, by the blocks' sizes
	for r := range peaks {
		prog := p.ProgramOf(r)
		bs, ok := sizes[prog]
		if !ok {
			bs = p.newBlockSizes(prog, r, t)
			sizes[prog] = bs
		}
		k := peakKey{prog, p.coordOn(r, bs.varying)}
		if f, ok := first[k]; ok {
			peaks[r] = peaks[f]
			continue
		}
		first[k] = r
		numels := bs.numels(p, r)
		bk := fmt.Sprintf("%p %v", prog, numels)
		if f, ok := byBlocks[bk]; ok {
			peaks[r] = peaks[f]
			continue
		}
		byBlocks[bk] = r
		peaks[r] = bs.peak(numels)
	}
	return peaks
}

// blockSizes are the bytes each result of each instruction of a program
// allocates in one tier (an instruction with several results, Instr.Outs,
// allocates that many times over), as replayTier counts them, computed once per program. Only the
// blocks that an uneven split makes depend on the rank are sized per
// rank, once per distinct shape and placement among them; ranks whose
// sizes of those agree share one replay. (A mesh of 4096 ranks whose
// micro-batch of 64 rows splits over 512 of them has two kinds of rank,
// with a row and without; replaying the program for each of the 512
// coordinates, sizing every instruction each time, was most of lowering's
// time.)
type blockSizes struct {
	prog    *Program
	tier    tier
	varying []bool   // the axes that vary some block's size
	bytes   []int64  // per instruction: the bytes each of its results allocates (0: none)
	uneven  []int    // the instructions whose bytes depend on the rank
	kind    []int    // per uneven instruction: its index in kinds
	kinds   []*Instr // one instruction per distinct shape and placement
}

func (p *Plan) newBlockSizes(prog *Program, r int, t tier) *blockSizes {
	bs := &blockSizes{prog: prog, tier: t, varying: p.varyingAxes(prog), bytes: make([]int64, len(prog.Instrs))}
	mark := make([]bool, len(p.Mesh.Axes))
	coord := p.Mesh.Coord(r)
	seen := map[string]int{}
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		if in.Out < 0 || !t.holds(in) {
			continue
		}
		clear(mark)
		sbp.MarkVarying(p.Mesh, in.Shape, in.Placement, mark)
		if !slices.Contains(mark, true) {
			bs.bytes[i] = int64(sbp.LocalNumel(p.Mesh, in.Shape, in.Placement, coord)) * int64(in.DType.Size())
			continue
		}
		key := fmt.Sprint(in.Shape, in.Placement)
		k, ok := seen[key]
		if !ok {
			k = len(bs.kinds)
			seen[key] = k
			bs.kinds = append(bs.kinds, in)
		}
		bs.uneven = append(bs.uneven, i)
		bs.kind = append(bs.kind, k)
	}
	return bs
}

// numels are rank r's element counts of each distinct uneven block.
func (bs *blockSizes) numels(p *Plan, r int) []int {
	coord := p.Mesh.Coord(r)
	out := make([]int, len(bs.kinds))
	for k, in := range bs.kinds {
		out[k] = sbp.LocalNumel(p.Mesh, in.Shape, in.Placement, coord)
	}
	return out
}

// peak is the peak of a rank with the given uneven blocks' element
// counts: replayTier's walk over precomputed sizes.
func (bs *blockSizes) peak(numels []int) int64 {
	for j, i := range bs.uneven {
		bs.bytes[i] = int64(numels[bs.kind[j]]) * int64(bs.prog.Instrs[i].DType.Size())
	}
	var cur, peak int64
	slot := make([]int64, bs.prog.NumSlots())
	for i := range bs.prog.Instrs {
		in := &bs.prog.Instrs[i]
		if in.Out >= 0 && bs.tier.holds(in) {
			hold(in, slot, bs.bytes[i], &cur)
			peak = max(peak, cur)
		}
		for _, s := range in.Free {
			cur -= slot[s]
		}
	}
	return peak
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
	p.replayTier(r, deviceTier, visit)
}

// replayTier is replay over the slots of one tier (host or device); a
// slot of the other tier counts nothing.
func (p *Plan) replayTier(r int, t tier, visit func(i int, cur int64) bool) {
	prog := p.ProgramOf(r)
	p.walkTier(r, t, func(i int, top, _ int64) bool {
		return prog.Instrs[i].Out < 0 || !t.holds(&prog.Instrs[i]) || visit(i, top)
	})
}

// walkTier is replayTier at every instruction: the bytes held once it
// has allocated its output (top) and once it has freed what it frees
// (after).
func (p *Plan) walkTier(r int, t tier, visit func(i int, top, after int64) bool) {
	prog := p.ProgramOf(r)
	var cur int64
	slot := make([]int64, prog.NumSlots())
	coord := p.Mesh.Coord(r)
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		if in.Out >= 0 && t.holds(in) {
			n := int64(sbp.LocalNumel(p.Mesh, in.Shape, in.Placement, coord))
			hold(in, slot, n*int64(in.DType.Size()), &cur)
		}
		top := cur
		for _, s := range in.Free {
			cur -= slot[s]
		}
		if !visit(i, top, cur) {
			return
		}
	}
}

// hold counts an instruction's results in the replay: each a block of
// bytes (every result has Out's block, Instr.Outs), allocated afresh, or
// a donated argument's block moved to it (Instr.Donate): the result slot
// takes the argument slot's bytes and the argument slot none, so neither
// the allocation nor the argument's free (in the instruction's Free)
// changes cur.
func hold(in *Instr, slot []int64, bytes int64, cur *int64) {
	k := 0
	in.Written(func(s int) {
		if a, ok := in.DonatedArg(k); ok {
			slot[s], slot[a] = slot[a], 0
		} else {
			slot[s] = bytes
			*cur = size.AddBytes(*cur, bytes)
		}
		k++
	})
}
