package lower

import (
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
)

// The tier pass: ZeRO-Offload's host memory. A train block with offload
// keeps some sources in host memory (ir.Train.OnHost: master weights,
// optimizer states, the update's scalars) and moves tensors between the
// tiers with the copy ops the step makes: offload (device → host: the
// reduced gradients) and fetch (host → device: the parameters' copies the
// forward reads). Every other value lives where its arguments do, so the
// update runs on the host; a constant lives with its reader. The pass
// records each value's tier (Plan.Host) and marks the spmd program: the
// copies become Offload and Fetch instructions, and every instruction
// whose result is in host memory gets Instr.Host, which the runtime runs
// on the rank's host backend; the pass also replays each rank's host
// memory (Plan.HostPeak), which the memory pass (device memory) leaves out.
// With a pipeline axis the pass runs on the spmd program before the
// pipeline pass cuts it, so every stage's tiers travel with its
// instructions; tier_pipe.go stages the host values that cross a cut.

// assignTiers is the tier pass.
func assignTiers(p *Plan) error {
	t := p.Graph.Train
	if t == nil || t.Offload == "" {
		return nil
	}
	if p.Pipe != nil || len(p.Exec.Programs) != 1 {
		return fmt.Errorf("%w: the tier pass runs on the spmd program, before the pipeline pass cuts it", ErrInternal)
	}
	if err := valueTiers(p, t); err != nil {
		return err
	}
	prog := p.Exec.Programs[0]
	host := make([]bool, prog.NumSlots())
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		v := p.InstrValue[i]
		switch {
		case in.Kind == plan.Source:
			in.Host = p.Host[v]
			p.Exec.Sources[in.Src].Host = in.Host
		case in.Kind == plan.Compute && in.Kernel.Op == "offload":
			in.Kind, in.Kernel, in.Host = plan.Offload, nil, true
		case in.Kind == plan.Compute && in.Kernel.Op == "fetch":
			in.Kind, in.Kernel, in.Host = plan.Fetch, nil, false
		case in.Kind == plan.Compute:
			in.Host = p.Host[v]
		case in.Kind == plan.Send || in.Kind == plan.Recv:
			// a local function's shift: transfers move device memory
			in.Host = false
		default: // a boxing step lives where the value it converts does
			in.Host = host[in.Args[0]]
		}
		want := in.Host // the tier the arguments must be in
		switch in.Kind {
		case plan.Offload:
			want = false
		case plan.Fetch:
			want = true
		}
		for _, a := range in.Args {
			if host[a] != want {
				return fmt.Errorf("%w: %s at %s reads a %s slot", ErrInternal, in.Name(), in.Where, tierName(host[a]))
			}
		}
		if in.Out >= 0 {
			host[in.Out] = in.Host
		}
	}
	for i, s := range prog.OutputSlots {
		p.Exec.Outputs[i].Host = host[s]
	}
	sinkFetches(p, prog)
	p.HostPeak = p.Exec.HostPeaks()
	return nil
}

// sinkFetches moves each fetch, and the boxing steps that convert what it
// fetched (ZeRO's gather), down to just before the first instruction that
// reads it. The checker makes every parameter's copy at the top of the
// step; fetched there, every copy would sit on the device from the start
// of the forward. Moved, a device holds a parameter from its first use on
// (and, with optimizer+params, only until its last forward use). Every
// rank runs the same program, so the collectives keep one order on all of
// them; the slots' last uses are found again.
func sinkFetches(p *Plan, prog *plan.Program) {
	sinkable := make([]bool, prog.NumSlots()) // written by a fetch or a step on one
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		if in.Kind == plan.Fetch || ((in.Kind == plan.Local || in.Kind == plan.Collective) && sinkable[in.Args[0]]) {
			sinkable[in.Out] = true
		}
	}
	for j := len(prog.Instrs) - 1; j >= 0; j-- {
		in := prog.Instrs[j]
		if in.Out < 0 || !sinkable[in.Out] {
			continue
		}
		r := j + 1 // the first reader (sunk readers are already in place)
		for r < len(prog.Instrs) && !slices.Contains(prog.Instrs[r].Args, in.Out) {
			r++
		}
		if r == len(prog.Instrs) {
			continue // an output or carried value: leave it
		}
		v := p.InstrValue[j]
		copy(prog.Instrs[j:r-1], prog.Instrs[j+1:r])
		copy(p.InstrValue[j:r-1], p.InstrValue[j+1:r])
		prog.Instrs[r-1], p.InstrValue[r-1] = in, v
	}
	for i := range prog.Instrs {
		prog.Instrs[i].Free = nil
	}
	freeAfterLastUse(prog)
}

// valueTiers gives every value its tier: OnHost sources, offload results
// and what is computed from host values are in host memory; fetch results
// and the rest in device memory. A value may not mix arguments of both
// tiers (the step never builds one); a constant takes its reader's tier.
func valueTiers(p *Plan, t *ir.Train) error {
	p.Host = map[*ir.Value]bool{}
	isConst := func(v *ir.Value) bool { return !v.IsSource() && len(v.Args) == 0 }
	for _, v := range p.Values {
		switch {
		case v.IsSource():
			p.Host[v] = t.OnHost[v]
		case v.Op == "offload":
			p.Host[v] = true
		case v.Op == "fetch" || isConst(v):
		default:
			seen := false
			for _, a := range v.Args {
				if isConst(a) {
					continue
				}
				if seen && p.Host[a] != p.Host[v] {
					return fmt.Errorf("%w: %s at %s reads values in host and in device memory", ErrInternal, v.Label(), v.Where())
				}
				p.Host[v], seen = p.Host[a], true
			}
		}
	}
	for _, v := range p.Values {
		for _, a := range v.Args {
			if isConst(a) {
				p.Host[a] = p.Host[v] && v.Op != "offload"
			}
		}
	}
	return nil
}

func tierName(host bool) string {
	if host {
		return "host"
	}
	return "device"
}
