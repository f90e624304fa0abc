package rt

import (
	"context"
	"slices"

	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// Buffer donation (plan.Instr.Donate): the plan lets a result be written
// into the buffer of an argument whose slot dies at the instruction, and
// its memory replay counts no allocation for that result. The worker
// honours a donation only when nothing else can see the buffer:
//   - this slot is its only holder (execution.refs: no other slot, no
//     send in flight);
//   - this rank made it for itself: a kernel's or a local step's result, a
//     copy between tiers, or a source this rank materialised or was fed
//     (the worker owns what it is fed, Feed) — never a collective's or a
//     recv's result (a shared-memory collective's result is one tensor
//     every member holds; the in-process transport hands the receiver the
//     sender's storage), never a block of a loaded file (Tensor.view: the
//     cache's storage, the next step's source), and never a fed buffer
//     the last execution carried out of such a slot, kept as an output
//     too or sent to a peer;
//   - the backend can write in place (DonatingLauncher: the CPU, and
//     CUDA for an argument already on its GPU).
// Otherwise the result gets a fresh buffer, as without donation, and the
// worker counts it as an allocation: the measured peak is then above the
// plan's by that block (the first step's update of a parameter loaded
// from a file). A donated result takes over the argument's hold:
// no bytes are counted in or out, as in the replay.

// DonatingLauncher is a Backend that writes results into argument
// buffers.
type DonatingLauncher interface {
	// LaunchDonated is LaunchResults, but result k is written into
	// args[donate[k]] where donate[k] ≥ 0, and that very buffer is handed
	// back as the result (-1: a fresh buffer). The caller has made sure
	// nothing else holds those buffers. Like args, donate is valid
	// during the call only.
	LaunchDonated(ctx context.Context, k *plan.Kernel, args []Buffer, in []sbp.Block, out sbp.Block, n int, donate []int) ([]Buffer, error)
}

// donor is a worker's state for donation: the kind of instruction that
// writes each slot (fixed by the program), and the buffers fed this
// execution that must not be written over (carried last time out of a
// slot this rank does not own alone).
type donor struct {
	maker  []plan.Kind
	shared map[Buffer]bool
	spare  map[Buffer]bool // the set before shared, refilled by carried
	asked  []int           // the donations asked of the backend, reused by every launch
}

func (w *Worker) donor() *donor {
	if w.don == nil {
		prog := w.Prog.Prog
		d := &donor{maker: make([]plan.Kind, prog.NumSlots()), shared: map[Buffer]bool{}}
		for i := range prog.Instrs {
			in := &prog.Instrs[i]
			in.Written(func(s int) { d.maker[s] = in.Kind })
		}
		w.don = d
	}
	return w.don
}

// owned says whether slot s's buffer b is this rank's alone to write
// over, as far as where it came from goes (the holders are counted
// apart).
func (d *donor) owned(s int, b Buffer) bool {
	if t, ok := b.(*Tensor); ok && t.view {
		return false
	}
	switch d.maker[s] {
	case plan.Compute, plan.Local, plan.Offload, plan.Fetch:
		return true
	case plan.Source:
		return !d.shared[b]
	}
	return false
}

// launchResults runs a Compute instruction with several results: with
// the donations the worker can honour where the backend writes in place,
// else every result fresh (LaunchResults).
func (x *execution) launchResults(ctx context.Context, be Backend, in *plan.Instr, b *plan.Bound, args []Buffer) ([]Buffer, error) {
	n := 1 + len(in.Outs)
	dl, ok := be.(DonatingLauncher)
	if in.Donate == nil || !ok {
		return LaunchResults(ctx, be, in.Kernel, args, b.In, b.Out, n)
	}
	d := x.w.donor()
	donate := slices.Grow(d.asked[:0], len(in.Donate))[:len(in.Donate)]
	d.asked = donate
	some := false
	for k, a := range in.Donate {
		donate[k] = -1
		if a >= 0 && d.owned(in.Args[a], args[a]) && x.refs.count(args[a]) == 1 {
			donate[k], some = a, true
		}
	}
	if !some {
		return LaunchResults(ctx, be, in.Kernel, args, b.In, b.Out, n)
	}
	return dl.LaunchDonated(ctx, in.Kernel, args, b.In, b.Out, n, donate)
}

// holdDonated is step's holding of an instruction's results and freeing
// of its dead slots, for an instruction with donations: a result that is
// its donated argument's buffer takes the argument slot's hold (no
// allocation, and no free of that slot); any other is held afresh.
func (x *execution) holdDonated(in *plan.Instr, out Buffer) {
	var given [4]int
	took := given[:0] // argument slots whose buffer a result took
	k := 0
	in.Written(func(s int) {
		r := out
		if k > 0 {
			r = x.more[k-1]
		}
		if a, ok := in.DonatedArg(k); ok && x.slots[a] == r {
			x.slots[a], x.slots[s] = nil, r
			x.size[s] = x.size[a]
			if x.pipe != nil {
				x.pipe.released(r)
				x.pipe.made(in, r)
			}
			took = append(took, a)
		} else {
			x.hold(in, s, r)
		}
		k++
	})
	for _, s := range in.Free {
		if !slices.Contains(took, s) {
			x.release(s)
		}
	}
}

// carried notes, at the end of an execution, which carried buffers the
// next one (fed them back as sources) must not write over: those of
// slots this rank does not own alone, those kept as outputs too (the
// caller holds them) and those it sent (a peer in this process may hold
// the storage itself).
func (d *donor) carried(x *execution, prog *plan.Program) {
	// filled while owned still reads the last execution's set, then
	// swapped with it: two maps per worker, not one per step
	shared := d.spare
	if shared == nil {
		shared = map[Buffer]bool{}
	}
	clear(shared)
	output := func(b Buffer) bool {
		return slices.ContainsFunc(prog.OutputSlots, func(s int) bool { return s >= 0 && x.slots[s] == b })
	}
	for _, s := range prog.CarrySlots {
		if s < 0 || x.slots[s] == nil {
			continue
		}
		if b := x.slots[s]; !d.owned(s, b) || output(b) || slices.Contains(x.sent, b) {
			shared[b] = true
		}
	}
	d.shared, d.spare = shared, d.shared
}
