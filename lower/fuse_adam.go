package lower

import (
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// The Adam fusion pass ("fuseadam"): one instruction for Adam's three.
//
// The training step (package train) writes Adam's update of a parameter
// as three ops: m' = adam_moment(m, g, β1), v' = adam_moment2(v, g, β2),
// p' = adam_update(p, m', v', step, root_bc2, eps, decay). Each is a pass
// over memory: ten parameter-sized streams in all (read m and g, write m';
// read v and g, write v'; read p, m', v', write p'), where one pass that
// reads p, m, v, g once and writes p', m', v' streams seven. On the MLP of
// bench/torch_mlp.sh the three passes were 16–19% of the step (issue 10).
//
// The graph keeps one value per result (value semantics, and every pass
// before this one, stays as it was); this pass merges the three
// instructions that compute them into one Compute instruction of the
// fused kernel adam_fused (ops/optim.go) with three results: Out is p',
// Outs are m' and v' (plan.Instr.Outs). It merges an adam_update with the
// moments it reads when
//   - the moments are an adam_moment and an adam_moment2 of one gradient
//     slot, in the same program, tier (Host) and pipeline action;
//   - all three, and every tensor argument as read, have one placement,
//     shape and dtype, and the dtype is f32 or f64 (a half-precision op
//     rounds each result to its dtype, so the update would read rounded
//     moments that one pass never rounds);
//   - nothing between a moment and the update reads the moment's result
//     (the fused instruction writes it at the update's place), and nothing
//     between them writes a slot the moments read.
//
// The fused instruction takes the update's place. Its results appear
// together, as the runtime allocates them (rt holds every result of an
// instruction before freeing what it frees), and the moments' arguments
// now live until it: each slot a moment read that was freed between the
// moment and the update is freed at the fused instruction instead.
//
// Fresh results would make the fused instruction hold p, m, v, g and p',
// m', v' at once, seven blocks of the parameter where the three ops held
// at most five. So it donates (plan.Instr.Donate, XLA's input/output
// aliasing): p', m' and v' are written into the buffers of p, m and v,
// each where that slot is distinct from the others and g and dies at the
// fused instruction (freed by it, after the frees move: nothing reads it
// later, and it is no output or carried value). Fully donated, the
// instruction holds four blocks and allocates nothing. (Under f16 loss
// scaling a skipped step keeps the old p, m, v, which then live on: no
// donation.)
//
// No rank's peak, device or host, may grow (the gemm fusion's contract
// too). The pass replays the window from the first moment to the update
// both ways, on every rank whose blocks differ, from what the rank holds
// before it (the same either way), in the update's tier and in both
// tiers together (the other tier's replay cannot change: the moments
// read and free only their own tier's slots): before the window the two
// programs run the same instructions, after the update they hold the
// same slots (a donated result takes its argument's block), so a fused
// window that holds nowhere more than the three ops grows no peak. A
// fully donated update passes unless the instructions between its
// moments and it allocate more than a block of the parameter before
// freeing: the three ops hold K + S at the first moment (K held before,
// S the block), the fused program at most K plus the window's own net.
// Where the fused window does hold more (ZeRO's slice of p beside Adam's
// constants: 8 bytes more; fresh results), the pass compares it with the
// rank's unfused peak instead, from one replay of the whole program,
// made only then and only for a program whose ranks all hold alike (else
// the update stays three ops). The pass before donation replayed every
// fused program, and again until no peak grew: +0.05 s on the explain of
// a 96-layer GPT (issue 10 goal 4). The windows of the updates merged in
// one program do not overlap, so each is judged against the program as
// it was. The plan verifier checks that adam_fused writes a result only
// over the argument ops' registration says it runs in place (p' over p,
// m' over m, v' over v).
//
// It runs after the tier and pipeline passes, on every program they left
// (those passes, and InstrValue, see only one-result instructions), and
// before the memory pass, whose replay counts a donated result as no
// allocation. Options.NoFuse skips it with the gemm fusion.
func fuseAdams(p *Plan) error {
	if p.Opts.NoFuse || p.Opts.NoFuseAdam || !hasAdamUpdate(p.Exec) {
		return nil
	}
	// InstrValue follows the spmd program while it is the only one
	// (no pipeline): it loses the merged moments' entries with them
	vals := p.Pipe == nil && len(p.Exec.Programs) == 1 && len(p.InstrValue) == len(p.Exec.Programs[0].Instrs)
	for _, prog := range p.Exec.Programs {
		var iv *[]*ir.Value
		if vals {
			iv = &p.InstrValue
		}
		fuseAdamsIn(p.Exec, prog, iv)
	}
	if p.HostPeak != nil { // the tier pass's, of the programs before
		p.HostPeak = p.Exec.HostPeaks()
	}
	return nil
}

// adamCounts counts the Adam updates of every program, those fused, and
// the instructions that donate an argument's buffer to a result:
// explain's figures.
func adamCounts(p *Plan) (updates, fused, donating int) {
	for _, prog := range p.Exec.Programs {
		for i := range prog.Instrs {
			in := &prog.Instrs[i]
			if in.Donate != nil {
				donating++
			}
			if in.Kind == plan.Compute && in.Kernel.Op == "adam_fused" {
				fused++
			}
			if in.Kind == plan.Compute && (in.Kernel.Op == "adam_update" || in.Kernel.Op == "adam_fused") {
				updates++
			}
		}
	}
	return updates, fused, donating
}

// hasAdamUpdate says whether some program computes an adam_update.
func hasAdamUpdate(p *plan.Plan) bool {
	for _, prog := range p.Programs {
		for i := range prog.Instrs {
			if in := &prog.Instrs[i]; in.Kind == plan.Compute && in.Kernel.Op == "adam_update" {
				return true
			}
		}
	}
	return false
}

// fusion is an update the pass merges: the instructions of the update
// and of its two moments, and the fused instruction's Donate.
type fusion struct {
	u, mi, vi int
	donate    []int
}

// fuseAdamsIn merges every fusible update of one program, and drops the
// merged instructions' entries of vals too when it is given (InstrValue,
// parallel to the program). It decides on every update against the
// program as it is, then merges: the windows of the updates it merges do
// not overlap, so each one's held bytes outside its window stay as they
// were.
func fuseAdamsIn(ex *plan.Plan, prog *plan.Program, vals *[]*ir.Value) {
	producer := make([]int, prog.NumSlots())
	firstRead := make([]int, prog.NumSlots())
	for i := range producer {
		producer[i], firstRead[i] = -1, -1
	}
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		for _, a := range in.Args {
			if firstRead[a] < 0 {
				firstRead[a] = i
			}
		}
		in.Written(func(s int) { producer[s] = i })
	}
	shared := sharedSlots(prog)
	drop := make([]bool, len(prog.Instrs))
	var merge []fusion
	held := &unfusedHeld{ex: ex, prog: prog}
	last := -1 // the last merged update: windows must not overlap
	for u := range prog.Instrs {
		up := &prog.Instrs[u]
		if up.Kind != plan.Compute || up.Kernel.Op != "adam_update" || len(up.Args) != 7 {
			continue
		}
		mi, vi := producer[up.Args[1]], producer[up.Args[2]]
		if mi < 0 || vi < 0 || min(mi, vi) <= last || !fusibleAdam(prog, mi, vi, u, firstRead) {
			continue
		}
		donate := donations(prog, mi, vi, u, shared)
		if !windowFits(ex.Mesh, prog, mi, vi, u, producer, donate, held) {
			continue
		}
		merge = append(merge, fusion{u, mi, vi, donate})
		drop[mi], drop[vi], last = true, true, u
	}
	if len(merge) == 0 {
		return
	}
	prog.Instrs = slices.Clone(prog.Instrs) // the array may be another program's too
	for _, f := range merge {
		prog.Instrs[f.u] = fusedAdam(prog, f.mi, f.vi, f.u, f.donate)
	}
	keep := prog.Instrs[:0] // the copy made above: compacted in place
	var kv []*ir.Value
	for i, in := range prog.Instrs {
		if !drop[i] {
			keep = append(keep, in)
			if vals != nil {
				kv = append(kv, (*vals)[i])
			}
		}
	}
	prog.Instrs = keep
	if vals != nil {
		*vals = kv
	}
}

// donations are the fused instruction's Donate for the update at u with
// its moments at mi and vi: result k (p', m', v') is written over
// argument k (p, m, v) where that slot is distinct from the other two
// and the gradient, and dies by u (freed by an instruction from the
// first moment to u, whose frees move to the fused instruction); -1
// where it does not (under f16 loss scaling a skipped step keeps the old
// p, m, v: they live on) or where the runtime would not write over the
// slot's buffer (shared): a send reads it (a parameter two pipeline
// stages read: the transport may read the buffer until the execution
// ends, MPI's Isend until Flush, and the in-process one hands the peer
// the storage itself), or a collective or recv made it; the plan must
// then count the result fresh, as the rank holds it. Nil when no result
// is donated.
func donations(prog *plan.Program, mi, vi, u int, shared []bool) []int {
	up := &prog.Instrs[u]
	slots := [3]int{up.Args[0], prog.Instrs[mi].Args[0], prog.Instrs[vi].Args[0]}
	g := prog.Instrs[mi].Args[1]
	var donate []int
	for k, s := range slots {
		d := -1
		alone := slices.Index(slots[:], s) == k && !slices.Contains(slots[k+1:], s)
		if alone && s != g && !shared[s] && diesBy(prog, s, min(mi, vi), u) {
			d = k
		}
		donate = append(donate, d)
	}
	if slices.Max(donate) < 0 {
		return nil
	}
	return donate
}

// sharedSlots are the slots of prog whose buffers the runtime never
// writes over (plan.Instr.Shared): never donated.
func sharedSlots(prog *plan.Program) []bool {
	shared := make([]bool, prog.NumSlots())
	for i := range prog.Instrs {
		prog.Instrs[i].Shared(func(s int) { shared[s] = true })
	}
	return shared
}

// diesBy says whether an instruction from lo to u frees slot s.
func diesBy(prog *plan.Program, s, lo, u int) bool {
	for j := lo; j <= u; j++ {
		if slices.Contains(prog.Instrs[j].Free, s) {
			return true
		}
	}
	return false
}

// windowFits says whether fusing the update at u with its moments at mi
// and vi, its results donated, keeps every rank's peak. It replays the
// window from the first moment to u both ways, from what is held before
// it (the same either way), in the update's tier and in both tiers
// together (what the CPU backend's one memory holds; the other tier's
// replay does not change: the moments read and free only their own
// tier's slots). The fused top must be nowhere above the unfused one —
// or, where it is (the window allocates more than a block of the
// parameter before it frees, as ZeRO's slice of p does beside Adam's
// constants), not above the rank's unfused peak, which needs the whole
// program's replay (held): only for a program whose ranks all hold the
// same bytes, else the update stays three ops.
func windowFits(m *mesh.Mesh, prog *plan.Program, mi, vi, u int, producer, donate []int, held *unfusedHeld) bool {
	up := &prog.Instrs[u]
	lo := min(mi, vi)
	moved := append(slices.Clone(prog.Instrs[mi].Args), prog.Instrs[vi].Args...)
	// every rank when some block's size varies, else rank 0 for all
	varying := make([]bool, len(m.Axes))
	for j := lo; j <= u; j++ {
		w := &prog.Instrs[j]
		if w.Out >= 0 {
			sbp.MarkVarying(m, w.Shape, w.Placement, varying)
		}
		for _, s := range w.Free {
			f := &prog.Instrs[producer[s]]
			sbp.MarkVarying(m, f.Shape, f.Placement, varying)
		}
	}
	ranks := 1
	if slices.Contains(varying, true) {
		ranks = m.Size()
	}
	for r := range ranks {
		coord := m.Coord(r)
		bytes := func(w *plan.Instr) int64 {
			return int64(sbp.LocalNumel(m, w.Shape, w.Placement, coord)) * int64(w.DType.Size())
		}
		for _, both := range []bool{false, true} {
			counts := func(w *plan.Instr) bool { return both || w.Host == up.Host }
			fresh := int64(3-donated(donate)) * bytes(up) // the fused instruction's fresh results
			plain, fused := windowTops(prog, lo, u, mi, vi, moved, producer, counts, bytes, fresh)
			if fused > plain && (ranks > 1 || fused > held.slack(lo, up.Host, both)) {
				return false
			}
		}
	}
	return true
}

// unfusedHeld is a program's replay before the fusion, made the first
// time a window needs it (most programs never do: a 96-layer GPT's
// explain paid +0.05 s for the replays of the pass before donation).
type unfusedHeld struct {
	ex   *plan.Plan
	prog *plan.Program
	done bool
	rank int            // a rank that runs prog (-1: none, or ranks differ)
	tier [3]*[2][]int64 // device, host, both: top and after per instruction
}

// slack is how many bytes above what the program's ranks hold before
// instruction lo a window may hold without passing their unfused peak in
// the tier (host, or both tiers), or -1 where the replay cannot say for
// every rank at once.
func (h *unfusedHeld) slack(lo int, host, both bool) int64 {
	if !h.done {
		h.done, h.rank = true, -1
		if h.ex.Uniform(h.prog) {
			for r := range h.ex.Mesh.Size() {
				if h.ex.ProgramOf(r) == h.prog {
					h.rank = r
					break
				}
			}
		}
	}
	if h.rank < 0 {
		return -1
	}
	k := 0
	switch {
	case both:
		k = 2
	case host:
		k = 1
	}
	if h.tier[k] == nil {
		held := [...]func(int) ([]int64, []int64){h.ex.Held, h.ex.HostHeld, h.ex.TotalHeld}[k]
		top, after := held(h.rank)
		h.tier[k] = &[2][]int64{top, after}
	}
	top, after := h.tier[k][0], h.tier[k][1]
	before := int64(0)
	if lo > 0 {
		before = after[lo-1]
	}
	return slices.Max(top) - before
}

// windowTops replays instructions lo..u, counting the slots counts
// admits, from zero: the most held at once by the three ops (plain) and
// by the fused instruction at u, without the moments, whose frees of the
// moments' arguments (moved) happen at u and which allocates fresh bytes
// for the results it does not write over p, m, v (fused).
func windowTops(prog *plan.Program, lo, u, mi, vi int, moved, producer []int, counts func(*plan.Instr) bool, bytes func(*plan.Instr) int64, fresh int64) (plain, fused int64) {
	var cur int64
	for j := lo; j <= u; j++ {
		w := &prog.Instrs[j]
		if w.Out >= 0 && counts(w) {
			cur += int64(1+len(w.Outs)) * bytes(w)
		}
		plain = max(plain, cur)
		for _, s := range w.Free {
			if f := &prog.Instrs[producer[s]]; counts(f) {
				cur -= bytes(f)
			}
		}
	}
	cur = 0
	for j := lo; j < u; j++ {
		w := &prog.Instrs[j]
		if j == mi || j == vi { // gone; their frees happen at u
			continue
		}
		if w.Out >= 0 && counts(w) {
			cur += int64(1+len(w.Outs)) * bytes(w)
		}
		fused = max(fused, cur)
		for _, s := range w.Free {
			if f := &prog.Instrs[producer[s]]; counts(f) && !slices.Contains(moved, s) {
				cur -= bytes(f)
			}
		}
	}
	return plain, max(fused, cur+fresh) // at u: its fresh results, if any
}

// donated counts the results a Donate gives an argument's buffer.
func donated(donate []int) int {
	n := 0
	for _, a := range donate {
		if a >= 0 {
			n++
		}
	}
	return n
}

// fusibleAdam says whether instructions mi (adam_moment), vi
// (adam_moment2) and u (the adam_update reading both) may become one (see
// fuseAdams for the conditions).
func fusibleAdam(prog *plan.Program, mi, vi, u int, firstRead []int) bool {
	m, v, up := &prog.Instrs[mi], &prog.Instrs[vi], &prog.Instrs[u]
	if m.Kind != plan.Compute || m.Kernel.Op != "adam_moment" || v.Kind != plan.Compute || v.Kernel.Op != "adam_moment2" ||
		len(m.Args) != 3 || len(v.Args) != 3 || m.Args[1] != v.Args[1] || mi >= u || vi >= u {
		return false
	}
	if dt := up.DType; (dt != ir.F32 && dt != ir.F64) || m.DType != dt || v.DType != dt {
		return false
	}
	for _, in := range []*plan.Instr{m, v} {
		if in.Host != up.Host || in.Act != up.Act || !slices.Equal(in.Shape, up.Shape) || !in.Placement.Equal(up.Placement) || len(in.Outs) > 0 {
			return false
		}
	}
	tensors := []struct {
		in   *plan.Instr
		args int
	}{{m, 2}, {v, 2}, {up, 3}}
	for _, t := range tensors {
		for k := range t.args {
			if !t.in.ArgPlace[k].Equal(up.Placement) || !slices.Equal(t.in.Kernel.ArgShapes[k], up.Shape) || t.in.Kernel.ArgDTypes[k] != up.DType {
				return false
			}
		}
	}
	if firstRead[m.Out] != u || firstRead[v.Out] != u {
		return false
	}
	return !rewritten(prog, m.Args, mi, u) && !rewritten(prog, v.Args, vi, u)
}

// rewritten says whether an instruction after from and before to writes
// one of slots (read at from, they would not hold the same at to).
func rewritten(prog *plan.Program, slots []int, from, to int) bool {
	hit := false
	for j := from + 1; j < to; j++ {
		prog.Instrs[j].Written(func(s int) { hit = hit || slices.Contains(slots, s) })
	}
	return hit
}

// fusedAdam is the one instruction that replaces mi, vi and u: the
// update's, reading (p, m, v, g, β1, β2, step, root_bc2, eps, decay) and
// writing p' (Out), m' and v' (Outs), freeing what the three freed. Frees
// of the moments' arguments between a moment and the update move to it.
func fusedAdam(prog *plan.Program, mi, vi, u int, donate []int) plan.Instr {
	m, v, up := &prog.Instrs[mi], &prog.Instrs[vi], &prog.Instrs[u]
	// each argument of the fused kernel: which instruction's, which position
	from := []struct {
		in *plan.Instr
		k  int
	}{{up, 0}, {m, 0}, {v, 0}, {m, 1}, {m, 2}, {v, 2}, {up, 3}, {up, 4}, {up, 5}, {up, 6}}
	f := *up
	k := plan.Kernel{Op: "adam_fused", DType: up.Kernel.DType, Shape: slices.Clone(up.Kernel.Shape)}
	f.Args, f.ArgPlace = nil, nil
	for _, a := range from {
		f.Args = append(f.Args, a.in.Args[a.k])
		f.ArgPlace = append(f.ArgPlace, a.in.ArgPlace[a.k].Clone())
		k.ArgDTypes = append(k.ArgDTypes, a.in.Kernel.ArgDTypes[a.k])
		k.ArgShapes = append(k.ArgShapes, slices.Clone(a.in.Kernel.ArgShapes[a.k]))
	}
	f.Kernel = &k
	f.Outs = []int{m.Out, v.Out}
	f.Donate = donate // p' over p, m' over m, v' over v, where they die
	read := append(slices.Clone(m.Args), v.Args...)
	f.Free = slices.Clone(up.Free)
	for j := min(mi, vi); j < u; j++ {
		in := &prog.Instrs[j]
		gone := j == mi || j == vi // dropped: whatever it freed moves
		if !gone && !slices.ContainsFunc(in.Free, func(s int) bool { return slices.Contains(read, s) }) {
			continue
		}
		// the lists share one array (freeAfterLastUse): filter into a new one
		var kept []int
		for _, s := range in.Free {
			if gone || slices.Contains(read, s) {
				if !slices.Contains(f.Free, s) {
					f.Free = append(f.Free, s)
				}
				continue
			}
			kept = append(kept, s)
		}
		in.Free = kept
	}
	return f
}

// verifyFusedAdams checks every fused Adam instruction of every program:
// ten arguments, the four tensors of the result's shape, dtype and
// placement and the six scalars of rank 0, and two further results.
func verifyFusedAdams(p *Plan) error {
	for _, prog := range p.Exec.Programs {
		for i := range prog.Instrs {
			in := &prog.Instrs[i]
			if in.Kind != plan.Compute || in.Kernel.Op != "adam_fused" {
				continue
			}
			k := in.Kernel
			if len(in.Args) != 10 || len(k.ArgShapes) != 10 || len(in.Outs) != 2 {
				return errFusedAdam(in, "adam_fused with %d arguments and %d results, not 10 and 3", len(in.Args), 1+len(in.Outs))
			}
			for j, s := range k.ArgShapes {
				tensor := j < 4
				if tensor && (!slices.Equal(s, in.Shape) || k.ArgDTypes[j] != in.DType || !in.ArgPlace[j].Equal(in.Placement)) {
					return errFusedAdam(in, "argument %d is %s%s %s, the results %s%s %s", j+1, k.ArgDTypes[j], ir.ShapeString(s), in.ArgPlace[j], in.DType, ir.ShapeString(in.Shape), in.Placement)
				}
				if !tensor && len(s) != 0 {
					return errFusedAdam(in, "argument %d has shape %s, not a scalar", j+1, ir.ShapeString(s))
				}
			}
		}
	}
	return nil
}

// errFusedAdam is the verifier's complaint about a fused instruction.
func errFusedAdam(in *plan.Instr, format string, a ...any) error {
	return fmt.Errorf("%s at %s: %s", in.Label, ir.FormatPos(in.Pos), fmt.Sprintf(format, a...))
}
