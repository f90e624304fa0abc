package lang

import (
	"slices"

	"github.com/meshrun/meshrun/ad"
	"github.com/meshrun/meshrun/ir"
)

// Copying micro-batch 0 for the others. A train block with k
// micro-batches checks its statements and builds its backward k times, and
// the k results differ only in which rows of the inputs they start from:
// the same ops, types, names, positions and call chains, in the same
// order, on values shifted by a fixed number of IDs. So micro-batch 0 is
// checked as written, and each later micro-batch makes its own input rows
// (train.MicroBatch, as before) and then copies micro-batch 0's values
// after them one for one, pointing every argument that lay inside
// micro-batch 0 at the copy of that argument, and every other argument
// (params, their views, constants made before the block) where it was.
// The backward's stages (ir.PipeTrain.BackwardOf), the units and the
// adjoints of the params are micro-batch 0's, moved the same way. The
// gradients are then accumulated as written (they differ: micro-batch 0
// has nothing to add to), and so is the step's loss. One thing in the
// backward depends on the rows: the gradient of the rows' slice pads it
// back into the whole input at the slice's place (rowPads).
//
// The copy is the graph a second check would build only where checking
// micro-batch 0 reused nothing it had made for itself that a later
// micro-batch would reuse instead of making again. keepMicro refuses the
// copy where that can happen, and those blocks are checked per
// micro-batch as before:
//   - ZeRO-3 without a pipeline gathers each parameter again before every
//     micro-batch after the first (regatherForMicro), so micro-batch 0 has
//     values the others lack;
//   - grad(y, x) inside the block caches the backward of y (Checker.grads);
//   - local functions share one pvary per value and axes (Checker.pvaries).
//
// The budget (MaxWork) is spent as checking would spend it; a copy that
// would cross it is not made, and the micro-batch is checked, so that the
// error names the line that crossed it. TestMicroCopyIsTheCheckedGraph
// compares the copied graph with the one checked per micro-batch on every
// example and test program.

// microAt is where the checker stands before a micro-batch's statements.
type microAt struct{ values, work, grads int }

func (c *Checker) at() microAt { return microAt{len(c.g.Values), c.work, len(c.grads)} }

// microCopy is micro-batch 0 kept for copying: its values [start, body)
// are its input rows, [body, end) its statements and backward.
type microCopy struct {
	start, body, end int
	work             int // budget spent on [body, end)
	mb               *microBody
	units            []ir.IDRange
	// pads are the gradients of the input rows' slices (indices into
	// [body, end)), the one place the backward reads which rows a
	// micro-batch took (see rowPads).
	pads map[int]bool
	// outer are the values before micro-batch 0 that have an adjoint in
	// its backward (its params and their views)
	outer []*Value
}

// rowPads finds, among micro-batch 0's statements and backward (vals,
// from ID body on), the values that depend on which rows the micro-batch
// took. Its input rows [start, body) are train.MicroBatch's reshape,
// slice and reshape (and a cast): their backward reshapes and casts the
// adjoint back, the same for every micro-batch, and pads it into the
// whole input at the slice's place (ops' sliceVJP: the pad has the
// slice's axis, start and end), which is not. It returns the pads by index
// in vals, or false when a slice's backward is anything else, which a
// copy could get wrong.
func rowPads(vals []*Value, backwardOf map[*Value]*Value, start, body int) (map[int]bool, bool) {
	pads := map[int]bool{}
	for i, v := range vals {
		p := backwardOf[v]
		if p == nil || p.ID < start || p.ID >= body || p.Op != "slice" {
			continue
		}
		if v.Op != "pad" || v.Attrs.Axis != p.Attrs.Axis || v.Attrs.Start != p.Attrs.Start || v.Attrs.End != p.Attrs.End {
			return nil, false
		}
		pads[i] = true
	}
	return pads, true
}

// keepMicro returns micro-batch 0 (begun at start; its statements at at)
// for the others to copy, or nil where a copy could differ from a check.
func (c *Checker) keepMicro(tr *Train, start int, at microAt, mb *microBody) *microCopy {
	if c.opts.noMicroCopy || tr.Accumulate < 2 || c.tooLarge {
		return nil
	}
	if tr.Zero == 3 && tr.Pipe == nil {
		return nil // later micro-batches gather again first
	}
	if len(c.grads) != at.grads+1 {
		return nil // grad() inside the block: its backward is cached
	}
	end := len(c.g.Values)
	for _, v := range c.g.Values[at.values:end] {
		if v.Local {
			return nil // pvary is shared per value
		}
	}
	pads, ok := rowPads(c.g.Values[at.values:end], mb.adj.For, start, at.values)
	if !ok {
		return nil
	}
	t := &microCopy{start: start, body: at.values, end: end, work: c.work - at.work, mb: mb, pads: pads}
	for x := range mb.adj.Of {
		if x.ID < start {
			t.outer = append(t.outer, x)
		}
	}
	if tr.Pipe != nil {
		t.units = tr.Pipe.Units[0]
	}
	return t
}

// fits reports whether the micro-batch begun at start can be a copy: its
// input rows took as many values as micro-batch 0's, and the copy stays
// within the budget.
func (t *microCopy) fits(c *Checker, start int) bool {
	return !c.tooLarge && len(c.g.Values)-start == t.body-t.start && c.work+t.work <= c.maxWork()
}

// copyTo appends the copy of micro-batch 0's statements and backward after
// the current micro-batch's input rows.
func (t *microCopy) copyTo(c *Checker, tr *Train, micro int) *microBody {
	g := c.g
	off := len(g.Values) - t.body
	remap := func(x *Value) *Value {
		if x != nil && x.ID >= t.start && x.ID < t.end {
			return g.Values[x.ID+off]
		}
		return x
	}
	src := g.Values[t.body:t.end]
	nargs := 0
	for _, v := range src {
		nargs += len(v.Args)
	}
	// one allocation for the values and one for their arguments (each
	// piece capped at its length, so an append elsewhere copies)
	vals, args := make([]Value, len(src)), make([]*Value, nargs)
	g.Values = slices.Grow(g.Values, len(src))
	for i, v := range src {
		nv := &vals[i]
		*nv = *v
		nv.ID = len(g.Values)
		if len(v.Args) > 0 {
			nv.Args, args = args[:len(v.Args):len(v.Args)], args[len(v.Args):]
			for j, a := range v.Args {
				nv.Args[j] = remap(a)
			}
		}
		nv.Primal = remap(v.Primal)
		if t.pads[i] {
			// this micro-batch's rows: its own slice's start and end
			p := remap(t.mb.adj.For[v])
			nv.Attrs.Start, nv.Attrs.End = p.Attrs.Start, p.Attrs.End
		}
		g.Values = append(g.Values, nv)
	}
	c.work += t.work
	c.copied++
	// of the adjoints, only those of values before the micro-batch (its
	// params and their views) are read again, by accumulateGrads; the
	// stages of the backward's values go straight into the pipeline's
	// table. (Checker.grads keeps micro-batch 0's backward only: nothing
	// asks for a later micro-batch's seed again.)
	of := make(map[*Value]*Value, len(t.outer))
	for _, x := range t.outer {
		of[x] = remap(t.mb.adj.Of[x])
	}
	mb := &microBody{loss: remap(t.mb.loss), seed: remap(t.mb.seed), adj: &ad.Adjoints{Of: of}, bwd: t.mb.bwd + off}
	if tr.Pipe != nil {
		for k, v := range t.mb.adj.For {
			tr.Pipe.BackwardOf[remap(k)] = remap(v)
		}
		units := make([]ir.IDRange, len(t.units))
		for i, u := range t.units {
			units[i] = ir.IDRange{Start: u.Start + off, End: u.End + off}
		}
		tr.Pipe.Units[micro] = units
	}
	return mb
}
