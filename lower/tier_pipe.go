package lower

import (
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// The host tier on a pipeline. The tier pass runs on the spmd program,
// before the pipeline pass cuts it into one program per pipeline rank:
// each stage's parameters, optimizer states and update land on the ranks
// of that stage, host flags and all, so each rank's host keeps its own
// stage's state. What the cut adds are transfers between ranks, and a
// transfer moves device memory only (NCCL and the runtime's transports
// send device buffers; plan.Verify rejects a send in host memory). A
// host value that crosses a cut — the pieces of the step's global
// gradient norm or of f16's overflow flag, which meet on the last stage
// and come back from it — is therefore staged through the device on both
// ends: the sender fetches it and sends the device copy, the receiver
// receives into device memory and offloads it. These are scalars; the
// runtime counts their copies with the rest (DeviceStats.ToHost/ToDevice).

// newSlot adds a slot of dtype of in to e's program.
func (e *rankEmit) newSlot(in *plan.Instr) int {
	e.prog.SlotType = append(e.prog.SlotType, in.DType)
	return len(e.prog.SlotType) - 1
}

// copyTier appends a copy of slot from (holding the value in describes)
// into slot to, in the other tier: an Offload or a Fetch.
func (e *rankEmit) copyTier(in *plan.Instr, from, to int, kind plan.Kind) {
	e.prog.Instrs = append(e.prog.Instrs, plan.Instr{Kind: kind, Label: in.Label, DType: in.DType, Shape: in.Shape,
		Placement: in.Placement, ArgPlace: []sbp.NdSBP{in.Placement}, Args: []int{from}, Out: to,
		Host: kind == plan.Offload, Act: e.act, Pos: in.Pos, Where: in.Where})
}

// sendSlot is the slot rank e.r sends for instruction i's result s: s
// itself in device memory; in host memory a device copy, fetched once
// for all the ranks it goes to.
func (e *rankEmit) sendSlot(i, s int) int {
	in := &e.b.src.Instrs[i]
	if !in.Host {
		return s
	}
	if d, ok := e.staged[s]; ok {
		return d
	}
	d := e.newSlot(in)
	e.copyTier(in, s, d, plan.Fetch)
	e.staged[s] = d
	return d
}

// recvSlot is the slot a receive of src's result s writes: s itself, or
// for a host value a device slot, which recvDone offloads into s.
func (e *rankEmit) recvSlot(src *plan.Instr, s int) int {
	if !src.Host {
		return s
	}
	return e.newSlot(src)
}

// recvDone follows the receive into d of src's result s: a host value
// received into a device slot is offloaded into s, where its readers on
// the host look for it.
func (e *rankEmit) recvDone(src *plan.Instr, s, d int) {
	if d != s {
		e.copyTier(src, d, s, plan.Offload)
	}
}

// pipelineHostPeaks replays each rank's host tier again once the
// pipeline pass has made the per-rank programs (the tier pass replayed the
// spmd program, which every rank ran before the cut).
func pipelineHostPeaks(p *Plan) {
	if p.HostPeak != nil {
		p.HostPeak = p.Exec.HostPeaks()
	}
}
