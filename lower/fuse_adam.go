package lower

import (
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
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
// moment and the update is freed at the fused instruction instead. The
// memory pass replays that program, so explain's peaks and the runtime's
// measured ones still count the same allocations.
//
// The fused instruction holds p, m, v, g and its three results at once,
// seven blocks of the parameter, where the separate ops held at most five
// (the first moment frees m before v' is made). So that no rank's peak
// grows (the contract of the gemm fusion too), the pass replays the fused
// programs and leaves alone each update whose fused instruction would
// take its rank's device or host memory above the unfused peak (and every
// update when a peak grows at another instruction, a lifetime the fusion
// lengthened), then replays again until no peak grows. Where the
// optimizer step is a program's peak (small activations: bench/'s MLP,
// most shipped training examples) its largest updates therefore stay
// three ops; where activations dominate (a GPT's backward) every update
// is fused.
//
// It runs after the tier and pipeline passes, on every program they left
// (those passes, and InstrValue, see only one-result instructions), and
// before the memory pass. Options.NoFuse skips it with the gemm fusion.
func fuseAdams(p *Plan) error {
	if p.Opts.NoFuse || p.Opts.NoFuseAdam || !hasAdamUpdate(p.Exec) {
		return nil // (no replay for a plan without Adam: it costs)
	}
	// InstrValue follows the spmd program while it is the only one
	// (no pipeline): it loses the merged moments' entries with them
	vals := p.Pipe == nil && len(p.Exec.Programs) == 1 && len(p.InstrValue) == len(p.Exec.Programs[0].Instrs)
	before := make([]plan.Program, len(p.Exec.Programs))
	for i, prog := range p.Exec.Programs {
		before[i] = *prog // fuseAdamsIn writes to copies of the arrays
	}
	values := p.InstrValue
	peaks, host := p.Exec.Peaks(), hostPeaks(p.Exec)
	skip := make([]map[int]bool, len(before)) // per program: updates left alone
	for i := range skip {
		skip[i] = map[int]bool{}
	}
	for {
		fused := false
		origin := make([][]int, len(before)) // per program: each instruction's index before
		for i, prog := range p.Exec.Programs {
			*prog = before[i]
			var iv *[]*ir.Value
			if vals {
				p.InstrValue = values
				iv = &p.InstrValue
			}
			var f bool
			f, origin[i] = fuseAdamsIn(prog, iv, skip[i])
			fused = fused || f
		}
		if !fused {
			return nil
		}
		n := skipped(skip)
		grew, now := growsPeak(p, peaks, host, origin, skip)
		if !grew {
			p.Peak = now // the memory pass's figure, replayed already
			break
		}
		if skipped(skip) == n { // a peak grew elsewhere (a lifetime the fusion
			// lengthened): leave every update of every program alone (of
			// all programs, not only those whose peak grew: rare, and the
			// simplest rule that ends the loop)
			for i, prog := range p.Exec.Programs {
				for j := range prog.Instrs {
					if len(prog.Instrs[j].Outs) > 0 {
						skip[i][origin[i][j]] = true
					}
				}
			}
		}
	}
	if p.HostPeak != nil { // the tier pass's, of the programs before
		p.HostPeak = p.Exec.HostPeaks()
	}
	return nil
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

// skipped counts the updates left alone.
func skipped(skip []map[int]bool) int {
	n := 0
	for _, m := range skip {
		n += len(m)
	}
	return n
}

func hostPeaks(p *plan.Plan) []int64 {
	if !p.HasHost() {
		return nil
	}
	return p.HostPeaks()
}

// growsPeak says whether the fused programs raise some rank's peak above
// peaks (device) or host (host tier), and returns their device peaks; it
// adds to skip, by their index in
// the unfused program, each fused instruction whose allocation takes its
// rank's tier above its old peak.
func growsPeak(p *Plan, peaks, host []int64, origin [][]int, skip []map[int]bool) (bool, []int64) {
	progIndex := map[*plan.Program]int{}
	for i, prog := range p.Exec.Programs {
		progIndex[prog] = i
	}
	grew := false
	check := func(old, now []int64, held func(r int) ([]int64, []int64)) {
		seen := map[[3]int64]bool{} // ranks of one program with equal peaks replay alike
		for r := range now {
			pi := progIndex[p.Exec.ProgramOf(r)]
			k := [3]int64{int64(pi), old[r], now[r]}
			if now[r] <= old[r] || seen[k] {
				continue
			}
			seen[k], grew = true, true
			top, _ := held(r)
			for j, in := range p.Exec.Programs[pi].Instrs {
				if len(in.Outs) > 0 && top[j] > old[r] {
					skip[pi][origin[pi][j]] = true
				}
			}
		}
	}
	now := p.Exec.Peaks()
	check(peaks, now, p.Exec.Held)
	if host != nil {
		check(host, p.Exec.HostPeaks(), p.Exec.HostHeld)
	}
	return grew, now
}

// fuseAdamsIn merges every fusible update of one program but those at
// the indices in skip, and drops the merged instructions' entries of vals
// too when it is given (InstrValue, parallel to the program). It reports
// whether it merged any, and each remaining instruction's index before.
func fuseAdamsIn(prog *plan.Program, vals *[]*ir.Value, skip map[int]bool) (bool, []int) {
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
	drop := make([]bool, len(prog.Instrs))
	fused := false
	for u := range prog.Instrs {
		up := &prog.Instrs[u]
		if skip[u] || up.Kind != plan.Compute || up.Kernel.Op != "adam_update" || len(up.Args) != 7 {
			continue
		}
		mi, vi := producer[up.Args[1]], producer[up.Args[2]]
		if mi < 0 || vi < 0 || drop[mi] || drop[vi] || !fusibleAdam(prog, mi, vi, u, firstRead) {
			continue
		}
		if !fused { // writes go to a copy: fuseAdams may return to the old program
			prog.Instrs = slices.Clone(prog.Instrs)
		}
		prog.Instrs[u] = fusedAdam(prog, mi, vi, u)
		drop[mi], drop[vi], fused = true, true, true
	}
	if !fused {
		return false, nil
	}
	keep := prog.Instrs[:0] // the copy made above: compacted in place
	origin := make([]int, 0, len(prog.Instrs))
	var kv []*ir.Value
	for i, in := range prog.Instrs {
		if !drop[i] {
			keep = append(keep, in)
			origin = append(origin, i)
			if vals != nil {
				kv = append(kv, (*vals)[i])
			}
		}
	}
	prog.Instrs = keep
	if vals != nil {
		*vals = kv
	}
	return true, origin
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
func fusedAdam(prog *plan.Program, mi, vi, u int) plan.Instr {
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
