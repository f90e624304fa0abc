package planner

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
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
	// Exact prices every candidate it does not prune by its own lowering,
	// never by composition (compose.go): the search of programs that do
	// not fold, and the tests' reference.
	Exact bool
	// Workers price candidates concurrently; 0: GOMAXPROCS.
	Workers int
	// TimeLimit stops starting new candidates after this long (0: none);
	// the result then says how far from optimal the best can be.
	TimeLimit time.Duration
}

// Evaluated is a priced candidate.
type Evaluated struct {
	Cand  *Candidate
	Cost  *Cost
	Label string
	Fits  bool
	// Composed: Cost is the composed model's (search_composed.go), not
	// the candidate's own lowering; Fits then means it may fit.
	Composed bool
}

// Result is a search's outcome.
type Result struct {
	Prog *Program
	Opts Options
	// Ranked holds the best Top strategies that fit, fastest first;
	// Losers the other priced ones (fitting or not), fastest first.
	Ranked, Losers []*Evaluated
	Candidates     int            // enumerated, Uneven left out
	Uneven         int            // split a declared tensor unevenly
	FewUnits       int            // more pipeline stages than the train block has units
	Priced         int            // checked, lowered and simulated
	Composed       int            // priced by composition from folded programs
	Proxies        int            // folded programs lowered for it
	PrunedTime     int            // skipped: lower bound no better than the Top-th best
	PrunedSibling  int            // of those, by a bound from a priced sibling
	PrunedMemory   int            // skipped: lower bound on memory over the budget
	Rejected       map[string]int // check or lowering errors, by message
	// Stopped: the time limit ran out with Left candidates neither priced
	// nor pruned, the lowest bound among them Unpriced.
	Stopped  bool
	Left     int
	Unpriced float64
	Elapsed  time.Duration
	Analysis time.Duration // of Elapsed, checking the program once per micro-batch count
	// Folded is the fold composition used (nil: every candidate priced by
	// its own lowering).
	Folded *foldPlan
	bound  map[*Candidate]float64
	base   *base
}

// foldFor is the folded program composition prices from, or nil.
func foldFor(p *Program, opts Options) *folded {
	if opts.Exhaustive || opts.Exact || !p.HasTrain {
		return nil
	}
	return newFolded(p)
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
	splits   []split         // the dims the declared placements split
	rejected map[int]string  // micro-batch counts that do not check
	rows     int             // rows per step (batchRows)
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
	if opts.Workers == 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	space := opts.Space.withDefaults(p)
	if opts.Memory > 0 && p.HasTrain && len(opts.Space.Offload) == 0 {
		space.Offload = []bool{false, true} // a budget: device memory may bind
	}
	f := foldFor(p, opts)
	b, err := analyseFolded(p, space, f)
	if err != nil && f != nil {
		f = nil // the folded programs do not check (a wrong guess at a loop's stacked parameters): price in full
		b, err = analyse(p, space)
	}
	if err != nil {
		return nil, err
	}
	analysed := time.Since(start)
	if f != nil {
		f.rows = b.rows
	}
	var micro []int
	for m := range b.flops {
		micro = append(micro, m)
	}
	slices.Sort(micro)
	all := enumerate(p, space, opts.Devices, micro, b.dataAxis)
	res := &Result{Prog: p, Opts: opts, Rejected: map[string]int{}, bound: map[*Candidate]float64{}, base: b, Analysis: analysed}
	var cands []*Candidate
	for _, c := range all {
		switch {
		case c.PP > 1 && c.PP*group(c).v > p.Units:
			res.FewUnits++
		case !b.even(c):
			res.Uneven++
		default:
			cands = append(cands, c)
		}
	}
	res.Candidates = len(cands)
	for m, why := range b.rejected {
		res.Rejected[fmt.Sprintf("M=%d: %s", m, why)]++
	}
	for _, c := range cands {
		res.bound[c] = b.timeBound(c, opts)
	}
	// price the likeliest first: the bound plus a guess at the
	// tensor-parallel latency the bound cannot know (modelGuess); pruning
	// tests each candidate's own bound, so the order changes only how
	// soon the good ones are found (and what a time limit leaves)
	key := map[*Candidate]float64{}
	for _, c := range cands {
		key[c] = res.bound[c] + b.modelGuess(c, p, opts)
	}
	sort.SliceStable(cands, func(i, j int) bool { return key[cands[i]] < key[cands[j]] })
	var fit []*Evaluated
	if f != nil {
		res.Folded = f.plan
		fit = res.runComposed(cands, b, p, f, opts, start)
	} else {
		fit = res.run(cands, b, p, opts, start)
	}
	if len(fit) > opts.Top {
		res.Losers = append(res.Losers, fit[opts.Top:]...)
		fit = fit[:opts.Top]
	}
	res.Ranked = fit
	sort.SliceStable(res.Losers, func(i, j int) bool { return better(res.Losers[i], res.Losers[j]) })
	res.Elapsed = time.Since(start)
	return res, nil
}

// run prices the candidates, in order, on opts.Workers goroutines. A
// candidate is skipped when its bound is above the Top-th best step
// priced so far: that step only falls, so nothing skipped could have
// made the Top. Past opts.TimeLimit no more are started (those under
// way finish); Unpriced then holds the lowest bound among those left.
func (res *Result) run(cands []*Candidate, b *base, p *Program, opts Options, start time.Time) []*Evaluated {
	var (
		mu  sync.Mutex
		fit []*Evaluated
	)
	model := map[groupKey]float64{} // the least model-axis time priced per group
	kth := func() float64 { return kthStep(fit, opts.Top) }
	take := inTurn(&mu, cands, func(c *Candidate, left []*Candidate) verdict {
		switch {
		case opts.Exhaustive:
		case opts.Memory > 0 && b.memoryBound(c, opts.Devices) > float64(opts.Memory):
			res.PrunedMemory++
			return pass
		case res.bound[c] > kth():
			res.PrunedTime++
			return pass
		case b.siblingBound(c, opts, model) > kth():
			res.PrunedTime++
			res.PrunedSibling++
			return pass
		case opts.TimeLimit > 0 && time.Since(start) > opts.TimeLimit:
			res.stopAt(left, kth(), true)
			return stop
		}
		res.Priced++
		return toPrice
	})
	workers(opts.Workers, take, func(c *Candidate) {
		e, err := evaluate(p, c, opts, b.dataName(p))
		mu.Lock()
		defer mu.Unlock()
		if res.record(e, err, &fit) {
			lowerTo(model, group(c), e.Cost.ModelAxes)
		}
	})
	return fit
}

// verdict is what a search decides of the next candidate in its queue.
type verdict int

const (
	toPrice verdict = iota // hand it to a worker
	pass                   // skip it (pruned, or left modelled)
	stop                   // end the queue here (the time limit)
)

// inTurn is a take for workers: under mu, the candidates of queue in
// order, each judged as it comes up (judge sees it and the candidates
// left from it on, and runs under mu), until one is to be priced, the
// queue runs out, or judge stops it.
func inTurn(mu *sync.Mutex, queue []*Candidate, judge func(c *Candidate, left []*Candidate) verdict) func() *Candidate {
	next := 0
	return func() *Candidate {
		mu.Lock()
		defer mu.Unlock()
		for next < len(queue) {
			c := queue[next]
			next++
			switch judge(c, queue[next-1:]) {
			case pass:
				continue
			case stop:
				next = len(queue)
				return nil
			}
			return c
		}
		return nil
	}
}

// lowerTo keeps in m[k] the least v it is given.
func lowerTo[K comparable](m map[K]float64, k K, v float64) {
	if old, ok := m[k]; !ok || v < old {
		m[k] = v
	}
}

// kthStep is the k-th best step of evs (ranked), +Inf while there are
// fewer.
func kthStep(evs []*Evaluated, k int) float64 {
	if len(evs) < k {
		return math.Inf(1)
	}
	return evs[k-1].Cost.Step
}

// stopAt ends a search at its time limit: of the candidates not taken,
// those whose bound is at most bar are left unpriced (Unpriced the lowest
// of their bounds), the others skipped by the time bound when pruned.
func (res *Result) stopAt(left []*Candidate, bar float64, pruned bool) {
	if !res.Stopped {
		res.Stopped, res.Unpriced = true, math.Inf(1)
	}
	for _, c := range left {
		switch {
		case res.bound[c] <= bar:
			res.Left++
			res.Unpriced = min(res.Unpriced, res.bound[c])
		case pruned:
			res.PrunedTime++
		}
	}
}

// workers runs do on n goroutines (at least one) for each candidate take
// hands out, until it hands out nil.
func workers(n int, take func() *Candidate, do func(*Candidate)) {
	var wg sync.WaitGroup
	for range max(1, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := take(); c != nil; c = take() {
				do(c)
			}
		}()
	}
	wg.Wait()
}

// record files an exactly priced candidate: rejected with its error, in
// fit (ranked) or among the losers. It says whether e was priced.
func (res *Result) record(e *Evaluated, err error, fit *[]*Evaluated) bool {
	switch {
	case err != nil:
		res.Rejected[firstLine(err)]++
		return false
	case e.Fits:
		*fit = insertRanked(*fit, e)
	default:
		res.Losers = append(res.Losers, e)
	}
	return true
}

// insertRanked keeps evs sorted by step time, then by peak memory.
func insertRanked(evs []*Evaluated, e *Evaluated) []*Evaluated {
	i := sort.Search(len(evs), func(i int) bool { return better(e, evs[i]) })
	return slices.Insert(evs, i, e)
}

// better orders by step time, then peak memory, then label (so that the
// order does not depend on which worker finished first).
func better(a, b *Evaluated) bool {
	if a.Cost.Step != b.Cost.Step {
		return a.Cost.Step < b.Cost.Step
	}
	if a.Cost.Peak != b.Cost.Peak {
		return a.Cost.Peak < b.Cost.Peak
	}
	return a.Label < b.Label
}

func evaluate(p *Program, c *Candidate, opts Options, dataAxis string) (*Evaluated, error) {
	lp, err := compile(p, c, opts.Devices, opts.Links)
	if err != nil {
		return nil, err
	}
	cost, err := price(lp, c, opts.Links, opts.Rate, dataAxis)
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
	g, err := lang.CheckSource(p.Path, p.Src, lang.CheckOptions{Dir: filepath.Dir(p.Path)})
	if err != nil {
		return nil, err
	}
	counts := []int{1}
	b.rows = batchRows(g)
	if g.Train != nil {
		counts = micros(b.rows, s.MaxMicro)
	}
	var first error
	for _, m := range counts {
		c := *one
		c.Micro = m
		g, err := check(p, &c)
		if err != nil {
			b.rejected[m] = firstLine(err)
			first = cmp.Or(first, err)
			continue
		}
		if len(b.flops) == 0 {
			b.params(g, p)
			b.declaredSplits(g, p)
		}
		for _, v := range lower.LiveValues(g) {
			b.flops[m] += ops.FLOPs(v)
		}
	}
	if len(b.flops) == 0 {
		return nil, fmt.Errorf("no micro-batch count checks on one device: %w", first)
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

// split is a dim of a declared tensor that a mesh axis splits; batch
// marks an input's dim 0, which each micro-batch splits.
type split struct {
	axis, extent int
	batch        bool
}

func (b *base) declaredSplits(g *ir.Graph, p *Program) {
	for _, v := range g.Values {
		if !v.IsSource() || v.Declared == nil {
			continue
		}
		for a, s := range v.Declared {
			if s.IsS() && a < len(p.Axes) {
				b.splits = append(b.splits, split{a, v.Type.Shape[s.Dim], v.Op == "input" && s.Dim == 0})
			}
		}
	}
}

// even says whether c's mesh splits every declared tensor evenly (and the
// micro-batch evenly over the axes that split the batch): the planner
// proposes no mesh that leaves devices with ragged or empty blocks.
func (b *base) even(c *Candidate) bool {
	for _, s := range b.splits {
		n := s.extent
		if s.batch {
			n /= c.Micro
		}
		if n%c.Sizes[s.axis] != 0 {
			return false
		}
	}
	return true
}

// dataName is the data axis's name ("" without one).
func (b *base) dataName(p *Program) string {
	if b.dataAxis < 0 {
		return ""
	}
	return p.Axes[b.dataAxis]
}
