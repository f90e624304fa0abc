package lower

import (
	"fmt"
	"strings"

	"github.com/meshrun/meshrun/plan"
)

// offloadPipelineNote is the pipeline section's note on offload: a
// pipeline runs every micro-batch's backward separately, so under
// ZeRO-2/3 each gradient leaves the device once per micro-batch (the
// backward reduces it there), and with optimizer+params each backward
// fetches the parameters it reads again. The figures are the plan's
// copies on the pipeline rank that copies the most, next to what copying
// each tensor once a step would take (the same copies with repeats of a
// label counted once).
func offloadPipelineNote(p *Plan, micro int) string {
	t := p.Graph.Train
	if t.Offload == "" || micro < 2 {
		return ""
	}
	rank, most, once := -1, int64(0), int64(0)
	for r := range p.Exec.Programs {
		d := p.Exec.Mesh.Device(pipeCoord(p, r))
		all, distinct := copiesOf(p.Exec, d)
		if all > distinct && (rank < 0 || all > most) {
			rank, most, once = r, all, distinct
		}
	}
	if rank < 0 {
		return ""
	}
	var why []string
	if t.Zero >= 2 {
		why = append(why, fmt.Sprintf("ZeRO-%d offloads each gradient the moment a micro-batch's backward reduces it", t.Zero))
	}
	if t.Offload == "optimizer+params" {
		why = append(why, "optimizer+params fetches the parameters every micro-batch's backward reads again")
	}
	return fmt.Sprintf("offload on a pipeline copies per micro-batch (%s): rank %d copies %s between device and host per step, %.1f× the %s of copying each tensor once (%d micro-batches)",
		strings.Join(why, "; "), rank, HumanBytes(float64(most)), float64(most)/float64(once), HumanBytes(float64(once)), micro)
}

// copiesOf is the bytes device d's offload and fetch instructions copy
// per step, in all and with each label counted once.
func copiesOf(ex *plan.Plan, d int) (all, distinct int64) {
	seen := map[string]bool{}
	prog := ex.ProgramOf(d)
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		if in.Kind != plan.Offload && in.Kind != plan.Fetch {
			continue
		}
		n := localCopyBytes(ex, in, d)
		all += n
		key := in.Kind.String() + " " + in.Label
		if !seen[key] {
			seen[key] = true
			distinct += n
		}
	}
	return all, distinct
}
