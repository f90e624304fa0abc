package planner

import (
	"fmt"
	"path/filepath"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/pipeline"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// Cost is a candidate's modelled step and memory, in explain's terms.
// The step-time split is that of the busiest device: its compute, its
// time in each kind of collective, and the rest of the step, in which it
// waits (the pipeline bubble, and pipeline sends on the critical path).
type Cost struct {
	Step    float64
	Compute float64
	Comm    map[string]float64 // seconds per collective kind ("all-reduce", …)
	Bytes   map[string]float64 // bytes sent per device per collective kind
	// ByAxis is the time per collective kind and mesh axis, keyed
	// "all_reduce over tp"; ModelAxes the average over pipeline ranks of
	// the time in collectives on axes other than the data axis.
	ByAxis    map[string]float64
	ModelAxes float64
	Bubble    float64
	// Memory of the device with the highest peak.
	Peak, Params, Optimizer, Gradients, Activations int64
	// floor (composed costs only): the step without the time the ZeRO
	// stage and offload change, which bounds the candidate's group
	// (search_composed.go)
	floor float64
}

// CommTime is the time in all collectives.
func (c *Cost) CommTime() float64 {
	t := 0.0
	for _, v := range c.Comm {
		t += v
	}
	return t
}

// compile checks and lowers candidate c, with the link model's topology.
func compile(p *Program, c *Candidate, n int, links *Links) (*lower.Plan, error) {
	src := p.Source(c, "")
	g, err := lang.CheckSource(p.Path, src, lang.CheckOptions{Devices: n, Dir: filepath.Dir(p.Path)})
	if err != nil {
		return nil, err
	}
	return lower.Lower(g, lower.Options{Topo: topology(g, c, links)})
}

// fullSizes is the candidate's mesh, pipeline axis included.
func (c *Candidate) fullSizes() []int {
	out := append([]int(nil), c.Sizes...)
	if c.PP > 1 {
		out = append(out[:c.PPPos], append([]int{c.PP}, out[c.PPPos:]...)...)
	}
	return out
}

// topology gives each axis of g's mesh (the pipeline axis left out) the
// link of its level in the full mesh.
func topology(g *ir.Graph, c *Candidate, links *Links) *mesh.Topology {
	full := c.fullSizes()
	t := &mesh.Topology{Links: make([]mesh.Link, g.Mesh.NumAxes())}
	for i := range t.Links {
		a := i
		if c.PP > 1 && i >= c.PPPos {
			a++
		}
		t.Links[i], _ = links.Axis(full, a)
	}
	return t
}

// price models one step of a lowered plan: every rank's instructions
// timed (kernels by their local FLOPs at rate, collectives by the link
// model), a pipelined plan's actions run through the schedule simulator,
// pipeline sends timed on the pipeline axis's link.
func price(p *lower.Plan, c *Candidate, links *Links, rate float64, dataAxis string) (*Cost, error) {
	var cost *Cost
	if p.Pipe == nil {
		cost = &Cost{}
		for i, prog := range p.Exec.Programs {
			r := walk(p, prog, rate, dataAxis)
			if i == 0 || r.busy() > cost.Step {
				cost = &Cost{Step: r.busy(), Compute: r.compute, Comm: r.comm, Bytes: r.bytes, ByAxis: r.axis, ModelAxes: r.model}
			}
		}
	} else {
		var err error
		if cost, err = pricePipeline(p, c, links, rate, dataAxis); err != nil {
			return nil, err
		}
	}
	memory(p, cost)
	return cost, nil
}

// rankTime is what one program keeps a device busy with.
type rankTime struct {
	compute, pre, post float64
	comm, bytes, axis  map[string]float64
	model              float64            // seconds in collectives off the data axis
	action             map[actKey]float64 // pipelined: busy seconds per action
	sent               map[actKey]float64 // pipelined: bytes sent after each action
	// data: of action, pre and post, the seconds in what the ZeRO stage
	// and offload change (collectives over the data axis, host copies)
	data              map[actKey]float64
	preData, postData float64
}

type actKey struct {
	stage, micro int
	kind         pipeline.Kind
}

func (r *rankTime) busy() float64 {
	t := r.compute
	for _, v := range r.comm {
		t += v
	}
	return t
}

// walk times a program's instructions on its first device.
func walk(p *lower.Plan, prog *plan.Program, rate float64, dataAxis string) *rankTime {
	r, _ := walkTail(p, prog, rate, dataAxis, -1)
	return r
}

// walkTail is walk that also sums, into tail, the instructions of the
// actions of micro-batch last (compose.go scales a proxy's last
// micro-batch to the candidate's count).
func walkTail(p *lower.Plan, prog *plan.Program, rate float64, dataAxis string, last int) (r, tail *rankTime) {
	r, tail = newRankTime(), newRankTime()
	started := false
	for i := range prog.Instrs {
		in := &prog.Instrs[i]
		var t float64
		data := false // a collective over the data axis or a host copy
		into := []*rankTime{r}
		if in.Act != nil && in.Act.Micro == last {
			into = append(into, tail)
		}
		switch in.Kind {
		case plan.Compute:
			t = kernelFLOPs(p.Exec.Mesh, in) / rate
			for _, r := range into {
				r.compute += t
			}
		case plan.Collective:
			// a bucket pays one latency (never below nothing)
			t = in.Step.Time - min(in.Step.Time, lower.BucketSaving(p, in))
			name := p.Exec.Mesh.Axes[in.Step.Axis].Name
			for _, r := range into {
				r.addComm(string(in.Step.Kind), t, in.Step.Bytes)
				r.axis[string(in.Step.Kind)+" over "+name] += t
				if name != dataAxis {
					r.model += t
				}
			}
			data = name == dataAxis
		case plan.Offload, plan.Fetch:
			// ZeRO-Offload's copies over the host link (PCIe)
			b := float64(localBytes(p.Exec.Mesh, in))
			t = HostLink.Alpha + b*HostLink.Beta
			for _, r := range into {
				r.addComm("host copy", t, b)
			}
			data = true
		case plan.Send:
			if in.Act != nil {
				k := actKey{in.Act.Stage, in.Act.Micro, in.Act.Kind}
				r.sent[k] += float64(localBytes(p.Exec.Mesh, in))
			}
			continue
		default:
			continue
		}
		d := 0.0
		if data {
			d = t
		}
		switch {
		case in.Act != nil:
			started = true
			k := actKey{in.Act.Stage, in.Act.Micro, in.Act.Kind}
			r.action[k] += t
			r.data[k] += d
		case started:
			r.post += t
			r.postData += d
		default:
			r.pre += t
			r.preData += d
		}
	}
	return r, tail
}

func (r *rankTime) addComm(kind string, t, bytes float64) {
	r.comm[kind] += t
	r.bytes[kind] += bytes
}

// kernelFLOPs is a kernel's arithmetic on the local blocks of device 0.
func kernelFLOPs(m *mesh.Mesh, in *plan.Instr) float64 {
	k := in.Kernel
	args := make([][]int, len(k.ArgShapes))
	for i, s := range k.ArgShapes {
		args[i] = sbp.LocalShape(m, s, in.ArgPlace[i], 0)
	}
	return ops.KernelFLOPs(k.Op, sbp.LocalShape(m, in.Shape, in.Placement, 0), k.AsOperands(args))
}

func localBytes(m *mesh.Mesh, in *plan.Instr) int64 {
	n := int64(in.DType.Size())
	for _, d := range sbp.LocalShape(m, in.Shape, in.Placement, 0) {
		n *= int64(d)
	}
	return n
}

// pricePipeline runs the schedule with each action's modelled time on the
// rank that holds its stage; the step is the longest rank's work before
// the actions, the simulated span of the actions, and the longest rank's
// work after them (the optimizer step and its collectives).
func pricePipeline(p *lower.Plan, c *Candidate, links *Links, rate float64, dataAxis string) (*Cost, error) {
	full := p.Exec.Mesh
	ranks := make([]*rankTime, p.Pipe.Schedule.Ranks)
	for r := range ranks {
		coord := make([]int, full.NumAxes())
		coord[p.Pipe.Axis] = r
		ranks[r] = walk(p, p.Exec.ProgramOf(full.Device(coord)), rate, dataAxis)
	}
	link, _ := links.Axis(c.fullSizes(), p.Pipe.Axis)
	return simulatePipeline(ranks, p.Pipe.Schedule, link)
}

// simulatePipeline runs the schedule with each action's time on the rank
// that holds its stage (sends on link); the step is the longest rank's
// work before the actions, the simulated span, and the longest rank's
// work after them.
func simulatePipeline(ranks []*rankTime, sched *pipeline.Schedule, link mesh.Link) (*Cost, error) {
	fn := func(a pipeline.Action) float64 {
		r := ranks[sched.StageRank[a.Stage]]
		if a.Kind.IsComm() {
			var bytes float64
			if a.Kind == pipeline.SendF {
				bytes = r.sent[actKey{a.Stage, a.Micro, pipeline.F}]
			} else {
				bytes = r.sent[actKey{a.Stage, a.Micro, pipeline.B}] + r.sent[actKey{a.Stage, a.Micro, pipeline.I}]
			}
			if bytes == 0 {
				return 0
			}
			return link.Alpha + bytes*link.Beta
		}
		return r.action[actKey{a.Stage, a.Micro, a.Kind}]
	}
	events, err := pipeline.Simulate(sched, pipeline.Cost{Fn: fn})
	if err != nil {
		return nil, fmt.Errorf("simulating the schedule: %w", err)
	}
	var pre, post float64
	for _, r := range ranks {
		pre, post = max(pre, r.pre), max(post, r.post)
	}
	cost := &Cost{Step: pre + pipeline.Makespan(events) + post}
	busiest := ranks[0]
	for _, r := range ranks {
		if r.busy() > busiest.busy() {
			busiest = r
		}
		cost.ModelAxes += r.model / float64(len(ranks))
	}
	cost.Compute, cost.Comm, cost.Bytes, cost.ByAxis = busiest.compute, busiest.comm, busiest.bytes, busiest.axis
	cost.Bubble = max(0, cost.Step-busiest.busy())
	return cost, nil
}

// memory fills in the memory of the device with the highest peak, split
// as explain splits it.
func memory(p *lower.Plan, c *Cost) {
	d := 0
	for i, v := range p.Peak {
		if v > p.Peak[d] {
			d = i
		}
	}
	c.Peak = p.Peak[d]
	c.Params, c.Optimizer, c.Gradients = lower.HeldBytes(p, d)
	c.Activations = c.Peak - c.Params - c.Optimizer
}
