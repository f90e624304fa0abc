package planner

import (
	"strings"
)

// Candidates without a pipeline, and the search's analysis, from the
// folded programs by extrapolation (compose.go).

// composeFlat prices a candidate without a pipeline from the folded
// programs keeping three and four of the run: every figure affine in the
// run's length.
func (f *folded) composeFlat(c *Candidate, opts Options, dataAxis string) (*Cost, error) {
	k := f.key(c, opts.Links, true)
	f.mu.Lock()
	e := f.extrapols[k]
	if e == nil {
		e = &proxyEntry{}
		f.extrapols[k] = e
	}
	f.mu.Unlock()
	e.once.Do(func() {
		var flat *Cost
		// many micro-batches: extrapolated in their count too, from three
		// and four (the first and last differ from the middle ones; every
		// middle one adds the same), with the batch rewritten as a
		// proxy's; in full where the shapes refuse it (only then: the
		// full lowering is what this saves)
		if m := c.Micro; m > 4 && f.rows > 0 && f.rows%m == 0 {
			three, err1 := f.extrapolateLayers(c, 3, opts, dataAxis)
			four, err2 := f.extrapolateLayers(c, 4, opts, dataAxis)
			if err1 == nil && err2 == nil {
				flat = extrapolate(three, four, float64(m-3))
			}
		}
		if flat == nil {
			if flat, e.err = f.extrapolateLayers(c, c.Micro, opts, dataAxis); e.err != nil {
				return
			}
		}
		e.px = &proxy{flat: flat}
	})
	if e.err != nil {
		return nil, e.err
	}
	cost := e.px.flat.clone()
	cost.floor = cost.Step - cost.Comm["host copy"]
	for k, t := range cost.ByAxis {
		if strings.HasSuffix(k, " over "+dataAxis) {
			cost.floor -= t
		}
	}
	return cost, nil
}

// extrapolateLayers prices c without a pipeline from the folded programs
// keeping three and four of the run, with micro micro-batches of c's size
// (the batch rewritten when micro is not c's), affine in the run's length.
func (f *folded) extrapolateLayers(c *Candidate, micro int, opts Options, dataAxis string) (*Cost, error) {
	pc := *c
	if micro != c.Micro {
		pc.Micro, pc.batch = micro, f.rows/c.Micro*micro
	}
	price := func(p *Program) (*Cost, error) {
		lp, err := f.compile(p.Path, p.Source(&pc, ""), c, opts.Devices, opts.Links)
		if err != nil {
			return nil, err
		}
		return price(lp, &pc, opts.Links, opts.Rate, dataAxis)
	}
	short, err := price(f.prog)
	if err != nil {
		return nil, err
	}
	longer, err := price(f.longer)
	if err != nil {
		return nil, err
	}
	return extrapolate(short, longer, float64(f.plan.Runs[0].Count-1)), nil
}

// extrapolate is short + n·(longer − short), figure by figure.
func extrapolate(short, longer *Cost, n float64) *Cost {
	lin := func(a, b float64) float64 { return a + n*(b-a) }
	lin64 := func(a, b int64) int64 { return a + int64(n)*(b-a) }
	maps := func(a, b map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range a {
			out[k] = lin(v, b[k])
		}
		for k, v := range b {
			if _, ok := a[k]; !ok {
				out[k] = lin(0, v)
			}
		}
		return out
	}
	return &Cost{Step: lin(short.Step, longer.Step), Compute: lin(short.Compute, longer.Compute),
		Comm: maps(short.Comm, longer.Comm), Bytes: maps(short.Bytes, longer.Bytes), ByAxis: maps(short.ByAxis, longer.ByAxis),
		ModelAxes: lin(short.ModelAxes, longer.ModelAxes), Bubble: lin(short.Bubble, longer.Bubble),
		Peak: lin64(short.Peak, longer.Peak), Params: lin64(short.Params, longer.Params), Optimizer: lin64(short.Optimizer, longer.Optimizer),
		Gradients: lin64(short.Gradients, longer.Gradients), Activations: lin64(short.Activations, longer.Activations)}
}

func (c *Cost) clone() *Cost {
	out := *c
	cp := func(m map[string]float64) map[string]float64 {
		o := make(map[string]float64, len(m))
		for k, v := range m {
			o[k] = v
		}
		return o
	}
	out.Comm, out.Bytes, out.ByAxis = cp(c.Comm), cp(c.Bytes), cp(c.ByAxis)
	return &out
}

// analyseFolded is analyse (search.go) of p, from the folded programs
// when p folds with one run: the arithmetic and parameter bytes are
// affine in the run's length, so checks of two short programs stand for
// one of the whole program per micro-batch count.
func analyseFolded(p *Program, s Space, f *folded) (*base, error) {
	if f == nil || f.longer == nil {
		return analyse(p, s)
	}
	short, err := analyse(f.prog, s)
	if err != nil {
		return nil, err
	}
	longer, err := analyse(f.longer, s)
	if err != nil {
		return nil, err
	}
	n := float64(f.plan.Runs[0].Count - 1)
	lin := func(a, b float64) float64 { return a + n*(b-a) }
	out := *short
	out.flops = map[int]float64{}
	for m, v := range short.flops {
		if w, ok := longer.flops[m]; ok {
			out.flops[m] = lin(v, w)
		}
	}
	out.paramB, out.gradB = lin(short.paramB, longer.paramB), lin(short.gradB, longer.gradB)
	out.grads = short.grads + int(n)*(longer.grads-short.grads)
	return &out, nil
}
