package lang

import (
	"math"

	"github.com/meshrun/meshrun/pipeline"

	"github.com/meshrun/meshrun/ir"
)

// Pipelines in the train block. With a mesh axis marked `pipeline`, the
// block's body is cut into stages:
//
//	train {
//	    pipeline = 1f1b          # naive | gpipe | 1f1b | interleaved(v) | zb1p | zbv
//	    microbatches = 4
//	    x = embed(tok)
//	    for l in range(4) {
//	        stage = l            # optional marks; without any, lowering balances the cut
//	        x = block(x, l)
//	    }
//	    loss = ...
//	}
//
// The checker records where each micro-batch and each unit of the body (a
// statement, or one iteration of a top-level for loop) put its values
// (ir.PipeTrain); the stage a unit is marked with is the value of the
// variable `stage` when the unit ends. Lowering assigns stages and emits
// each pipeline rank's program.

// pipeSchedules are the schedules `pipeline =` accepts, with their chunks
// per rank (interleaved takes it as an argument).
var pipeSchedules = map[string]int{"naive": 1, "gpipe": 1, "1f1b": 1, "zb1p": 1, "zbv": 2, "interleaved": 0}

// pipelineSetting reads `pipeline = NAME` or `pipeline = interleaved(v)`.
func (c *Checker) pipelineSetting(a *Assign, tr *Train) {
	call, name := initCall(a.Value)
	v := 1
	if call != nil && call.Module == "" && call.Name == "interleaved" {
		name = call.Name
		if len(call.Args) != 1 || call.Args[0].Name != "" {
			c.errorf(call.Pos, "interleaved takes one number, the stages per pipeline rank: interleaved(2)")
			return
		}
		op := c.expr(call.Args[0].Value)
		if op.num == nil || *op.num < 2 || *op.num != math.Trunc(*op.num) || *op.num > 64 {
			c.errorf(call.Args[0].Pos, "interleaved(v) needs an integer v from 2 to 64")
			return
		}
		v = int(*op.num)
	} else if k, ok := pipeSchedules[name]; !ok || k == 0 {
		c.errorf(a.Value.Pos, "pipeline must be naive, gpipe, 1f1b, interleaved(v), zb1p or zbv")
		return
	} else {
		v = k
	}
	if c.g.Pipeline == nil {
		c.errorf(a.Pos, "pipeline = %s needs a mesh axis marked pipeline, e.g. mesh M = [pipeline pp=4, dp=2]", name)
		return
	}
	tr.Pipe = &ir.PipeTrain{Pos: a.Pos, Schedule: name, V: v}
}

// pipelineDefaults completes a train block's pipeline: 1F1B unless named
// (or overridden by CheckOptions.Pipeline); naive means a single
// micro-batch.
func (c *Checker) pipelineDefaults(tb *TrainBlock, tr *Train, microSet bool) {
	if c.g.Pipeline == nil {
		return
	}
	if tr.Pipe == nil {
		tr.Pipe = &ir.PipeTrain{Pos: tb.Pos, Schedule: "1f1b", V: 1}
	}
	if spec := c.opts.Pipeline; spec != "" {
		name, v, err := pipeline.ParseSpec(spec)
		if err != nil {
			c.errorf(tr.Pipe.Pos, "%v", err)
			return
		}
		if v == 0 {
			v = max(1, pipeSchedules[name])
		}
		tr.Pipe.Schedule, tr.Pipe.V = name, v
		if name == "naive" {
			tr.Accumulate, microSet = 1, true // the whole batch at once
		}
	}
	if tr.Pipe.Schedule == "naive" && tr.Accumulate > 1 {
		c.errorf(tr.Pipe.Pos, "pipeline = naive runs the whole batch at once: it takes no micro-batches (found %d)", tr.Accumulate)
	}
	if !microSet && tr.Pipe.Schedule != "naive" {
		// as many micro-batches as pipeline ranks: the least that fills the pipe
		tr.Accumulate = c.g.Pipeline.Size()
		tr.Pipe.DefaultMicro = true
	}
}

// unitRecorder notes the value ranges of the body's units for micro-batch
// micro.
type unitRecorder struct {
	c     *Checker
	pipe  *ir.PipeTrain
	micro int
	start int
}

func (u *unitRecorder) begin() { u.start = len(u.c.g.Values) }

// end closes a unit at pos: its values, and its stage mark.
func (u *unitRecorder) end(pos Pos) {
	p := u.pipe
	p.Units[u.micro] = append(p.Units[u.micro], ir.IDRange{Start: u.start, End: len(u.c.g.Values)})
	if u.micro == 0 {
		mark := -1
		if op, ok := u.c.scope["stage"]; ok && op.num != nil {
			f := *op.num
			changed := len(p.UnitStage) == 0 || p.UnitStage[len(p.UnitStage)-1] != int(f)
			if changed && (f < 0 || f != math.Trunc(f) || int(f) >= u.c.g.Pipeline.Size()*p.V) {
				u.c.errorf(pos, "stage = %v: want an integer from 0 to %d (stages on this pipeline)", f, u.c.g.Pipeline.Size()*p.V-1)
			}
			mark = int(f)
		}
		p.UnitStage = append(p.UnitStage, mark)
		p.UnitPos = append(p.UnitPos, pos)
	}
	u.begin()
}
