package rt

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
)

// StepInfo reports one finished training step.
type StepInfo struct {
	Step  int
	Steps int
	Loss  float64
	LR    float64
	Wall  time.Duration
	Run   *Result
}

// TrainResult is a finished training run.
type TrainResult struct {
	Losses []float64
	Params []*lang.Value
	Final  []*Tensor // logical params after the last step, in Params order
	Last   *Result
}

// Param returns the final value of the named param.
func (r *TrainResult) Param(name string) *Tensor {
	for i, p := range r.Params {
		if p.Name == name {
			return r.Final[i]
		}
	}
	return nil
}

// Train runs a lowered train program: the step plan, Steps times. Each
// device keeps the blocks of its parameters and optimizer states from one
// step to the next (they never leave the device); the trainer feeds the
// per-step scalars (learning rate after its schedule, Adam's bias
// corrections). onStep, if given, sees every step; an error from it stops
// the run.
func Train(ctx context.Context, p *lower.Plan, opts Options, onStep func(StepInfo) error) (*TrainResult, error) {
	t := p.Graph.Train
	if t == nil {
		return nil, fmt.Errorf("the program has no train block")
	}
	n := p.Mesh.Size()
	state := make([]map[*lang.Value]*Tensor, n)
	for d := range state {
		state[d] = map[*lang.Value]*Tensor{}
	}
	res := &TrainResult{Params: t.Params}
	o := t.Optimizer
	for step := 1; step <= t.Steps; step++ {
		start := time.Now()
		lr := t.LR(step)
		hyper := map[*lang.Value]float64{}
		if v := t.Hyper["lr"]; v != nil {
			hyper[v] = lr
		}
		if v := t.Hyper["bc1"]; v != nil {
			hyper[v] = 1 - math.Pow(o.Beta1, float64(step))
		}
		if v := t.Hyper["bc2"]; v != nil {
			hyper[v] = 1 - math.Pow(o.Beta2, float64(step))
		}
		stepOpts := opts
		stepOpts.Feed = func(dev int, v *lang.Value) *Tensor {
			if h, ok := hyper[v]; ok {
				s := NewTensor(v.Type.DType, nil)
				setScalar(s, h)
				return s
			}
			if st := state[dev][v]; st != nil {
				return st
			}
			if opts.Feed != nil {
				return opts.Feed(dev, v)
			}
			return nil
		}
		run, err := Run(ctx, p, stepOpts)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		for d := 0; d < n; d++ {
			for i, c := range p.Carry {
				state[d][c.Source] = run.Carry[d][i]
			}
		}
		loss := run.Output("loss").Float64s()[0]
		res.Losses = append(res.Losses, loss)
		res.Last = run
		if onStep != nil {
			if err := onStep(StepInfo{Step: step, Steps: t.Steps, Loss: loss, LR: lr, Wall: time.Since(start), Run: run}); err != nil {
				return nil, err
			}
		}
	}
	for _, prm := range t.Params {
		parts := make([]*Tensor, n)
		for d := range parts {
			parts[d] = state[d][prm]
		}
		full, err := Assemble(p.Mesh, prm.Type, p.Placement[prm], parts)
		if err != nil {
			return nil, fmt.Errorf("param %s: %v", prm.Name, err)
		}
		res.Final = append(res.Final, full)
	}
	return res, nil
}
