package train

import (
	"errors"
	"math"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/sbp"
)

// Step appends to the graph the rest of a training step whose loss and
// gradients tr holds: each gradient reduced into the placement its
// parameter's optimizer state is stored in, loss-scale unscaling and the
// overflow flag, clipping, and the optimizer update, with the carried
// states and fed scalars recorded in tr.
func Step(b ops.Builder, tr *ir.Train) error {
	for _, v := range b.Graph().Values[:tr.Loss.ID] {
		if v.Op == "param" && tr.Grads[v] != nil {
			tr.Params = append(tr.Params, v)
		}
	}
	if len(tr.Params) == 0 {
		return errors.New("loss depends on no float param: nothing to train")
	}
	s := &step{b: b, tr: tr, storage: map[*ir.Value]sbp.NdSBP{}, shared: map[sharedKey]*ir.Value{}}
	s.reduce()
	if tr.Hyper["loss_scale"] != nil {
		s.overflowFlag()
	}
	lr := s.hyper("lr")
	coef := s.clipCoef()
	var bc1, bc2 *ir.Value
	if k := tr.Optimizer.Kind; k == "adam" || k == "adamw" {
		bc1, bc2 = s.hyper("bc1"), s.hyper("bc2")
	}
	for _, p := range tr.Params {
		g := tr.Grads[p]
		if coef != nil {
			g = s.op("mul", ops.T(g), ops.T(coef))
		}
		next := s.update(p, g, lr, bc1, bc2)
		next.Name = p.Name + ".next"
		tr.Carry = append([]ir.Carry{{Source: p, Next: next}}, tr.Carry...)
	}
	if tr.FoundInf != nil {
		// an overflow skips the step: parameters and states keep their values
		for i := range tr.Carry {
			cr := &tr.Carry[i]
			cr.Next = s.op("where", ops.T(tr.FoundInf), ops.T(cr.Source), ops.T(cr.Next))
			cr.Next.Name = cr.Source.Name + ".next"
		}
	}
	return nil
}

// step is one Step under construction.
type step struct {
	b       ops.Builder
	tr      *ir.Train
	storage map[*ir.Value]sbp.NdSBP // param → where its optimizer state lives
	// shared holds the scalars every parameter's update reads (the
	// optimizer's constants, lr/bc1, √bc2): each is made once per step,
	// not once per parameter, so that every rank runs it once. On the
	// tiny models a step's cost is mostly its instructions' count.
	shared map[sharedKey]*ir.Value
}

// sharedKey names a shared scalar: an op of the step's hyperparameters
// ("lr/bc1", "sqrt bc2", "decay"), or a constant of a value (its bits:
// +0 and −0 are two constants) and dtype.
type sharedKey struct {
	what string
	bits uint64
	dt   ir.DType
}

// once is the shared scalar of key, made by mk the first time.
func (s *step) once(key sharedKey, mk func() *ir.Value) *ir.Value {
	v := s.shared[key]
	if v == nil {
		v = mk()
		s.shared[key] = v
	}
	return v
}

// num is the constant f in dtype dt, made once per step.
func (s *step) num(f float64, dt ir.DType) ops.Arg {
	return ops.T(s.once(sharedKey{what: "const", bits: math.Float64bits(f), dt: dt}, func() *ir.Value { return s.b.Const(f, dt, s.tr.Pos) }))
}

// op applies a backward op at the train block.
func (s *step) op(name string, args ...ops.Arg) *ir.Value {
	v := s.b.Apply(s.tr.Pos, name, nil, args...)
	v.Backward = true
	return v
}

// hyper is a scalar the trainer feeds every step; under offload the
// update that reads it runs on the host, and so it is fed there.
func (s *step) hyper(name string) *ir.Value {
	v := s.b.Add(&ir.Value{Op: "hyper", Type: ir.Type{DType: s.tr.Loss.Type.DType, Shape: []int{}}, Name: name, Pos: s.tr.Pos,
		Declared: sbp.Broadcasts(s.b.Graph().Mesh.NumAxes()), Attrs: ir.Attrs{Init: &ir.Init{Kind: "fed"}}})
	s.tr.Hyper[name] = v
	s.onHost(v)
	return v
}

// onHost marks a source of the update as kept in the host tier (offload).
func (s *step) onHost(v *ir.Value) {
	if s.tr.Offload == "" {
		return
	}
	if s.tr.OnHost == nil {
		s.tr.OnHost = map[*ir.Value]bool{}
	}
	s.tr.OnHost[v] = true
}

// lossScale is the f16 loss scale the gradients are divided by: the one
// the forward multiplies the loss by, or under offload a second feed of
// the same scale on the host, where the gradients are unscaled.
func (s *step) lossScale() *ir.Value {
	scale := s.tr.Hyper["loss_scale"]
	if scale == nil || s.tr.Offload == "" {
		return scale
	}
	if h := s.tr.Hyper[HostLossScale]; h != nil {
		return h
	}
	return s.hyper(HostLossScale)
}

// HostLossScale names the host tier's copy of the loss scale (offload with
// f16), which the trainer feeds with the same value as loss_scale.
const HostLossScale = "loss_scale.host"

// reduce converts each gradient straight into the placement the optimizer
// keeps its parameter's state in: all-reduce for plain data parallelism,
// reduce-scatter with ZeRO (the state is split over the data-parallel
// axis); then to the parameter's dtype, unscaled.
func (s *step) reduce() {
	tr := s.tr
	for _, p := range tr.Params {
		st := p.Declared
		if tr.Zero >= 1 {
			st = Storage(p, p.Declared, tr.DataAxis)
		}
		s.storage[p] = st
		g := tr.Grads[p]
		if !tr.Reduced[p] {
			g = s.b.Add(&ir.Value{Op: "to", Type: g.Type, Args: []*ir.Value{g}, Pos: tr.Pos, Declared: st, Name: p.Name + ".grad", Backward: true})
		}
		if tr.Offload != "" && !tr.Reduced[p] {
			// ZeRO-Offload: the reduced gradient goes to the host in the
			// precision it was reduced in; the rest of the step runs there
			// (ZeRO-2/3 send each one the moment the backward reduces it)
			g = s.b.Add(&ir.Value{Op: "offload", Type: g.Type, Args: []*ir.Value{g}, Pos: tr.Pos, Name: p.Name + ".grad.host", Backward: true})
		}
		if g.Type.DType != p.Type.DType {
			g = s.op("cast", ops.T(g), ops.Str(p.Type.DType.String()))
		}
		if scale := s.lossScale(); scale != nil {
			g = s.op("div", ops.T(g), ops.T(scale)) // unscale
		}
		tr.Grads[p] = g
	}
}

// overflowFlag is the loss scaler's test: 1 when any gradient holds an inf
// or NaN.
func (s *step) overflowFlag() {
	var found *ir.Value
	for _, p := range s.tr.Params {
		f := s.op("nonfinite", ops.T(s.tr.Grads[p]))
		if found == nil {
			found = f
		} else {
			found = s.op("maximum", ops.T(found), ops.T(f))
		}
	}
	found.Name = "found_inf"
	s.tr.FoundInf = found
}

// clipCoef is PyTorch's clip_grad_norm_ factor min(1, max_norm / (norm +
// 1e-6)) over all gradients, or nil without clipping.
func (s *step) clipCoef() *ir.Value {
	if s.tr.Clip <= 0 {
		return nil
	}
	var total *ir.Value
	for _, p := range s.tr.Params {
		g := s.tr.Grads[p]
		sq := s.op("sum", ops.T(s.op("mul", ops.T(g), ops.T(g))))
		if total == nil {
			total = sq
		} else {
			total = s.op("add", ops.T(total), ops.T(sq))
		}
	}
	norm := s.op("sqrt", ops.T(total))
	return s.op("minimum", ops.N(1), ops.T(s.op("div", ops.N(s.tr.Clip), ops.T(s.op("add", ops.T(norm), ops.N(1e-6))))))
}

// update is p's next value under the optimizer, with its states carried.
func (s *step) update(p, g, lr, bc1, bc2 *ir.Value) *ir.Value {
	o, dt := s.tr.Optimizer, p.Type.DType
	if o.Kind == "adam" && o.WeightDecay > 0 {
		// torch.optim.Adam's weight_decay is L2: g ← g + wd·p
		g = s.op("add", ops.T(g), ops.T(s.op("mul", ops.T(p), s.num(o.WeightDecay, dt))))
	}
	state := func(suffix string) *ir.Value {
		st := s.b.Add(&ir.Value{Op: "state", Type: p.Type, Name: p.Name + "." + suffix, Pos: s.tr.Pos, Declared: s.storage[p], Attrs: ir.Attrs{Init: &ir.Init{Kind: "zeros"}}})
		s.onHost(st)
		return st
	}
	switch o.Kind {
	case "momentum":
		buf := state("momentum")
		nb := s.op("add", ops.T(s.op("mul", ops.T(buf), s.num(o.Momentum, dt))), ops.T(g))
		s.tr.Carry = append(s.tr.Carry, ir.Carry{Source: buf, Next: nb})
		return s.op("sub", ops.T(p), ops.T(s.op("mul", ops.T(nb), ops.T(lr))))
	case "adam", "adamw":
		m, v := state("exp_avg"), state("exp_avg_sq")
		nm := s.op("adam_moment", ops.T(m), ops.T(g), s.num(o.Beta1, dt))
		nv := s.op("adam_moment2", ops.T(v), ops.T(g), s.num(o.Beta2, dt))
		s.tr.Carry = append(s.tr.Carry, ir.Carry{Source: m, Next: nm}, ir.Carry{Source: v, Next: nv})
		// PyTorch: p ← p·(1 − lr·wd) (adamw), then p -= lr/bc1 · m / (√v/√bc2 + eps)
		var decay ops.Arg
		if o.Kind == "adamw" && o.WeightDecay > 0 {
			decay = ops.T(s.once(sharedKey{what: "decay", dt: dt}, func() *ir.Value {
				return s.op("sub", ops.N(1), ops.T(s.op("mul", ops.T(lr), s.num(o.WeightDecay, lr.Type.DType))))
			}))
		} else {
			decay = s.num(1, dt)
		}
		stepSize := s.once(sharedKey{what: "lr/bc1", dt: dt}, func() *ir.Value { return s.op("div", ops.T(lr), ops.T(bc1)) })
		rootBC2 := s.once(sharedKey{what: "sqrt bc2", dt: dt}, func() *ir.Value { return s.op("sqrt", ops.T(bc2)) })
		return s.op("adam_update", ops.T(p), ops.T(nm), ops.T(nv), ops.T(stepSize), ops.T(rootBC2), s.num(o.Eps, dt), decay)
	}
	return s.op("sub", ops.T(p), ops.T(s.op("mul", ops.T(g), ops.T(lr)))) // sgd
}
