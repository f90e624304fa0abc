package lang

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/meshrun/meshrun/sbp"
)

// The parts of a training step the train block assembles: each step's
// inputs (batches, micro-batches), storage placements, and the backward,
// clipping and optimizer update as graph values.

// trainInputs returns, by name, the tensors the train block's statements
// see for each input: with batch = B, a per-step batch source fed by the
// trainer; otherwise the input itself.
func (c *Checker) trainInputs(tb *TrainBlock, tr *Train) map[string]*Value {
	out := map[string]*Value{}
	for _, name := range c.globalsInOrder() {
		v := c.globals[name]
		if v.Op != "input" {
			continue
		}
		x := v
		if k := v.Attrs.Init.Kind; tr.Batch > 0 && (k == "load" || k == "normal" || k == "uniform") {
			// data is batched; constant inputs (zeros, ones, causal) are not
			if v.Type.Rank() == 0 {
				continue
			}
			n := v.Type.Shape[0]
			if tr.Batch > n {
				c.errorf(tb.Pos, "batch = %d is larger than input %s (%d rows)", tr.Batch, name, n)
				continue
			}
			if v.Attrs.Init.Kind == "load" && n%tr.Batch != 0 {
				c.errorf(tb.Pos, "input %s has %d rows, not a multiple of batch = %d", name, n, tr.Batch)
				continue
			}
			shape := append([]int{tr.Batch}, v.Type.Shape[1:]...)
			x = c.add(&Value{Op: "input", Type: Type{DType: v.Type.DType, Shape: shape}, Name: name + ".batch", Pos: v.Pos, Declared: v.Declared, Attrs: Attrs{Init: &Init{Kind: "fed"}}})
			tr.Batches = append(tr.Batches, BatchInput{Source: x, Dataset: v})
		}
		if tr.Accumulate > 1 && x == v && (v.Attrs.Init.Kind == "zeros" || v.Attrs.Init.Kind == "ones" || v.Attrs.Init.Kind == "causal") {
			out[name] = x // a constant input is the same for every micro-batch
			continue
		}
		if tr.Accumulate > 1 && (x.Type.Rank() == 0 || x.Type.Shape[0]%tr.Accumulate != 0) {
			c.errorf(tb.Pos, "accumulate = %d needs every input's rows to divide evenly; %s has shape %s", tr.Accumulate, name, ShapeString(x.Type.Shape))
			continue
		}
		out[name] = x
	}
	return out
}

// microBatch is micro-batch i of k of x: rows i, i+k, i+2k, ... A strided
// choice keeps a batch split over data-parallel devices local: every device
// takes its own rows of every micro-batch.
func (c *Checker) microBatch(x *Value, i, k int, pos Pos) *Value {
	if k == 1 {
		return x
	}
	rest := x.Type.Shape[1:]
	n := x.Type.Shape[0]
	view := append([]operand{{v: x}, numOp(float64(n / k)), numOp(float64(k))}, dims(rest)...)
	v := c.mk(pos, "reshape", view, nil)
	v = c.mk(pos, "slice", []operand{{v: v}, numOp(1), numOp(float64(i)), numOp(float64(i + 1))}, nil)
	back := append([]operand{{v: v}, numOp(float64(n / k))}, dims(rest)...)
	v = c.mk(pos, "reshape", back, nil)
	v.Name = fmt.Sprintf("%s.micro%d", x.Name, i)
	return v
}

// globalsInOrder lists the top-level names in the order their values were
// made, so that what the train block builds never depends on map order.
func (c *Checker) globalsInOrder() []string {
	names := make([]string, 0, len(c.globals))
	for n := range c.globals {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		a, b := c.globals[names[i]], c.globals[names[j]]
		if a.ID != b.ID {
			return a.ID < b.ID
		}
		return names[i] < names[j]
	})
	return names
}

// dataAxis is the mesh axis the train block's data parallelism runs over:
// the one it names (data_axis = NAME), else the one axis over which every
// input split along its batch dim (dim 0) is split. No axis name is special:
// on [batch=4, model=2] with inputs {S(0), B} the data axis is batch.
func (c *Checker) dataAxis(tb *TrainBlock, named *Assign, zero int) (int, bool) {
	m := c.g.Mesh
	if named != nil {
		_, name := initCall(named.Value)
		ax := m.AxisIndex(name)
		if ax < 0 {
			c.errorf(named.Value.Pos, "data_axis must name an axis of mesh %s %s", m.Name, m)
			return 0, false
		}
		return ax, true
	}
	// the axes that split dim 0 of every input split along dim 0
	var common []int
	found := false
	for _, name := range c.globalsInOrder() {
		v := c.globals[name]
		if v.Op != "input" || !v.Declared.SplitsDim(0) {
			continue
		}
		var axes []int
		for a, s := range v.Declared {
			if s.IsS() && s.Dim == 0 && (!found || slices.Contains(common, a)) {
				axes = append(axes, a)
			}
		}
		common, found = axes, true
	}
	if len(common) == 1 {
		return common[0], true
	}
	why := "no input is split along its batch dim (dim 0)"
	if len(common) > 1 {
		var names []string
		for _, a := range common {
			names = append(names, m.Axes[a].Name)
		}
		why = "the inputs split their batch dim over axes " + strings.Join(names, " and ")
	} else if found {
		why = "the inputs split their batch dim over different axes"
	}
	c.errorf(tb.Pos, "zero = %d shards over the data-parallel axis, but %s; name it with data_axis = NAME", zero, why)
	return 0, false
}

// zeroStorage splits a compute placement over the data-parallel axis along
// the first dim no other axis splits.
func zeroStorage(v *Value, compute sbp.NdSBP, axis int) sbp.NdSBP {
	out := compute.Clone()
	if !out[axis].IsB() {
		return out
	}
	for d := 0; d < v.Type.Rank(); d++ {
		if !compute.SplitsDim(d) {
			out[axis] = sbp.S(d)
			return out
		}
	}
	return out
}

// buildStep appends the backward graph, clipping and the optimizer update.
func (c *Checker) buildStep(tr *Train) {
	loss := tr.Loss
	pos := tr.Pos
	n := c.g.Mesh.NumAxes()
	bcast := sbp.Broadcasts(n)
	hyper := func(name string) *Value {
		v := c.add(&Value{Op: "hyper", Type: Type{DType: loss.Type.DType, Shape: []int{}}, Name: name, Pos: pos, Declared: bcast, Attrs: Attrs{Init: &Init{Kind: "fed"}}})
		tr.Hyper[name] = v
		return v
	}
	mk := func(name string, args ...operand) *Value {
		v := c.mk(pos, name, args, nil)
		v.Backward = true
		return v
	}
	for _, v := range c.g.Values[:loss.ID] {
		if v.Op == "param" && tr.Grads[v] != nil {
			tr.Params = append(tr.Params, v)
		}
	}
	if len(tr.Params) == 0 {
		c.errorf(pos, "loss depends on no float param: nothing to train")
		return
	}
	// Reduce each gradient straight into the placement the optimizer keeps
	// its parameter's state in: all-reduce for plain data parallelism,
	// reduce-scatter with ZeRO (the state is split over the data-parallel axis).
	storage := map[*Value]sbp.NdSBP{}
	for _, p := range tr.Params {
		st := p.Declared
		if tr.Zero >= 1 {
			st = zeroStorage(p, p.Declared, tr.DataAxis)
		}
		storage[p] = st
		g := tr.Grads[p]
		if !tr.Reduced[p] {
			g = c.add(&Value{Op: "to", Type: g.Type, Args: []*Value{g}, Pos: pos, Declared: st, Name: p.Name + ".grad", Backward: true})
		}
		if g.Type.DType != p.Type.DType {
			g = mk("cast", t(g), operand{str: strp(p.Type.DType.String())})
		}
		if s := tr.Hyper["loss_scale"]; s != nil {
			g = mk("div", t(g), t(s)) // unscale
		}
		tr.Grads[p] = g
	}
	if tr.Hyper["loss_scale"] != nil {
		var found *Value
		for _, p := range tr.Params {
			f := mk("nonfinite", t(tr.Grads[p]))
			if found == nil {
				found = f
			} else {
				found = mk("maximum", t(found), t(f))
			}
		}
		found.Name = "found_inf"
		tr.FoundInf = found
	}
	lr := hyper("lr")
	var coef *Value
	if tr.Clip > 0 {
		var total *Value
		for _, p := range tr.Params {
			g := tr.Grads[p]
			sq := mk("sum", t(mk("mul", t(g), t(g))))
			if total == nil {
				total = sq
			} else {
				total = mk("add", t(total), t(sq))
			}
		}
		norm := mk("sqrt", t(total))
		// PyTorch's clip_grad_norm_: coef = min(1, max_norm / (norm + 1e-6))
		coef = mk("minimum", n1(1), t(mk("div", n1(tr.Clip), t(mk("add", t(norm), n1(1e-6))))))
	}
	var bc1, bc2 *Value
	o := tr.Optimizer
	if o.Kind == "adam" || o.Kind == "adamw" {
		bc1, bc2 = hyper("bc1"), hyper("bc2")
	}
	for _, p := range tr.Params {
		g := tr.Grads[p]
		if coef != nil {
			g = mk("mul", t(g), t(coef))
		}
		if o.Kind == "adam" && o.WeightDecay > 0 {
			// torch.optim.Adam's weight_decay is L2: g ← g + wd·p
			g = mk("add", t(g), t(mk("mul", t(p), n1(o.WeightDecay))))
		}
		storage := storage[p]
		state := func(suffix string) *Value {
			return c.add(&Value{Op: "state", Type: p.Type, Name: p.Name + "." + suffix, Pos: pos, Declared: storage, Attrs: Attrs{Init: &Init{Kind: "zeros"}}})
		}
		var next *Value
		switch o.Kind {
		case "sgd":
			next = mk("sub", t(p), t(mk("mul", t(g), t(lr))))
		case "momentum":
			buf := state("momentum")
			nb := mk("add", t(mk("mul", t(buf), n1(o.Momentum))), t(g))
			tr.Carry = append(tr.Carry, Carry{Source: buf, Next: nb})
			next = mk("sub", t(p), t(mk("mul", t(nb), t(lr))))
		case "adam", "adamw":
			m, v := state("exp_avg"), state("exp_avg_sq")
			nm := mk("adam_moment", t(m), t(g), n1(o.Beta1))
			nv := mk("adam_moment2", t(v), t(g), n1(o.Beta2))
			tr.Carry = append(tr.Carry, Carry{Source: m, Next: nm}, Carry{Source: v, Next: nv})
			// PyTorch: p ← p·(1 − lr·wd) (adamw), then p -= lr/bc1 · m / (√v/√bc2 + eps)
			decay := n1(1)
			if o.Kind == "adamw" && o.WeightDecay > 0 {
				decay = t(mk("sub", n1(1), t(mk("mul", t(lr), n1(o.WeightDecay)))))
			}
			next = mk("adam_update", t(p), t(nm), t(nv), t(mk("div", t(lr), t(bc1))), t(mk("sqrt", t(bc2))), n1(o.Eps), decay)
		}
		next.Name = p.Name + ".next"
		tr.Carry = append([]Carry{{Source: p, Next: next}}, tr.Carry...)
	}
	if tr.FoundInf != nil {
		// an overflow skips the step: parameters and states keep their values
		for i := range tr.Carry {
			cr := &tr.Carry[i]
			cr.Next = mk("where", t(tr.FoundInf), t(cr.Source), t(cr.Next))
			cr.Next.Name = cr.Source.Name + ".next"
		}
	}
}

func n1(f float64) operand { return numOp(f) }
