package lang

import (
	"sort"
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
		if tr.Accumulate > 1 && x == v && constantInput(v) {
			out[name] = x // a constant input is the same for every micro-batch
			continue
		}
		if tr.Accumulate > 1 && (x.Type.Rank() == 0 || x.Type.Shape[0]%tr.Accumulate != 0) {
			hint := ""
			if tr.Pipe != nil && tr.Pipe.DefaultMicro {
				hint = " (a pipeline takes as many micro-batches as pipeline ranks unless microbatches = says otherwise)"
			}
			c.errorf(tb.Pos, "%d micro-batches (accumulate) need every input's rows to divide evenly; %s has shape %s%s", tr.Accumulate, name, ShapeString(x.Type.Shape), hint)
			continue
		}
		out[name] = x
	}
	return out
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
