package lang

import (
	"fmt"
	"math"
	"strings"

	"github.com/meshrun/meshrun/train"
)

// trainSettings reads a train block's settings (steps, optimizer, zero,
// ...) into a new Train, and resolves its data-parallel axis.
func (c *Checker) trainSettings(tb *TrainBlock) (*Train, bool) {
	tr := &Train{Pos: tb.Pos, Steps: 1, Accumulate: 1, Schedule: Schedule{Kind: "constant"}, Grads: map[*Value]*Value{}, Hyper: map[string]*Value{}}
	nerr := len(c.errs)
	opt, optSet := Optimizer{}, false
	var dataAxis *Assign // data_axis = NAME
	accSet, microSet := false, false
	for _, s := range tb.Body {
		a := s.Assign
		if a == nil {
			continue
		}
		switch a.Name {
		case "steps", "zero", "clip", "accumulate", "batch":
			c.numberSetting(a, tr)
			accSet = accSet || a.Name == "accumulate"
		case "microbatches":
			if accSet || microSet {
				c.errorf(a.Pos, "give either accumulate or microbatches (they are the same setting)")
			}
			microSet = true
			c.numberSetting(a, tr)
		case "pipeline":
			c.pipelineSetting(a, tr)
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
		case "offload":
			c.offloadSetting(a, tr)
		}
	}
	if len(c.errs) > nerr {
		return nil, false
	}
	if !optSet {
		c.errorf(tb.Pos, "the train block needs an optimizer, e.g. optimizer = adam(lr=0.001)")
		return nil, false
	}
	tr.Optimizer = opt
	c.pipelineDefaults(tb, tr, microSet || accSet)
	if len(c.errs) > nerr {
		return nil, false
	}
	if tr.Zero > 0 || dataAxis != nil {
		named, pos := "", tb.Pos
		if dataAxis != nil {
			_, named = initCall(dataAxis.Value)
			pos = dataAxis.Value.Pos
		}
		ax, err := train.DataAxis(c.g, named, tr.Zero)
		if err != nil {
			c.errorf(pos, "%v", err)
			return nil, false
		}
		tr.DataAxis = ax
	}
	return tr, true
}

// numberSetting reads steps, zero, clip, accumulate or batch.
func (c *Checker) numberSetting(a *Assign, tr *Train) {
	op := c.expr(a.Value)
	if op.num == nil {
		if !op.bad {
			c.errorf(a.Value.Pos, "%s must be a number", a.Name)
		}
		return
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
	case "accumulate", "batch", "microbatches":
		if f < 1 || f != math.Trunc(f) || f > 1<<30 {
			c.errorf(a.Value.Pos, "%s must be a positive integer", a.Name)
		}
		if a.Name != "batch" {
			tr.Accumulate = int(f)
		} else {
			tr.Batch = int(f)
		}
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

// offloadSetting reads offload = optimizer | optimizer+params: names
// joined by +, in that order (ZeRO-Offload's two tiers).
func (c *Checker) offloadSetting(a *Assign, tr *Train) {
	var names []string
	terms := []*Term{a.Value.Left}
	for _, op := range a.Value.Ops {
		if op.Op != "+" {
			terms = nil
			break
		}
		terms = append(terms, op.Right)
	}
	for _, t := range terms {
		if len(t.Ops) != 0 || t.Left.Prim == nil || t.Left.Prim.Name == nil {
			names = nil
			break
		}
		names = append(names, *t.Left.Prim.Name)
	}
	switch strings.Join(names, "+") {
	case "optimizer", "optimizer+params":
		tr.Offload = strings.Join(names, "+")
	default:
		c.errorf(a.Value.Pos, "offload must be optimizer or optimizer+params (ZeRO-Offload: the optimizer states and the update, and with +params the parameters, in host memory)")
	}
}
