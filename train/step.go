package train

import (
	"errors"

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
	loss := tr.Loss
	pos := tr.Pos
	n := b.Graph().Mesh.NumAxes()
	bcast := sbp.Broadcasts(n)
	hyper := func(name string) *ir.Value {
		v := b.Add(&ir.Value{Op: "hyper", Type: ir.Type{DType: loss.Type.DType, Shape: []int{}}, Name: name, Pos: pos, Declared: bcast, Attrs: ir.Attrs{Init: &ir.Init{Kind: "fed"}}})
		tr.Hyper[name] = v
		return v
	}
	mk := func(name string, args ...ops.Arg) *ir.Value {
		v := b.Apply(pos, name, nil, args...)
		v.Backward = true
		return v
	}
	for _, v := range b.Graph().Values[:loss.ID] {
		if v.Op == "param" && tr.Grads[v] != nil {
			tr.Params = append(tr.Params, v)
		}
	}
	if len(tr.Params) == 0 {
		return errors.New("loss depends on no float param: nothing to train")
	}
	// Reduce each gradient straight into the placement the optimizer keeps
	// its parameter's state in: all-reduce for plain data parallelism,
	// reduce-scatter with ZeRO (the state is split over the data-parallel axis).
	storage := map[*ir.Value]sbp.NdSBP{}
	for _, p := range tr.Params {
		st := p.Declared
		if tr.Zero >= 1 {
			st = Storage(p, p.Declared, tr.DataAxis)
		}
		storage[p] = st
		g := tr.Grads[p]
		if !tr.Reduced[p] {
			g = b.Add(&ir.Value{Op: "to", Type: g.Type, Args: []*ir.Value{g}, Pos: pos, Declared: st, Name: p.Name + ".grad", Backward: true})
		}
		if g.Type.DType != p.Type.DType {
			g = mk("cast", ops.T(g), ops.Str(p.Type.DType.String()))
		}
		if s := tr.Hyper["loss_scale"]; s != nil {
			g = mk("div", ops.T(g), ops.T(s)) // unscale
		}
		tr.Grads[p] = g
	}
	if tr.Hyper["loss_scale"] != nil {
		var found *ir.Value
		for _, p := range tr.Params {
			f := mk("nonfinite", ops.T(tr.Grads[p]))
			if found == nil {
				found = f
			} else {
				found = mk("maximum", ops.T(found), ops.T(f))
			}
		}
		found.Name = "found_inf"
		tr.FoundInf = found
	}
	lr := hyper("lr")
	var coef *ir.Value
	if tr.Clip > 0 {
		var total *ir.Value
		for _, p := range tr.Params {
			g := tr.Grads[p]
			sq := mk("sum", ops.T(mk("mul", ops.T(g), ops.T(g))))
			if total == nil {
				total = sq
			} else {
				total = mk("add", ops.T(total), ops.T(sq))
			}
		}
		norm := mk("sqrt", ops.T(total))
		// PyTorch's clip_grad_norm_: coef = min(1, max_norm / (norm + 1e-6))
		coef = mk("minimum", ops.N(1), ops.T(mk("div", ops.N(tr.Clip), ops.T(mk("add", ops.T(norm), ops.N(1e-6))))))
	}
	var bc1, bc2 *ir.Value
	o := tr.Optimizer
	if o.Kind == "adam" || o.Kind == "adamw" {
		bc1, bc2 = hyper("bc1"), hyper("bc2")
	}
	for _, p := range tr.Params {
		g := tr.Grads[p]
		if coef != nil {
			g = mk("mul", ops.T(g), ops.T(coef))
		}
		if o.Kind == "adam" && o.WeightDecay > 0 {
			// torch.optim.Adam's weight_decay is L2: g ← g + wd·p
			g = mk("add", ops.T(g), ops.T(mk("mul", ops.T(p), ops.N(o.WeightDecay))))
		}
		storage := storage[p]
		state := func(suffix string) *ir.Value {
			return b.Add(&ir.Value{Op: "state", Type: p.Type, Name: p.Name + "." + suffix, Pos: pos, Declared: storage, Attrs: ir.Attrs{Init: &ir.Init{Kind: "zeros"}}})
		}
		var next *ir.Value
		switch o.Kind {
		case "sgd":
			next = mk("sub", ops.T(p), ops.T(mk("mul", ops.T(g), ops.T(lr))))
		case "momentum":
			buf := state("momentum")
			nb := mk("add", ops.T(mk("mul", ops.T(buf), ops.N(o.Momentum))), ops.T(g))
			tr.Carry = append(tr.Carry, ir.Carry{Source: buf, Next: nb})
			next = mk("sub", ops.T(p), ops.T(mk("mul", ops.T(nb), ops.T(lr))))
		case "adam", "adamw":
			m, v := state("exp_avg"), state("exp_avg_sq")
			nm := mk("adam_moment", ops.T(m), ops.T(g), ops.N(o.Beta1))
			nv := mk("adam_moment2", ops.T(v), ops.T(g), ops.N(o.Beta2))
			tr.Carry = append(tr.Carry, ir.Carry{Source: m, Next: nm}, ir.Carry{Source: v, Next: nv})
			// PyTorch: p ← p·(1 − lr·wd) (adamw), then p -= lr/bc1 · m / (√v/√bc2 + eps)
			decay := ops.N(1)
			if o.Kind == "adamw" && o.WeightDecay > 0 {
				decay = ops.T(mk("sub", ops.N(1), ops.T(mk("mul", ops.T(lr), ops.N(o.WeightDecay)))))
			}
			next = mk("adam_update", ops.T(p), ops.T(nm), ops.T(nv), ops.T(mk("div", ops.T(lr), ops.T(bc1))), ops.T(mk("sqrt", ops.T(bc2))), ops.N(o.Eps), decay)
		}
		next.Name = p.Name + ".next"
		tr.Carry = append([]ir.Carry{{Source: p, Next: next}}, tr.Carry...)
	}
	if tr.FoundInf != nil {
		// an overflow skips the step: parameters and states keep their values
		for i := range tr.Carry {
			cr := &tr.Carry[i]
			cr.Next = mk("where", ops.T(tr.FoundInf), ops.T(cr.Source), ops.T(cr.Next))
			cr.Next.Name = cr.Source.Name + ".next"
		}
	}
	return nil
}
