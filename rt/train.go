package rt

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/train"
)

// StepInfo reports one finished training step.
type StepInfo struct {
	Step  int
	Steps int
	Loss  float64
	LR    float64
	Wall  time.Duration
	// Run is the step's result. Its device timelines (Events) are valid
	// until OnStep returns: the next step records over them (copy what
	// is to be kept). TrainResult.Last, the last step's, stays valid.
	Run *Result
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
	// Adam step count. Without a Scaler, Applied 0 means Start (no step
	// was skipped); with one, Applied is taken as given, 0 included.
	Scaler  *GradScaler
	Applied int
}

// TrainResult is a finished training run.
type TrainResult struct {
	Losses  []float64
	Scales  []float64 // f16: the loss scale of every step
	Applied int       // optimizer steps applied (skipped overflow steps excluded)
	Params  []*ir.Value
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

// Train runs a lowered train program: the step plan, Steps times, on the
// local launcher's workers, made once for the whole run. Each rank keeps
// the blocks of its parameters and optimizer states from one step to the
// next in its backend's memory (they never leave the rank; Snapshot copies
// them out only when asked, e.g. for a checkpoint); the trainer feeds the
// per-step batches and scalars (learning rate after its schedule, Adam's
// bias corrections, the loss scale). cfg.OnStep, if given, sees every
// step; an error from it stops the run.
func Train(ctx context.Context, p *lower.Plan, opts Options, cfg TrainConfig) (*TrainResult, error) {
	opts.files = &npyCache{} // inputs are read from disk once, not every step
	l, err := NewLocal(ctx, p.Exec, opts)
	if err != nil {
		return nil, err
	}
	return TrainOn(ctx, l, p, opts, cfg)
}

// TrainOn runs the training loop under any launcher: every process runs
// it with its own ranks; the lead gets the results (the final parameters
// and snapshots are assembled there), every process the losses.
func TrainOn(ctx context.Context, l Launcher, p *lower.Plan, opts Options, cfg TrainConfig) (*TrainResult, error) {
	if p.Graph.Train == nil {
		return nil, fmt.Errorf("the program has no train block")
	}
	cache := opts.files
	if cache == nil {
		cache = &npyCache{}
	}
	tr := &trainer{p: p, l: l, opts: opts, cache: cache}
	if err := tr.start(cfg.Initial); err != nil {
		return nil, err
	}
	return tr.run(ctx, cfg)
}

// trainer is one training run's state: per rank of this process, the
// carried blocks.
type trainer struct {
	p     *lower.Plan
	l     Launcher
	opts  Options
	cache *npyCache
	ranks []int      // l.Ranks(), asked once
	state [][]Buffer // per rank of l.Ranks(), per Plan.Carry
	// carried maps a source to its index in Plan.Carry, pos a rank to its
	// index in l.Ranks().
	carried, pos map[int]int
}

// start places every rank's initial carried state: from a checkpoint (any
// mesh: the logical tensors are cut to this mesh's blocks), or nothing
// (the first step runs the initialisers).
func (tr *trainer) start(initial map[string]*Tensor) error {
	ex := tr.p.Exec
	ranks := tr.l.Ranks()
	tr.ranks = ranks
	tr.state = make([][]Buffer, len(ranks))
	tr.pos, tr.carried = map[int]int{}, map[int]int{}
	for k, r := range ranks {
		tr.state[k] = make([]Buffer, len(ex.Carry))
		tr.pos[r] = k
	}
	for i, si := range ex.Carry {
		tr.carried[si] = i
	}
	if initial == nil {
		return nil
	}
	for i, si := range ex.Carry {
		src := &ex.Sources[si]
		full, ok := initial[src.Name]
		if !ok {
			return fmt.Errorf("the checkpoint has no %s", src.Name)
		}
		if full.DType != src.DType || !sameShape(full.Shape, src.Shape) {
			return fmt.Errorf("the checkpoint's %s is %s, the program declares %s", src.Name, ir.Type{DType: full.DType, Shape: full.Shape}, ir.Type{DType: src.DType, Shape: src.Shape})
		}
		for k, r := range ranks {
			if !ex.HeldBy(src, r) {
				continue // another pipeline stage's
			}
			b, err := tr.l.Worker(r).BackendOf(src.Host).CopyIn(Scatter(ex.Mesh, full, src.Placement, r))
			if err != nil {
				return err
			}
			tr.state[k][i] = b
		}
	}
	return nil
}

// snapshot assembles the logical value of every carried tensor by name
// (at the lead; nil elsewhere). Every process must call it: the blocks
// travel to the lead.
func (tr *trainer) snapshot(ctx context.Context) (map[string]*Tensor, error) {
	ex := tr.p.Exec
	specs := make([]plan.Tensor, len(ex.Carry))
	for i, si := range ex.Carry {
		specs[i] = ex.Sources[si]
	}
	full, err := tr.l.Gather(ctx, specs, tr.state, false)
	if err != nil || full == nil {
		return nil, err
	}
	out := map[string]*Tensor{}
	for i, s := range specs {
		out[s.Name] = full[i]
	}
	return out, nil
}

// feeds builds each rank's Feed for one step: the batch blocks, the
// per-step scalars and the carried state.
func (tr *trainer) feeds(batches map[int]*Tensor, hyper map[int]float64) func(rank int) Feed {
	ex := tr.p.Exec
	return func(r int) Feed {
		w := tr.l.Worker(r)
		return func(src int) (Buffer, error) {
			be := w.BackendOf(ex.Sources[src].Host) // a host-tier source is fed to the host
			if b, ok := batches[src]; ok {
				return be.CopyIn(Scatter(ex.Mesh, b, ex.Sources[src].Placement, r))
			}
			if h, ok := hyper[src]; ok {
				return fedScalar(be, ex.Sources[src].DType, h)
			}
			if i, ok := tr.carried[src]; ok && tr.state[tr.pos[r]][i] != nil {
				// the worker owns it from here: the step's carried value
				// replaces it (and a reference kept here would hold the
				// old blocks alive through the step after the worker
				// has freed them)
				b := tr.state[tr.pos[r]][i]
				tr.state[tr.pos[r]][i] = nil
				return b, nil
			}
			return nil, nil
		}
	}
}

// fedScalar is a per-step scalar (the learning rate, a bias correction,
// the loss scale) on be: on a rank's CPU from its arena, where the rank
// puts it back when its last reader is done, so that a step feeds its
// scalars without allocating (a fresh tensor per scalar per rank was 27
// of the 97 objects a Megatron MLP mesh step allocated); elsewhere copied
// in.
func fedScalar(be Backend, dt ir.DType, v float64) (Buffer, error) {
	if c, ok := be.(*CPU); ok && c.alloc() != nil {
		t := uninitialised(c.alloc(), dt, nil)
		setScalar(t, v)
		return t, nil
	}
	s := NewTensor(dt, nil)
	setScalar(s, v)
	return be.CopyIn(s)
}

func (tr *trainer) run(ctx context.Context, cfg TrainConfig) (*TrainResult, error) {
	p, t := tr.p, tr.p.Graph.Train
	res := &TrainResult{Params: t.Params}
	o := t.Optimizer
	var scaler *GradScaler
	if t.Hyper["loss_scale"] != nil {
		scaler = NewGradScaler()
		if cfg.Scaler != nil {
			scaler = cfg.Scaler
		}
	}
	applied := cfg.Start // optimizer steps taken (an overflow skips one)
	if cfg.Applied > 0 || cfg.Scaler != nil {
		// a resumed f16 run's count as saved, 0 included: when every
		// step so far overflowed, Start would count skipped steps in
		// Adam's bias corrections
		applied = cfg.Applied
	}
	src := func(v *ir.Value) int { return p.SourceIndex[v] }
	for step := cfg.Start + 1; step <= t.Steps; step++ {
		start := time.Now()
		lr := t.LR(step)
		hyper := map[int]float64{}
		if v := t.Hyper["lr"]; v != nil {
			hyper[src(v)] = lr
		}
		if v := t.Hyper["bc1"]; v != nil {
			hyper[src(v)] = 1 - math.Pow(o.Beta1, float64(applied+1))
		}
		if v := t.Hyper["bc2"]; v != nil {
			hyper[src(v)] = 1 - math.Pow(o.Beta2, float64(applied+1))
		}
		scale := 1.0
		if scaler != nil {
			scale = scaler.Scale
			hyper[src(t.Hyper["loss_scale"])] = scale
			if v := t.Hyper[train.HostLossScale]; v != nil {
				hyper[src(v)] = scale // offload: the host unscales with the same scale
			}
		}
		batches := map[int]*Tensor{}
		for _, bi := range t.Batches {
			b, err := batchFor(bi, step, tr.opts.Seed, tr.cache)
			if err != nil {
				return nil, fmt.Errorf("step %d: batch of %s: %v", step, bi.Dataset.Name, err)
			}
			batches[src(bi.Source)] = b
		}
		rs, wall, err := tr.l.Exec(ctx, tr.feeds(batches, hyper))
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
		}
		for k, rr := range rs {
			copy(tr.state[k], rr.Carry)
			rr.Stats.Held, rr.Stats.HostHeld = 0, 0
			for i, b := range rr.Carry {
				switch {
				case b == nil: // another pipeline rank's
				case p.Exec.Sources[p.Exec.Carry[i]].Host:
					rr.Stats.HostHeld += b.Bytes()
				default:
					rr.Stats.Held += b.Bytes()
				}
			}
		}
		run, err := collect(ctx, tr.l, rs, wall, true)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step, err)
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
			if err := cfg.OnStep(StepInfo{Step: step, Steps: t.Steps, Loss: loss, LR: lr, Wall: time.Since(start), Run: run, Snapshot: func() (map[string]*Tensor, error) { return tr.snapshot(ctx) }, Scale: scale, Skipped: skipped, Applied: applied, Scaler: scaler}); err != nil {
				return nil, err
			}
		}
		if step < t.Steps {
			for i, r := range tr.ranks {
				if rs[i] != nil {
					tr.l.Worker(r).ReuseTimeline(rs[i].Stats.Events)
				}
			}
		}
	}
	if res.Last == nil {
		return nil, fmt.Errorf("nothing to do: the run starts after step %d of %d", cfg.Start, t.Steps)
	}
	final, err := tr.snapshot(ctx)
	if err != nil {
		return nil, fmt.Errorf("final parameters: %w", err)
	}
	if final != nil {
		for _, prm := range t.Params {
			full, ok := final[prm.Name]
			if !ok {
				return nil, fmt.Errorf("param %s is not carried between steps", prm.Name)
			}
			res.Final = append(res.Final, full)
		}
	}
	return res, nil
}

// batchFor builds the logical batch of a dataset input for a step (1-based).
// A loaded dataset is read in a shuffled order, a new permutation each
// epoch, drawn from the seed; a random initialiser is an endless stream
// whose rows step after step are fresh and the same on every mesh.
func batchFor(bi ir.BatchInput, step int, seed uint64, cache *npyCache) (*Tensor, error) {
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
