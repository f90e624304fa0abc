package planner

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/ops"
	"github.com/meshrun/meshrun/train"
)

// Options configure a search.
type Options struct {
	Devices int
	Memory  int64   // bytes per device; 0: no budget
	Links   *Links  // nil: mesh.DefaultLink on every axis
	Rate    float64 // device FLOP/s; 0: lower.ModelFLOPS
	Top     int     // strategies to keep; 0: 5
	Space   Space
	// Exhaustive prices every candidate (no pruning): the reference the
	// tests compare the pruned search with.
	Exhaustive bool
}

// Evaluated is a priced candidate.
type Evaluated struct {
	Cand  *Candidate
	Cost  *Cost
	Label string
	Fits  bool
}

// Result is a search's outcome.
type Result struct {
	Prog *Program
	Opts Options
	// Ranked holds the best Top strategies that fit, fastest first;
	// Losers the other priced ones (fitting or not), fastest first.
	Ranked, Losers []*Evaluated
	Candidates     int            // enumerated
	Priced         int            // checked, lowered and simulated
	PrunedTime     int            // skipped: lower bound no better than the Top-th best
	PrunedMemory   int            // skipped: lower bound on memory over the budget
	Rejected       map[string]int // check or lowering errors, by message
	Elapsed        time.Duration
	bound          map[*Candidate]float64
}

// base is what the search knows of the program before pricing: per
// micro-batch count, the checked graph's arithmetic and whether it checks.
type base struct {
	flops    map[int]float64 // micro-batch count → FLOPs of the step's live values
	paramB   float64         // parameter bytes
	gradB    float64         // bytes of the gradients a data-parallel axis must reduce
	dataAxis int             // index in Program.Axes; -1 none
	half     bool            // mixed precision
	grads    int             // how many gradients gradB counts
	rejected map[int]string  // micro-batch counts that do not check
}

// Search finds the fastest strategies for p on opts.Devices devices.
func Search(p *Program, opts Options) (*Result, error) {
	start := time.Now()
	if opts.Links == nil {
		opts.Links = Uniform(meshDefault())
	}
	if opts.Rate == 0 {
		opts.Rate = lower.ModelFLOPS
	}
	if opts.Top == 0 {
		opts.Top = 5
	}
	space := opts.Space.withDefaults(p)
	b, err := analyse(p, space)
	if err != nil {
		return nil, err
	}
	var micro []int
	for m := range b.flops {
		micro = append(micro, m)
	}
	slices.Sort(micro)
	cands := enumerate(p, space, opts.Devices, micro, b.dataAxis)
	res := &Result{Prog: p, Opts: opts, Candidates: len(cands), Rejected: map[string]int{}, bound: map[*Candidate]float64{}}
	for m, why := range b.rejected {
		res.Rejected[fmt.Sprintf("M=%d: %s", m, why)]++
	}
	for _, c := range cands {
		res.bound[c] = b.timeBound(c, opts)
	}
	sort.SliceStable(cands, func(i, j int) bool { return res.bound[cands[i]] < res.bound[cands[j]] })
	var fit []*Evaluated
	for _, c := range cands {
		if !opts.Exhaustive {
			if opts.Memory > 0 && b.memoryBound(c, opts.Devices, p) > float64(opts.Memory) {
				res.PrunedMemory++
				continue
			}
			if len(fit) >= opts.Top && res.bound[c] >= fit[opts.Top-1].Cost.Step {
				res.PrunedTime++
				continue
			}
		}
		e, err := evaluate(p, c, opts)
		res.Priced++
		if err != nil {
			res.Rejected[firstLine(err)]++
			continue
		}
		if e.Fits {
			fit = insertRanked(fit, e)
		} else {
			res.Losers = append(res.Losers, e)
		}
	}
	if len(fit) > opts.Top {
		res.Losers = append(res.Losers, fit[opts.Top:]...)
		fit = fit[:opts.Top]
	}
	res.Ranked = fit
	sort.SliceStable(res.Losers, func(i, j int) bool { return res.Losers[i].Cost.Step < res.Losers[j].Cost.Step })
	res.Elapsed = time.Since(start)
	return res, nil
}

// insertRanked keeps evs sorted by step time, then by peak memory.
func insertRanked(evs []*Evaluated, e *Evaluated) []*Evaluated {
	i := sort.Search(len(evs), func(i int) bool { return better(e, evs[i]) })
	return slices.Insert(evs, i, e)
}

func better(a, b *Evaluated) bool {
	if a.Cost.Step != b.Cost.Step {
		return a.Cost.Step < b.Cost.Step
	}
	return a.Cost.Peak < b.Cost.Peak
}

func evaluate(p *Program, c *Candidate, opts Options) (*Evaluated, error) {
	lp, err := compile(p, c, opts.Devices, opts.Links)
	if err != nil {
		return nil, err
	}
	cost, err := price(lp, c, opts.Links, opts.Rate)
	if err != nil {
		return nil, err
	}
	return &Evaluated{Cand: c, Cost: cost, Label: c.Label(p), Fits: opts.Memory == 0 || cost.Peak <= opts.Memory}, nil
}

// firstLine is an error's first line with the file name dropped: the
// same mistake in many candidates counts once.
func firstLine(err error) string {
	var el lang.ErrorList
	if errors.As(err, &el) && len(el) > 0 {
		return el[0].Msg
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// analyse checks the program once per micro-batch count, on a mesh of one
// device and without a pipeline axis: which counts the program's shapes
// accept, and the arithmetic and parameter bytes the bounds use.
func analyse(p *Program, s Space) (*base, error) {
	b := &base{flops: map[int]float64{}, rejected: map[int]string{}, dataAxis: -1}
	one := &Candidate{Sizes: make([]int, len(p.Axes)), PP: 1, Checkpoint: make([]bool, len(p.Defs))}
	for i := range one.Sizes {
		one.Sizes[i] = 1
	}
	one.Micro = 1
	g, err := check(p, one)
	if err != nil {
		return nil, err
	}
	rows := batchRows(g)
	b.params(g, p)
	counts := []int{1}
	if g.Train != nil {
		counts = micros(rows, s.MaxMicro)
	}
	for _, m := range counts {
		if m > 1 {
			c := *one
			c.Micro = m
			if g, err = check(p, &c); err != nil {
				b.rejected[m] = firstLine(err)
				continue
			}
		}
		for _, v := range lower.LiveValues(g) {
			b.flops[m] += ops.FLOPs(v)
		}
	}
	return b, nil
}

func check(p *Program, c *Candidate) (*ir.Graph, error) {
	return lang.CheckSource(p.Path, p.Source(c, ""), lang.CheckOptions{Dir: filepath.Dir(p.Path)})
}

// batchRows is the rows a step sees: the train block's batch, or dim 0
// of the first input split along it.
func batchRows(g *ir.Graph) int {
	if g.Train != nil && g.Train.Batch > 0 {
		return g.Train.Batch
	}
	for _, v := range g.Values {
		if v.Op == "input" && len(v.Type.Shape) > 0 {
			for _, s := range v.Declared {
				if s.IsS() && s.Dim == 0 {
					return v.Type.Shape[0]
				}
			}
		}
	}
	return 1
}

// params sums the parameters' bytes and the gradient bytes a data axis
// must reduce (the parameters it does not split; half precision halves
// them).
func (b *base) params(g *ir.Graph, p *Program) {
	if g.Train != nil {
		if a, err := train.DataAxis(g, "", 0); err == nil {
			b.dataAxis = a
		}
	}
	for _, v := range g.Values {
		if v.Op != "param" {
			continue
		}
		b.paramB += float64(v.Type.Bytes())
		if b.dataAxis < 0 || v.Declared == nil || !v.Declared[b.dataAxis].IsB() {
			continue
		}
		gb := float64(v.Type.Bytes())
		if b.half = g.Train.Precision != ""; b.half {
			gb /= 2
		}
		b.gradB += gb
		b.grads++
	}
}
