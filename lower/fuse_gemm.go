package lower

import (
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
)

// The gemm fusion pass ("fuse"): hand transposes to the GEMM's flags.
//
// Autodiff writes a matmul's gradients with explicit transposes (dA =
// dC·transpose(B), dB = transpose(A)·dC), and attention reads kᵀ; the
// spmd program then materialises each transpose into a slot of its own
// before the matmul reads it: a copy of the operand, 5–10% of an MLP's
// step on the CPU (issue 10). BLAS reads either operand transposed for
// free (its packing handles both layouts), so this pass drops every
// transpose that
//   - swaps the last two dims and keeps the others (a matrix transpose,
//     batched or not),
//   - has exactly one reader in the program, a matmul (not an output, a
//     carried value, or a second reader), and
//   - runs in the same memory tier as that matmul,
//
// and makes the matmul read the transpose's argument itself, with
// plan.Kernel.TransA or TransB set and that argument's stored shape and
// placement (a Compute instruction maps local blocks to local blocks, so
// a rank's block of the transposed value is the transpose of its block of
// the argument, and the flag reproduces it exactly).
//
// Memory: the transposed slot disappears; the argument now lives until
// the matmul instead of until the transpose. Both hold the same bytes
// (same dtype and element count), so between the two instructions the
// rank holds the argument where it held the transposed copy, and no peak
// ever grows; where the argument outlived the matmul anyway, the copy's
// bytes are simply saved. The pass runs right after spmd, on its one
// program (before the tier and pipeline passes, which keep InstrValue's
// per-instruction values: the pass deletes the dropped instructions'
// entries with them), recomputes every slot's last use, and the memory
// pass then replays the fused program: explain's peaks and the runtime's
// measured ones count the same instructions. Options.NoFuse skips it (the
// fused-versus-unfused tests).
func fuseGemms(p *Plan) error {
	if p.Opts.NoFuse {
		return nil
	}
	if len(p.Exec.Programs) != 1 || len(p.InstrValue) != len(p.Exec.Programs[0].Instrs) {
		return fmt.Errorf("%w: the gemm fusion runs on the spmd program, before any pass splits it", ErrInternal)
	}
	prog := p.Exec.Programs[0]
	reads := slotReads(prog)
	producer := make([]int, prog.NumSlots())
	for i := range producer {
		producer[i] = -1
	}
	drop := make([]bool, len(prog.Instrs))
	fused := false
	for j := range prog.Instrs {
		in := &prog.Instrs[j]
		if in.Out >= 0 {
			producer[in.Out] = j
		}
		if in.Kind != plan.Compute || in.Kernel.Op != "matmul" || len(in.Args) != 2 {
			continue
		}
		for side := range 2 {
			s := in.Args[side]
			i := producer[s]
			if i < 0 || reads[s] != 1 || !fusibleTranspose(&prog.Instrs[i]) || prog.Instrs[i].Host != in.Host {
				continue
			}
			fuseOperand(in, side, &prog.Instrs[i])
			drop[i], fused = true, true
		}
	}
	if !fused {
		return nil
	}
	keep := prog.Instrs[:0]
	vals := p.InstrValue[:0]
	for i, in := range prog.Instrs {
		if !drop[i] {
			keep = append(keep, in)
			vals = append(vals, p.InstrValue[i])
		}
	}
	prog.Instrs, p.InstrValue = keep, vals
	for i := range prog.Instrs {
		prog.Instrs[i].Free = nil
	}
	freeAfterLastUse(prog)
	return nil
}

// slotReads counts each slot's readers; an output or carried slot counts
// one more (it is read after the program).
func slotReads(prog *plan.Program) []int {
	reads := make([]int, prog.NumSlots())
	for _, in := range prog.Instrs {
		for _, a := range in.Args {
			reads[a]++
		}
	}
	for _, s := range append(slices.Clone(prog.OutputSlots), prog.CarrySlots...) {
		if s >= 0 {
			reads[s]++
		}
	}
	return reads
}

// fusibleTranspose says whether in is a Compute transpose of the last two
// dims, the others kept in place.
func fusibleTranspose(in *plan.Instr) bool {
	if in.Kind != plan.Compute || in.Kernel.Op != "transpose" || len(in.Args) != 1 {
		return false
	}
	return swapsLastTwo(in.Kernel.Attrs.Perm) // explain_blocks.go
}

// fuseOperand makes matmul mm read transpose tr's argument in place of
// tr's result, on side 0 (A) or 1 (B). The slices it changes are copied
// first: ArgPlace is the inferred signature's, which choices share.
func fuseOperand(mm *plan.Instr, side int, tr *plan.Instr) {
	k := *mm.Kernel
	k.ArgDTypes = slices.Clone(k.ArgDTypes)
	k.ArgShapes = slices.Clone(k.ArgShapes)
	k.ArgDTypes[side] = tr.Kernel.ArgDTypes[0]
	k.ArgShapes[side] = slices.Clone(tr.Kernel.ArgShapes[0])
	if side == 0 {
		k.TransA = true
	} else {
		k.TransB = true
	}
	mm.Kernel = &k
	mm.Args = slices.Clone(mm.Args)
	mm.Args[side] = tr.Args[0]
	mm.ArgPlace = slices.Clone(mm.ArgPlace)
	mm.ArgPlace[side] = tr.ArgPlace[0].Clone()
}

// verifyFusedGemms checks every matmul the fusion changed, in every
// program: a flagged side reads a slot already written, of the rank the
// kernel names, and the operands as the GEMM reads them (op(A), op(B) from
// the kernel's stored shapes) multiply to the kernel's result shape.
// (Kernel shapes, not the slots': in a local function a kernel's shapes
// are the blocks it sees, while slots carry the global shapes.)
func verifyFusedGemms(p *Plan) error {
	for _, prog := range p.Exec.Programs {
		rankOf := make([]int, prog.NumSlots())
		for i := range prog.Instrs {
			in := &prog.Instrs[i]
			if in.Kind == plan.Compute && in.Kernel.Op == "matmul" && (in.Kernel.TransA || in.Kernel.TransB) {
				if err := verifyFused(in, rankOf); err != nil {
					return fmt.Errorf("%s at %s: %w", in.Label, ir.FormatPos(in.Pos), err)
				}
			}
			if in.Out >= 0 {
				rankOf[in.Out] = len(in.Shape)
			}
		}
	}
	return nil
}

func verifyFused(in *plan.Instr, rankOf []int) error {
	k := in.Kernel
	if len(in.Args) != 2 || len(k.ArgShapes) != 2 {
		return fmt.Errorf("a matmul with %d arguments", len(in.Args))
	}
	var ops [2][]int
	for side, tr := range [2]bool{k.TransA, k.TransB} {
		s := k.ArgShapes[side]
		if r := rankOf[in.Args[side]]; r != len(s) {
			return fmt.Errorf("argument %d is slot %d of rank %d, the kernel says %s", side, in.Args[side], r, ir.ShapeString(s))
		}
		if len(s) < 2 {
			return fmt.Errorf("argument %d of shape %s has no matrix", side, ir.ShapeString(s))
		}
		ops[side] = slices.Clone(s)
		if r := len(s); tr {
			ops[side][r-2], ops[side][r-1] = s[r-1], s[r-2]
		}
	}
	a, b, c := ops[0], ops[1], k.Shape
	ra, rb, rc := len(a), len(b), len(c)
	if a[ra-1] != b[rb-2] || rc < 2 || c[rc-2] != a[ra-2] || c[rc-1] != b[rb-1] {
		return fmt.Errorf("%s%s · %s%s does not give %s", ir.ShapeString(k.ArgShapes[0]), tickIf(k.TransA), ir.ShapeString(k.ArgShapes[1]), tickIf(k.TransB), ir.ShapeString(c))
	}
	return nil
}

func tickIf(t bool) string {
	if t {
		return "ᵀ"
	}
	return ""
}
