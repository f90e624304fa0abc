package lang

import (
	"fmt"
	"math"

	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/sbp"
	"github.com/meshrun/meshrun/train"
)

// A train block turns the program into one training step, repeated:
//
//	train {
//	    loss = mse(x @ W + c, t)
//	    optimizer = adam(lr=0.01)
//	    steps = 20
//	}
//
// The checker evaluates the block's settings, then its statements in their
// own scope (once per micro-batch), differentiates the loss (package ad)
// and hands the rest of the step to package train, whose doc says what a
// step holds. With ZeRO-3 or mixed precision the statements see each
// param through its gather or half-precision copy.

// trainSettings are the train block's assignments that configure the step
// rather than compute in it.
var trainSettings = map[string]bool{"steps": true, "zero": true, "clip": true, "optimizer": true, "schedule": true,
	"accumulate": true, "batch": true, "precision": true, "data_axis": true}

func (c *Checker) trainBlock(tb *TrainBlock) {
	if c.scope != nil {
		c.errorf(tb.Pos, "train belongs at top level")
		return
	}
	if c.g.Train != nil {
		c.errorf(tb.Pos, "the program already has a train block at %s", FormatPos(c.g.Train.Pos))
		return
	}
	if c.g.Mesh == nil {
		c.errorf(tb.Pos, "declare a mesh before the train block")
		return
	}
	tr := &Train{Pos: tb.Pos, Steps: 1, Accumulate: 1, Schedule: Schedule{Kind: "constant"}, Grads: map[*Value]*Value{}, Hyper: map[string]*Value{}}
	nerr := len(c.errs)
	opt, optSet := Optimizer{}, false
	var dataAxis *Assign // data_axis = NAME
	// settings first: zero changes how the loss sees the params
	for _, s := range tb.Body {
		a := s.Assign
		if a == nil {
			continue
		}
		switch a.Name {
		case "steps", "zero", "clip", "accumulate", "batch":
			op := c.expr(a.Value)
			if op.num == nil {
				if !op.bad {
					c.errorf(a.Value.Pos, "%s must be a number", a.Name)
				}
				continue
			}
			f := *op.num
			switch a.Name {
			case "steps":
				if f < 1 || f != math.Trunc(f) || f > 1e9 {
					c.errorf(a.Value.Pos, "steps must be a positive integer")
				}
				tr.Steps = int(f)
			case "zero":
				if f != 0 && f != 1 && f != 2 && f != 3 {
					c.errorf(a.Value.Pos, "zero must be 0, 1, 2 or 3 (the ZeRO paper's stages)")
				}
				tr.Zero = int(f)
			case "clip":
				if f <= 0 {
					c.errorf(a.Value.Pos, "clip must be a positive gradient norm")
				}
				tr.Clip = f
			case "accumulate", "batch":
				if f < 1 || f != math.Trunc(f) || f > 1<<30 {
					c.errorf(a.Value.Pos, "%s must be a positive integer", a.Name)
				}
				if a.Name == "accumulate" {
					tr.Accumulate = int(f)
				} else {
					tr.Batch = int(f)
				}
			}
		case "optimizer":
			opt, optSet = c.optimizer(a)
		case "precision":
			_, name := initCall(a.Value)
			switch name {
			case "bf16", "f16", "f32":
				if name != "f32" {
					tr.Precision = name
				}
			default:
				c.errorf(a.Value.Pos, "precision must be bf16, f16 or f32")
			}
		case "schedule":
			c.schedule(a, tr)
		case "data_axis":
			dataAxis = a
		}
	}
	if len(c.errs) > nerr {
		return
	}
	if !optSet {
		c.errorf(tb.Pos, "the train block needs an optimizer, e.g. optimizer = adam(lr=0.001)")
		return
	}
	tr.Optimizer = opt
	if tr.Zero > 0 || dataAxis != nil {
		named, pos := "", tb.Pos
		if dataAxis != nil {
			_, named = initCall(dataAxis.Value)
			pos = dataAxis.Value.Pos
		}
		ax, err := train.DataAxis(c.g, named, tr.Zero)
		if err != nil {
			c.errorf(pos, "%v", err)
			return
		}
		tr.DataAxis = ax
	}
	// the body, in its own scope; with zero = 3 every param is seen through
	// an all-gather from its split storage
	c.override = map[string]operand{}
	defer func() { c.scope, c.fn, c.override = nil, "", nil }()
	tr.Views = map[*Value]*Value{}
	tr.Reduced = map[*Value]bool{}
	seenBy := map[*Value]*Value{} // param → the value its forward uses
	for _, name := range c.globalsInOrder() {
		v := c.globals[name]
		if v.Op != "param" || !v.Type.DType.IsFloat() {
			continue
		}
		seen := v
		if tr.Precision != "" {
			// the forward computes with a half copy of the f32 master weight
			seen = builder{c}.Apply(v.Pos, "cast", nil, ops.T(v), ops.Str(tr.Precision))
			seen.Name = name + "." + tr.Precision
			tr.Views[v] = seen
		}
		// ZeRO-3 stores parameters split and gathers them for the forward
		// (and again for the backward). With mixed precision every stage
		// does the paper's layout: the f32 master weights belong to the
		// optimizer state (split from stage 1 on) and the forward gathers
		// their half copy, which stays alive for the step (stages 1–2).
		if tr.Zero == 3 || (tr.Zero >= 1 && tr.Precision != "") {
			compute := v.Declared
			c.touch(v) // a failed train block leaves the param as declared
			v.Declared = train.Storage(v, compute, tr.DataAxis)
			// with mixed precision seen is the cast of the local shard, so
			// the gather moves 2-byte values
			g := c.add(&Value{Op: "to", Type: seen.Type, Args: []*Value{seen}, Pos: v.Pos, Declared: compute, Name: name + ".gathered"})
			g.Attrs.Regather = tr.Zero == 3
			seen = g
		}
		if seen != v {
			c.override[name] = operand{v: seen}
		}
		seenBy[v] = seen
	}
	if tr.Zero >= 2 {
		// ZeRO-2/3: reduce-scatter each gradient the moment the backward
		// completes it, so full gradients never pile up
		c.onFinal = map[*Value]func(*Value) *Value{}
		defer func() { c.onFinal = nil }()
		for p, seen := range seenBy {
			p := p
			st := train.Storage(p, p.Declared, tr.DataAxis)
			c.onFinal[seen] = func(g *Value) *Value {
				r := c.add(&Value{Op: "to", Type: g.Type, Args: []*Value{g}, Pos: tb.Pos, Declared: st, Name: p.Name + ".grad", Backward: true})
				tr.Reduced[p] = true
				return r
			}
		}
	}
	var scale *Value
	if tr.Precision == "f16" {
		// dynamic loss scaling (PyTorch's GradScaler): the trainer feeds the scale
		scale = c.add(&Value{Op: "hyper", Type: Type{DType: F32, Shape: []int{}}, Name: "loss_scale", Pos: tb.Pos, Declared: sbp.Broadcasts(c.g.Mesh.NumAxes()), Attrs: Attrs{Init: &Init{Kind: "fed"}}})
		tr.Hyper["loss_scale"] = scale
	}
	inputs := c.trainInputs(tb, tr)
	if len(c.errs) > nerr {
		return
	}
	k := tr.Accumulate
	tr.Grads = map[*Value]*Value{}
	var total *Value
	for micro := 0; micro < k; micro++ {
		for _, name := range c.globalsInOrder() {
			if x, ok := inputs[name]; ok {
				mb := train.MicroBatch(builder{c}, x, micro, k, tb.Pos)
				if tr.Precision != "" && mb.Type.DType.IsFloat() {
					mb = builder{c}.Apply(tb.Pos, "cast", nil, ops.T(mb), ops.Str(tr.Precision))
				}
				c.override[name] = operand{v: mb}
			}
		}
		c.scope, c.fn = map[string]operand{}, "train"
		for _, s := range tb.Body {
			if s.Assign != nil {
				if trainSettings[s.Assign.Name] {
					continue
				}
				c.stmt(s)
				continue
			}
			if s.For != nil {
				c.stmt(s)
				continue
			}
			if micro == 0 {
				c.errorf(s.Pos, "a train block holds assignments and for loops only (loss = ..., optimizer = ..., steps = ...)")
			}
		}
		if len(c.errs) > nerr {
			return
		}
		lossOp, ok := c.scope["loss"]
		if !ok {
			c.errorf(tb.Pos, "the train block needs loss = ...")
			return
		}
		if lossOp.v == nil || lossOp.v.Type.Rank() != 0 || !lossOp.v.Type.DType.IsFloat() {
			c.errorf(tb.Pos, "loss must be a float scalar")
			return
		}
		loss := lossOp.v
		if loss.Type.DType != F32 && tr.Precision != "" {
			loss = builder{c}.Apply(tb.Pos, "cast", nil, ops.T(loss), ops.Str("f32"))
		}
		if k > 1 {
			// micro-batches of equal size: the step's loss is their mean
			loss = c.mk(tb.Pos, "mul", []operand{{v: loss}, numOp(1 / float64(k))}, nil)
		}
		seed := loss
		if scale != nil {
			seed = c.mk(tb.Pos, "mul", []operand{{v: loss}, {v: scale}}, nil)
		}
		if len(c.errs) > nerr {
			return // an internal error built an invalid loss
		}
		// each micro-batch's backward follows its forward, so only one
		// micro-batch's activations are alive at a time
		adj, err := c.backward(seed)
		if err != nil {
			c.errorf(tb.Pos, "%v", err)
			return
		}
		for _, v := range c.g.Values[:loss.ID] {
			if v.Op != "param" || !v.Type.DType.IsFloat() {
				continue
			}
			g := adj.Of[v]
			if seen := seenBy[v]; seen != v && tr.Zero >= 2 {
				g = adj.Of[seen] // reduced in the backward (onFinal)
			} else if view := tr.Views[v]; view != nil {
				g = adj.Of[view] // reduce the half gradient, cast it up after
			}
			if g == nil {
				continue
			}
			if prev := tr.Grads[v]; prev != nil {
				g = c.mk(tb.Pos, "add", []operand{{v: prev}, {v: g}}, nil)
			}
			tr.Grads[v] = g
		}
		if total == nil {
			total = loss
		} else {
			total = c.mk(tb.Pos, "add", []operand{{v: total}, {v: loss}}, nil)
		}
	}
	tr.Loss = total
	if len(c.errs) > nerr {
		return
	}
	if err := train.Step(builder{c}, tr); err != nil {
		c.errorf(tb.Pos, "%v", err)
	}
	if len(c.errs) > nerr {
		return
	}
	c.g.Train = tr
	c.g.Outputs = append(c.g.Outputs, &Output{Name: "loss", Value: tr.Loss, Placement: sbp.Broadcasts(c.g.Mesh.NumAxes()), Pos: tb.Pos})
	if tr.FoundInf != nil {
		c.g.Outputs = append(c.g.Outputs, &Output{Name: "found_inf", Value: tr.FoundInf, Placement: sbp.Broadcasts(c.g.Mesh.NumAxes()), Pos: tb.Pos})
	}
}

func (c *Checker) optimizer(a *Assign) (Optimizer, bool) {
	call, _ := initCall(a.Value)
	if call == nil || call.Module != "" {
		c.errorf(a.Value.Pos, "optimizer must be sgd(...), momentum(...), adam(...) or adamw(...)")
		return Optimizer{}, false
	}
	opt, ok := train.Defaults[call.Name]
	if !ok {
		c.errorf(call.Pos, "unknown optimizer %q (want sgd, momentum, adam or adamw)", call.Name)
		return Optimizer{}, false
	}
	fields := map[string]*float64{"lr": &opt.LR}
	switch opt.Kind {
	case "momentum":
		fields["momentum"] = &opt.Momentum
	case "adam", "adamw":
		fields["beta1"], fields["beta2"], fields["eps"] = &opt.Beta1, &opt.Beta2, &opt.Eps
		fields["weight_decay"] = &opt.WeightDecay
	}
	lrSet := false
	for _, arg := range call.Args {
		dst, ok := fields[arg.Name]
		if arg.Name == "" || !ok {
			c.errorf(arg.Pos, "%s takes keyword arguments: %s", call.Name, keys(fields))
			return Optimizer{}, false
		}
		op := c.expr(arg.Value)
		if op.num == nil || *op.num < 0 {
			c.errorf(arg.Pos, "%s must be a number >= 0", arg.Name)
			return Optimizer{}, false
		}
		*dst = *op.num
		lrSet = lrSet || arg.Name == "lr"
	}
	if !lrSet {
		c.errorf(call.Pos, "%s needs lr=...", call.Name)
		return Optimizer{}, false
	}
	return opt, true
}

func keys(m map[string]*float64) string {
	var ks []string
	for _, k := range []string{"lr", "momentum", "beta1", "beta2", "eps", "weight_decay"} {
		if _, ok := m[k]; ok {
			ks = append(ks, k)
		}
	}
	return fmt.Sprint(ks)
}

func (c *Checker) schedule(a *Assign, tr *Train) {
	call, name := initCall(a.Value)
	if name == "constant" {
		return
	}
	if call == nil || call.Name != "cosine" {
		c.errorf(a.Value.Pos, "schedule must be constant or cosine(warmup=N, min_lr=X)")
		return
	}
	tr.Schedule.Kind = "cosine"
	for _, arg := range call.Args {
		op := c.expr(arg.Value)
		if op.num == nil || *op.num < 0 {
			c.errorf(arg.Pos, "cosine takes warmup=N and min_lr=X, numbers >= 0")
			return
		}
		switch arg.Name {
		case "warmup":
			tr.Schedule.Warmup = int(*op.num)
		case "min_lr":
			tr.Schedule.MinLR = *op.num
		default:
			c.errorf(arg.Pos, "cosine takes warmup=N and min_lr=X")
			return
		}
	}
}
