package ir

import "math"

// Train is a checked train block.
type Train struct {
	Pos        Pos
	Loss       *Value
	Optimizer  Optimizer
	Steps      int
	Zero       int
	DataAxis   int     // the mesh axis of data parallelism, which ZeRO shards over
	Clip       float64 // max global gradient norm; 0 = no clipping
	Schedule   Schedule
	Precision  string // "" (the declared dtypes), "bf16" or "f16": compute in half, f32 master weights
	Accumulate int    // micro-batches per step (gradient accumulation)
	Batch      int    // rows per step drawn from each input (0: the whole input every step)
	Batches    []BatchInput
	Params     []*Value
	Grads      map[*Value]*Value // param → its gradient
	// Views are the half-precision copies of the params the forward uses
	// (precision = bf16 | f16); gradients are taken with respect to them.
	Views map[*Value]*Value
	// Seen is, per float param, the value the block's forward reads: the
	// param, its view or (ZeRO with mixed precision or offload, ZeRO-3)
	// the gather of its split storage; the micro-batches' gradients are
	// taken with respect to it and summed.
	Seen map[*Value]*Value
	// Reduced marks gradients already reduced into their storage placement
	// during the backward (ZeRO-2 and 3).
	Reduced map[*Value]bool
	// FoundInf is the f16 loss scaler's overflow flag (1: skip the step).
	FoundInf *Value
	Carry    []Carry
	Hyper    map[string]*Value // "lr", "bc1", "bc2": fed every step
	// Pipe is set when the mesh has a pipeline axis.
	Pipe *PipeTrain
	// Offload is ZeRO-Offload's host tier: "" (none), "optimizer" (the
	// master weights, optimizer states and the update live in host
	// memory) or "optimizer+params" (also the device's copy of each
	// parameter is fetched for each use instead of kept for the step).
	Offload string
	// OnHost marks the sources the step keeps in the host tier (params,
	// optimizer states, the update's per-step scalars).
	OnHost map[*Value]bool
}

// Optimizer is the update rule and its hyperparameters (PyTorch defaults).
type Optimizer struct {
	Kind        string // sgd, momentum, adam, adamw
	LR          float64
	Momentum    float64
	Beta1       float64
	Beta2       float64
	Eps         float64
	WeightDecay float64
}

// Schedule is the learning-rate schedule.
type Schedule struct {
	Kind   string // "constant" or "cosine" (linear warm-up, then cosine to MinLR)
	Warmup int
	MinLR  float64
}

// BatchInput is a per-step batch source fed by the trainer from a dataset
// input: rows of Dataset (a .npy file, iterated in a seeded shuffled order,
// epoch after epoch) or, for a random initialiser, the next rows of an
// endless deterministic stream.
type BatchInput struct {
	Source  *Value
	Dataset *Value
}

// Carry pairs a step's input state with the value that replaces it.
type Carry struct {
	Source *Value
	Next   *Value
}

// LR is the learning rate at step (1-based).
func (t *Train) LR(step int) float64 {
	lr := t.Optimizer.LR
	s := t.Schedule
	if s.Kind != "cosine" {
		return lr
	}
	if step <= s.Warmup {
		return lr * float64(step) / float64(max(1, s.Warmup))
	}
	span := max(1, t.Steps-s.Warmup)
	prog := math.Min(1, float64(step-s.Warmup)/float64(span))
	return s.MinLR + 0.5*(lr-s.MinLR)*(1+math.Cos(math.Pi*prog))
}
