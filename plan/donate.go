package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
)

// Buffer donation (Instr.Donate): a result written into the buffer of an
// argument that dies at the instruction, as XLA aliases an input with an
// output. The fused Adam update (lower/fuse_adam.go) writes p', m', v'
// over p, m, v, so it holds four parameter-sized blocks where fresh
// results would make it hold seven.
//
// A donation is only sound when nothing can tell the argument's buffer
// was reused: the slot is freed by this instruction (Free) and read by no
// later one, it is no output or carried value (those outlive the
// program), no other argument of the instruction reads the same slot
// (the kernel would read it after writing it), no send read it and no
// collective or recv made it (Instr.Shared), two results
// never share one argument, the op's kernel runs result k in place over
// that argument (ops.Op.InPlace: p' over p, m' over m, v' over v for
// adam_fused), and the argument is of the result's dtype, shape,
// placement and tier, so the buffer is exactly the result's size on
// every rank. verifyDonations checks each rule; the memory replay then
// moves the argument's bytes to the result (no allocation, no free).
// The runtime honours a donation where the backend can (rt/donate.go)
// and otherwise gives the result a fresh buffer and counts it.

// DonatedArg is the slot whose buffer result k of the instruction (0:
// Out, k ≥ 1: Outs[k-1]) is written into, and whether it has one.
func (in *Instr) DonatedArg(k int) (int, bool) {
	if k >= len(in.Donate) || in.Donate[k] < 0 {
		return -1, false
	}
	return in.Args[in.Donate[k]], true
}

// DonateString is the donations as dumps print them, "donate[s3→s9]"
// (argument slot → result slot), or "" without any.
func (in *Instr) DonateString() string {
	var parts []string
	k := 0
	in.Written(func(s int) {
		if a, ok := in.DonatedArg(k); ok {
			parts = append(parts, fmt.Sprintf("s%d→s%d", a, s))
		}
		k++
	})
	if len(parts) == 0 {
		return ""
	}
	return "donate[" + strings.Join(parts, " ") + "]"
}

// verifyDonation checks instruction i's donations against its own fields
// (the rules about later instructions are verifyDonations's).
func verifyDonation(in *Instr) error {
	if in.Donate == nil {
		return nil
	}
	if in.Kind != Compute {
		return fmt.Errorf("a %s donates an argument's buffer; only a compute instruction may", in.Kind)
	}
	if len(in.Donate) != 1+len(in.Outs) {
		return fmt.Errorf("%d donations for %d results", len(in.Donate), 1+len(in.Outs))
	}
	used := map[int]bool{}
	for k, a := range in.Donate {
		if a < 0 {
			continue
		}
		if a >= len(in.Args) {
			return fmt.Errorf("result %d reuses argument %d of %d", k+1, a+1, len(in.Args))
		}
		if used[a] {
			return fmt.Errorf("two results reuse argument %d", a+1)
		}
		used[a] = true
		if op, ok := ops.Lookup(in.Kernel.Op); !ok || k >= len(op.InPlace) || op.InPlace[k] != a {
			return fmt.Errorf("result %d of %s is written over argument %d, where its kernel does not run in place (ops.Op.InPlace)", k+1, in.Kernel.Op, a+1)
		}
		s, kn := in.Args[a], in.Kernel
		if a >= len(kn.ArgDTypes) || kn.ArgDTypes[a] != in.DType || !slices.Equal(kn.ArgShapes[a], in.Shape) || !in.ArgPlace[a].Equal(in.Placement) {
			return fmt.Errorf("result %d (%s%s %s) reuses argument %d (%s %s): not the same block", k+1,
				in.DType, ir.ShapeString(in.Shape), in.Placement, a+1, ir.ShapeString(kn.ArgShapes[a]), in.ArgPlace[a])
		}
		if !slices.Contains(in.Free, s) {
			return fmt.Errorf("result %d reuses slot %d, which lives on after the instruction (not in its frees)", k+1, s)
		}
		for j, b := range in.Args {
			if j != a && b == s {
				return fmt.Errorf("result %d reuses slot %d, which the instruction also reads as argument %d", k+1, s, j+1)
			}
		}
	}
	return nil
}

// Shared calls mark with each slot whose buffer, as instruction in
// leaves it, the runtime never writes over (rt/donate.go), so no
// donation may take it: a send's argument (the transport may read the
// buffer until the execution ends: MPI's Isend until Flush; the
// in-process transport hands the peer the storage itself) and a
// collective's or a recv's results (peers in the process may share
// their storage). Lowering donates no such slot (lower/fuse_adam.go)
// and the verifier rejects a donation of one, so a plan counts a result
// in an argument's buffer only where the rank really writes it there.
func (in *Instr) Shared(mark func(s int)) {
	switch in.Kind {
	case Send:
		mark(in.Args[0])
	case Collective, Recv:
		in.Written(mark)
	}
}

// sharedSlots are, over one program, the slots some instruction so far
// left shared (Instr.Shared) and no later one wrote afresh.
type sharedSlots map[int]bool

// check rejects a donation of a shared slot by instruction in, and then
// forgets the slots it writes afresh and notes those it shares.
func (ss sharedSlots) check(in *Instr) error {
	for k := range in.Donate {
		if a, ok := in.DonatedArg(k); ok && ss[a] {
			return fmt.Errorf("result %d reuses slot %d, a send's argument or a collective's or recv's result, whose buffer the runtime never writes over", k+1, a)
		}
	}
	in.Written(func(s int) { delete(ss, s) })
	in.Shared(func(s int) { ss[s] = true })
	return nil
}

// donatedDead tracks, over one program, the slots whose buffer a result
// took: any later read of one, or one kept as an output or carried
// value, is an error.
type donatedDead map[int]int // slot → the instruction that donated it

// read checks a read of slot s.
func (d donatedDead) read(s int) error {
	if i, ok := d[s]; ok {
		return fmt.Errorf("reads slot %d, whose buffer instruction %d gave to its result", s, i)
	}
	return nil
}

// donate records instruction i's donated slots (after its reads), and
// forgets any slot it writes afresh.
func (d donatedDead) donate(i int, in *Instr) {
	in.Written(func(s int) { delete(d, s) })
	for k := range in.Donate {
		if a, ok := in.DonatedArg(k); ok {
			d[a] = i
		}
	}
}

// kept checks the program's outputs and carried values.
func (d donatedDead) kept(prog *Program) error {
	for _, s := range append(slices.Clone(prog.OutputSlots), prog.CarrySlots...) {
		if i, ok := d[s]; ok {
			return fmt.Errorf("slot %d is kept after the program, but instruction %d gave its buffer to a result", s, i)
		}
	}
	return nil
}
