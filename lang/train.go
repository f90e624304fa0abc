package lang

import (
	"errors"

	"github.com/meshrun/meshrun/ad"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/sbp"
	"github.com/meshrun/meshrun/train"
	"maps"
	"slices"
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

// settingNames are the train block's assignments that configure the step
// rather than compute in it.
var settingNames = map[string]bool{"steps": true, "zero": true, "clip": true, "optimizer": true, "schedule": true,
	"accumulate": true, "batch": true, "precision": true, "data_axis": true, "microbatches": true, "pipeline": true, "offload": true}

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
	nerr := len(c.errs)
	// settings first: zero changes how the loss sees the params
	tr, ok := c.trainSettings(tb)
	if !ok {
		return
	}
	c.override = map[string]operand{}
	defer func() { c.scope, c.fn, c.override = nil, "", nil }()
	seenBy := c.paramViews(tr)
	if tr.Zero >= 2 {
		c.onFinal = c.reduceWhenFinal(tr, seenBy)
		defer func() { c.onFinal = nil }()
	}
	if tr.Precision == "f16" {
		// dynamic loss scaling (PyTorch's GradScaler): the trainer feeds the scale
		tr.Hyper["loss_scale"] = c.add(&Value{Op: "hyper", Type: Type{DType: F32, Shape: []int{}}, Name: "loss_scale", Pos: tb.Pos,
			Declared: sbp.Broadcasts(c.g.Mesh.NumAxes()), Attrs: Attrs{Init: &Init{Kind: "fed"}}})
	}
	inputs := c.trainInputs(tb, tr)
	if len(c.errs) > nerr {
		return
	}
	tr.Grads = map[*Value]*Value{}
	if tr.Pipe != nil {
		tr.Pipe.Units = make([][]ir.IDRange, tr.Accumulate)
	}
	names := c.globalsInOrder() // the block makes no globals: sorted once
	var first *microCopy        // micro-batch 0, copied for the others when it can be
	for micro := 0; micro < tr.Accumulate; micro++ {
		loss, ok := c.microStep(tb, tr, names, inputs, seenBy, micro, &first)
		if !ok || len(c.errs) > nerr {
			return // the budget (spend) may run out inside the backward
		}
		if tr.Loss == nil {
			tr.Loss = loss
		} else {
			tr.Loss = c.mk(tb.Pos, "add", []operand{{v: tr.Loss}, {v: loss}}, nil)
		}
	}
	if len(c.errs) > nerr {
		return
	}
	c.checkParamDTypes(tr)
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

// checkParamDTypes reports, at its declaration, each param the loss
// trains whose dtype is not the loss's: the step's scalars (the learning
// rate, the bias corrections, the clipping factor) are fed and computed
// in the loss's dtype and every update combines them with its param, so
// a param of another dtype would fail to build (an f64 weight cast to
// f32 for an f32 loss).
func (c *Checker) checkParamDTypes(tr *Train) {
	want := tr.Loss.Type.DType
	for _, v := range c.g.Values[:tr.Loss.ID] {
		if v.Op == "param" && tr.Grads[v] != nil && v.Type.DType != want {
			c.errorf(v.Pos, "param %s is %s but the loss is %s: every param the loss trains must be of the loss's dtype", v.Name, v.Type.DType, want)
		}
	}
}

// paramViews returns, for each float param, the value the block's forward
// uses, and makes the block's statements see it: the param itself, its
// half-precision copy, or (ZeRO-3, or ZeRO with mixed precision) the
// all-gather of its split storage.
func (c *Checker) paramViews(tr *Train) map[*Value]*Value {
	tr.Views = map[*Value]*Value{}
	seenBy := map[*Value]*Value{}
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
		if tr.Offload != "" {
			seen = c.fetchParam(tr, v, seen)
		}
		// ZeRO-3 stores parameters split and gathers them for the forward
		// (and again for the backward). With mixed precision every stage
		// does the paper's layout: the f32 master weights belong to the
		// optimizer state (split from stage 1 on) and the forward gathers
		// their half copy, which stays alive for the step (stages 1–2).
		// Offloaded master weights are split the same way: each device's
		// host keeps and updates its part only.
		if tr.Zero == 3 || (tr.Zero >= 1 && (tr.Precision != "" || tr.Offload != "")) {
			compute := v.Declared
			c.touch(v) // a failed train block leaves the param as declared
			v.Declared = train.Storage(v, compute, tr.DataAxis)
			// with mixed precision seen is the cast of the local shard, so
			// the gather moves 2-byte values
			g := c.add(&Value{Op: "to", Type: seen.Type, Args: []*Value{seen}, Pos: v.Pos, Declared: compute, Name: name + ".gathered"})
			g.Attrs.Regather = tr.Zero == 3
			g.Remat = tr.Offload == "optimizer+params"
			seen = g
		}
		if seen != v {
			c.override[name] = operand{v: seen}
		}
		seenBy[v] = seen
	}
	tr.Seen = seenBy
	return seenBy
}

// fetchParam is, under offload, the device copy of param v's host master
// (or of its half copy x, cast on the host) that the forward reads: a
// fetch, which the gradients are taken with respect to. With
// offload = optimizer+params the backward fetches it again (Remat) rather
// than keep the forward's copy alive on the device.
func (c *Checker) fetchParam(tr *Train, v, x *Value) *Value {
	if tr.OnHost == nil {
		tr.OnHost = map[*Value]bool{}
	}
	tr.OnHost[v] = true
	f := c.add(&Value{Op: "fetch", Type: x.Type, Args: []*Value{x}, Pos: v.Pos, Name: v.Name + ".fetched"})
	f.Remat = tr.Offload == "optimizer+params"
	tr.Views[v] = f
	return f
}

// reduceWhenFinal is, for ZeRO-2/3, the backward hooks that reduce-scatter
// each gradient the moment the backward completes it, so full gradients
// never pile up.
func (c *Checker) reduceWhenFinal(tr *Train, seenBy map[*Value]*Value) map[*Value]func(*Value) *Value {
	tr.Reduced = map[*Value]bool{}
	hooks := map[*Value]func(*Value) *Value{}
	for p, seen := range seenBy {
		st := train.Storage(p, p.Declared, tr.DataAxis)
		hooks[seen] = func(g *Value) *Value {
			r := c.add(&Value{Op: "to", Type: g.Type, Args: []*Value{g}, Pos: tr.Pos, Declared: st, Name: p.Name + ".grad", Backward: true})
			tr.Reduced[p] = true
			if tr.Offload != "" {
				// ZeRO-Offload: each reduced gradient leaves the device at once
				r = c.add(&Value{Op: "offload", Type: r.Type, Args: []*Value{r}, Pos: tr.Pos, Name: p.Name + ".grad.host", Backward: true})
			}
			return r
		}
	}
	return hooks
}

// microStep checks the block's statements on micro-batch micro of the
// inputs, differentiates its loss and adds its gradients to tr.Grads. Each
// micro-batch's backward follows its forward, so only one micro-batch's
// activations are alive at a time. It returns the micro-batch's share of
// the step's loss. The micro-batches differ only in the rows of the
// inputs they take: micro-batch 0 is checked and differentiated, and
// *first keeps it so that the others copy its values onto their own rows
// instead of checking it again (train_micro.go).
func (c *Checker) microStep(tb *TrainBlock, tr *Train, names []string, inputs map[string]*Value, seenBy map[*Value]*Value, micro int, first **microCopy) (*Value, bool) {
	nerr := len(c.errs)
	start := len(c.g.Values)
	if tr.Zero == 3 && micro > 0 && tr.Pipe == nil {
		seenBy = c.regatherForMicro(seenBy)
	}
	c.microInputs(tb, tr, names, inputs, micro)
	var mb *microBody
	if t := *first; t != nil && t.fits(c, start) {
		mb = t.copyTo(c, tr, micro)
	} else {
		at := c.at()
		var ok bool
		if mb, ok = c.checkMicroBody(tb, tr, micro); !ok {
			return nil, false
		}
		if micro == 0 && len(c.errs) == nerr {
			*first = c.keepMicro(tr, start, at, mb)
		}
	}
	if tr.Pipe != nil {
		if tr.Pipe.BackwardOf == nil {
			// every micro-batch adds as many: sized once, not grown
			tr.Pipe.BackwardOf = make(map[*Value]*Value, len(mb.adj.For)*max(1, tr.Accumulate))
		}
		maps.Copy(tr.Pipe.BackwardOf, mb.adj.For)
	}
	c.accumulateGrads(tb, tr, names, seenBy, mb)
	if tr.Pipe != nil {
		tr.Pipe.Micro = append(tr.Pipe.Micro, ir.MicroRange{Start: start, Backward: mb.bwd, End: len(c.g.Values)})
	}
	return mb.loss, true
}

// microInputs points the block's input names at micro-batch micro's rows.
func (c *Checker) microInputs(tb *TrainBlock, tr *Train, names []string, inputs map[string]*Value, micro int) {
	for _, name := range names {
		if x, ok := inputs[name]; ok {
			mb := x
			if !constantInput(x) { // a mask or a constant is the same for every micro-batch
				mb = train.MicroBatch(builder{c}, x, micro, tr.Accumulate, tb.Pos)
			}
			if tr.Precision != "" && mb.Type.DType.IsFloat() {
				mb = builder{c}.Apply(tb.Pos, "cast", nil, ops.T(mb), ops.Str(tr.Precision))
			}
			c.override[name] = operand{v: mb}
		}
	}
}

// microBody is what checking a micro-batch's statements and its backward
// made: its share of the loss, the seed of its backward, its adjoints and
// the ID where its backward starts.
type microBody struct {
	loss, seed *Value
	adj        *ad.Adjoints
	bwd        int
}

// checkMicroBody checks the block's statements on the micro-batch the
// input names now point at, and builds its backward.
func (c *Checker) checkMicroBody(tb *TrainBlock, tr *Train, micro int) (*microBody, bool) {
	nerr := len(c.errs)
	var units *unitRecorder
	if tr.Pipe != nil {
		units = &unitRecorder{c: c, pipe: tr.Pipe, micro: micro}
	}
	loss, ok := c.trainBody(tb, micro == 0, units)
	if !ok {
		return nil, false
	}
	if loss.Type.DType != F32 && tr.Precision != "" {
		loss = builder{c}.Apply(tb.Pos, "cast", nil, ops.T(loss), ops.Str("f32"))
	}
	if k := tr.Accumulate; k > 1 {
		// micro-batches of equal size: the step's loss is their mean
		loss = c.mk(tb.Pos, "mul", []operand{{v: loss}, numOp(1 / float64(k))}, nil)
	}
	seed := loss
	if scale := tr.Hyper["loss_scale"]; scale != nil {
		seed = c.mk(tb.Pos, "mul", []operand{{v: loss}, {v: scale}}, nil)
	}
	if len(c.errs) > nerr {
		return nil, false // an internal error built an invalid loss
	}
	bwd := len(c.g.Values)
	adj, err := c.backward(seed)
	if err != nil {
		if !errors.Is(err, ad.ErrNotBuilt) {
			c.errorf(tb.Pos, "%v", err)
		}
		return nil, false
	}
	return &microBody{loss: loss, seed: seed, adj: adj, bwd: bwd}, true
}

// accumulateGrads adds the micro-batch's gradient of each float param the
// loss can depend on to tr.Grads, in program order; from the names, not a
// walk of the graph, which holds the earlier micro-batches.
func (c *Checker) accumulateGrads(tb *TrainBlock, tr *Train, names []string, seenBy map[*Value]*Value, mb *microBody) {
	seenParam := map[*Value]bool{}
	for _, name := range names {
		v := c.globals[name]
		if v.Op != "param" || !v.Type.DType.IsFloat() || v.ID >= mb.loss.ID || seenParam[v] {
			continue
		}
		seenParam[v] = true
		g := mb.adj.Of[v]
		if seen := seenBy[v]; seen != v && tr.Zero >= 2 {
			g = mb.adj.Of[seen] // reduced in the backward (reduceWhenFinal)
		} else if view := tr.Views[v]; view != nil {
			g = mb.adj.Of[view] // reduce the half gradient, cast it up after
		}
		if g == nil {
			continue
		}
		if prev := tr.Grads[v]; prev != nil {
			g = c.mk(tb.Pos, "add", []operand{{v: prev}, {v: g}}, nil)
		}
		tr.Grads[v] = g
	}
}

// regatherForMicro gives ZeRO-3 a fresh forward gather of every parameter
// for each micro-batch after the first (as DeepSpeed does): a gather kept
// for the whole step would hold every full parameter across the
// micro-batches, ZeRO-3's memory without its saving. The backward gathers
// again as always, and the gradient of each new gather is reduce-scattered
// the moment it is complete, like the first one's. (Pipelines keep one
// gather per step: their stages place values by units, and a gather
// before a micro-batch's first unit has none.)
func (c *Checker) regatherForMicro(seenBy map[*Value]*Value) map[*Value]*Value {
	out := make(map[*Value]*Value, len(seenBy))
	params := slices.SortedFunc(maps.Keys(seenBy), func(a, b *Value) int { return a.ID - b.ID })
	for _, p := range params { // in program order: the gathers' order is the graph's
		seen := seenBy[p]
		out[p] = seen
		if seen == p || seen.Op != "to" || !seen.Attrs.Regather {
			continue
		}
		g := c.add(&Value{Op: "to", Type: seen.Type, Args: seen.Args, Pos: seen.Pos, Declared: seen.Declared, Name: seen.Name})
		g.Attrs.Regather = true
		c.override[p.Name] = operand{v: g}
		if hook := c.onFinal[seen]; hook != nil {
			c.onFinal[g] = hook
		}
		out[p] = g
	}
	return out
}

// trainBody checks the block's statements (not its settings) in a fresh
// scope and returns its loss; report says whether to report statements a
// train block cannot hold (once, not per micro-batch).
func (c *Checker) trainBody(tb *TrainBlock, report bool, units *unitRecorder) (*Value, bool) {
	nerr := len(c.errs)
	c.scope, c.fn = map[string]operand{}, "train"
	if units != nil {
		units.begin()
	}
	for _, s := range tb.Body {
		switch {
		case s.Assign != nil && settingNames[s.Assign.Name]:
		case s.Assign != nil, s.For != nil:
			if units != nil && s.For != nil {
				c.iterHook = func() { units.end(s.Pos) } // each iteration is a unit
			}
			c.stmt(s)
			c.iterHook = nil
			if units != nil {
				units.end(s.Pos) // the statement, or the loop's last iteration
			}
		case report:
			c.errorf(s.Pos, "a train block holds assignments and for loops only (loss = ..., optimizer = ..., steps = ...)")
		}
	}
	if len(c.errs) > nerr {
		return nil, false
	}
	lossOp, ok := c.scope["loss"]
	if !ok {
		c.errorf(tb.Pos, "the train block needs loss = ...")
		return nil, false
	}
	if lossOp.v == nil || lossOp.v.Type.Rank() != 0 || !lossOp.v.Type.DType.IsFloat() {
		c.errorf(tb.Pos, "loss must be a float scalar")
		return nil, false
	}
	return lossOp.v, true
}

// constantInput reports an input whose value is a constant of its shape
// (zeros, ones, a causal mask) rather than data.
func constantInput(x *Value) bool {
	if x.Op != "input" || x.Attrs.Init == nil {
		return false
	}
	k := x.Attrs.Init.Kind
	return k == "zeros" || k == "ones" || k == "causal"
}
