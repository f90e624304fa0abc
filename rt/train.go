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
	// Scale is the loss scale this step ran with (f16), Skipped whether an
	// overflow skipped its update.
	Scale   float64
	Skipped bool
	// Applied counts optimizer steps taken so far; Scaler is the loss
	// scaler after this step's update (nil without f16).
	Applied int
	Scaler  *GradScaler
	// Snapshot assembles the logical value of every carried tensor
	// (parameters and optimizer states, by name) as of this step.
	Snapshot func() (map[string]*Tensor, error)
}

// TrainConfig says where a run starts and who watches it.
type TrainConfig struct {
	// Start is the number of steps already done (a resumed run continues
	// at Start+1); Initial holds the logical parameters and optimizer
	// states to start from, by name (from a checkpoint; any mesh).
	Start   int
	Initial map[string]*Tensor
	// OnStep sees every step; an error from it stops the run.
	OnStep func(StepInfo) error
	// Scaler and Applied continue a resumed f16 run's loss scaling and
	// Adam step count (nil and 0: from the start).
	Scaler  *GradScaler
	Applied int
}

// TrainResult is a finished training run.
type TrainResult struct {
	Losses  []float64
	Scales  []float64 // f16: the loss scale of every step
	Applied int       // optimizer steps applied (skipped overflow steps excluded)
	Params  []*lang.Value
	Final   []*Tensor // logical params after the last step, in Params order
	Last    *Result
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
func Train(ctx context.Context, p *lower.Plan, opts Options, cfg TrainConfig) (*TrainResult, error) {
	t := p.Graph.Train
	if t == nil {
		return nil, fmt.Errorf("the program has no train block")
	}
	n := p.Mesh.Size()
	state := make([]map[*lang.Value]*Tensor, n)
	for d := range state {
		state[d] = map[*lang.Value]*Tensor{}
	}
	if cfg.Initial != nil {
		for _, c := range p.Carry {
			full, ok := cfg.Initial[c.Source.Name]
			if !ok {
				return nil, fmt.Errorf("the checkpoint has no %s", c.Source.Name)
			}
			if full.DType != c.Source.Type.DType || !sameShape(full.Shape, c.Source.Type.Shape) {
				return nil, fmt.Errorf("the checkpoint's %s is %s%v, the program declares %s", c.Source.Name, full.DType, full.Shape, c.Source.Type)
			}
			for d := 0; d < n; d++ {
				state[d][c.Source] = Scatter(p.Mesh, full, p.Placement[c.Source], d)
			}
		}
	}
	snapshot := func() (map[string]*Tensor, error) {
		out := map[string]*Tensor{}
		for _, c := range p.Carry {
			parts := make([]*Tensor, n)
			for d := range parts {
				parts[d] = state[d][c.Source]
			}
			full, err := Assemble(p.Mesh, c.Source.Type, p.Placement[c.Source], parts)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", c.Source.Name, err)
			}
			out[c.Source.Name] = full
		}
		return out, nil
	}
	res := &TrainResult{Params: t.Params}
	o := t.Optimizer
	cache := &npyCache{}
	var scaler *GradScaler
	if t.Hyper["loss_scale"] != nil {
		scaler = NewGradScaler()
		if cfg.Scaler != nil {
			scaler = cfg.Scaler
		}
	}
	applied := cfg.Start // optimizer steps taken (an overflow skips one)
	if cfg.Applied > 0 {
		applied = cfg.Applied
	}
	for step := cfg.Start + 1; step <= t.Steps; step++ {
		start := time.Now()
		lr := t.LR(step)
		hyper := map[*lang.Value]float64{}
		if v := t.Hyper["lr"]; v != nil {
			hyper[v] = lr
		}
		if v := t.Hyper["bc1"]; v != nil {
			hyper[v] = 1 - math.Pow(o.Beta1, float64(applied+1))
		}
		if v := t.Hyper["bc2"]; v != nil {
			hyper[v] = 1 - math.Pow(o.Beta2, float64(applied+1))
		}
		scale := 1.0
		if scaler != nil {
			scale = scaler.Scale
			hyper[t.Hyper["loss_scale"]] = scale
		}
		batches := map[*lang.Value]*Tensor{}
		for _, bi := range t.Batches {
			b, err := batchFor(bi, step, opts.Seed, cache)
			if err != nil {
				return nil, fmt.Errorf("step %d: batch of %s: %v", step, bi.Dataset.Name, err)
			}
			batches[bi.Source] = b
		}
		stepOpts := opts
		stepOpts.files = cache // inputs are read from disk once, not every step
		stepOpts.Feed = func(dev int, v *lang.Value) *Tensor {
			if b, ok := batches[v]; ok {
				return Scatter(p.Mesh, b, p.Placement[v], dev)
			}
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
		skipped := false
		if scaler != nil {
			skipped = run.Output("found_inf").Float64s()[0] != 0
			scaler.Update(skipped)
			res.Scales = append(res.Scales, scale)
		}
		if !skipped {
			applied++
		}
		res.Applied = applied
		if cfg.OnStep != nil {
			if err := cfg.OnStep(StepInfo{Step: step, Steps: t.Steps, Loss: loss, LR: lr, Wall: time.Since(start), Run: run, Snapshot: snapshot, Scale: scale, Skipped: skipped, Applied: applied, Scaler: scaler}); err != nil {
				return nil, err
			}
		}
	}
	if res.Last == nil {
		return nil, fmt.Errorf("nothing to do: the run starts after step %d of %d", cfg.Start, t.Steps)
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

// batchFor builds the logical batch of a dataset input for a step (1-based).
// A loaded dataset is read in a shuffled order, a new permutation each
// epoch, drawn from the seed; a random initialiser is an endless stream
// whose rows step after step are fresh and the same on every mesh.
func batchFor(bi lang.BatchInput, step int, seed uint64, cache *npyCache) (*Tensor, error) {
	ds := bi.Dataset
	b := bi.Source.Type.Shape[0]
	out := NewTensor(ds.Type.DType, bi.Source.Type.Shape)
	rowLen := 1
	for _, d := range ds.Type.Shape[1:] {
		rowLen *= d
	}
	init := ds.Attrs.Init
	if init.Kind != "load" {
		key := initKey(seed, ds.Name)
		first := (step - 1) * b * rowLen
		vals := make([]float64, b*rowLen)
		for i := range vals {
			vals[i] = InitValue(init, key, first+i)
		}
		storeValues(out, vals)
		return out, nil
	}
	full, err := cache.load(init.Path)
	if err != nil {
		return nil, err
	}
	n := ds.Type.Shape[0]
	perEpoch := n / b
	epoch, pos := (step-1)/perEpoch, (step-1)%perEpoch
	perm := permutation(n, splitmix(seed^splitmix(uint64(epoch)+0x5eed)))
	flatIn := &Tensor{DType: full.DType, Shape: []int{n, rowLen}, Data: full.Data}
	flatOut := &Tensor{DType: out.DType, Shape: []int{b, rowLen}, Data: out.Data}
	for r := 0; r < b; r++ {
		CopyBlock(flatOut, []int{r, 0}, flatIn, []int{perm[pos*b+r], 0}, []int{1, rowLen})
	}
	return out, nil
}

// permutation is a Fisher–Yates shuffle of 0..n-1 driven by splitmix64.
func permutation(n int, key uint64) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i > 0; i-- {
		key = splitmix(key)
		j := int(key % uint64(i+1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// GradScaler is PyTorch's dynamic loss scaling: start at 2^16; after an
// overflow halve the scale and skip the step; after GrowthInterval clean
// steps in a row double it.
type GradScaler struct {
	Scale          float64
	Growth         float64
	Backoff        float64
	GrowthInterval int
	Tracker        int // clean steps since the last change
}

// NewGradScaler has torch.cuda.amp.GradScaler's defaults.
func NewGradScaler() *GradScaler {
	return &GradScaler{Scale: 65536, Growth: 2, Backoff: 0.5, GrowthInterval: 2000}
}

// Update records whether this step overflowed.
func (g *GradScaler) Update(foundInf bool) {
	if foundInf {
		g.Scale *= g.Backoff
		g.Tracker = 0
		return
	}
	g.Tracker++
	if g.Tracker == g.GrowthInterval {
		g.Scale *= g.Growth
		g.Tracker = 0
	}
}
