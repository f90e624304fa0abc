package planner

import (
	"sort"
	"sync"
	"time"
)

// The search with composed pricing (compose.go), for programs that fold.
//
// Phase 1 models: candidates in the order of their guess, each priced by
// composition (a few proxy lowerings shared by many candidates), skipping
// one whose bound is above the Top-th best modelled step by more than
// the model's tolerance — its own bound (bound.go), or its group's
// (candidates that differ only in ZeRO stage, offload and schedules with
// the same stages per rank): the least time off the data axis a member
// spent, and, per schedule, the least modelled step of a member without
// the time ZeRO and offload change (Cost.floor: the same actions, each
// shorter by its collectives over the data axis and its host copies,
// simulated again), which a sibling with another ZeRO stage or offload
// cannot beat. Phase 2 prices exactly: the modelled candidates
// that may fit, fastest first, until Top of them fit and the next one's
// modelled step is more than the tolerance above the Top-th exact step;
// then those the model could not price, while their bound is below it.
// What plan prints for its strategies are always exact prices.

// composeTolerance is how far a composed step may be from the exact one
// for the search to stay exact: TestComposedMatchesExact holds every
// candidate of its programs to 2%; the search allows 5%.
const composeTolerance = 0.05

// composeMemorySlack: a modelled peak up to this factor over the budget
// may still fit, and only one this factor under it surely fits (composed
// memory is within 25% of the exact peak on the tests' programs): phase
// 1 prunes only against candidates sure to fit, phase 2 prices exactly
// those that may.
const composeMemorySlack = 1.3

// runComposed is run (search.go) with composed pricing first.
func (res *Result) runComposed(cands []*Candidate, b *base, p *Program, f *folded, opts Options, start time.Time) []*Evaluated {
	modelled, unmodelled := res.model(cands, b, p, f, opts, start)
	// phase 2: exact prices, the likeliest first
	sort.SliceStable(modelled, func(i, j int) bool { return better(modelled[i], modelled[j]) })
	var (
		mu  sync.Mutex
		fit []*Evaluated
	)
	kth := func() float64 { return kthStep(fit, opts.Top) }
	queue := make([]*Candidate, 0, len(modelled)+len(unmodelled))
	guess := map[*Candidate]float64{}
	for _, e := range modelled {
		if e.Fits {
			queue = append(queue, e.Cand)
			guess[e.Cand] = e.Cost.Step
		}
	}
	for _, c := range unmodelled {
		queue = append(queue, c)
		guess[c] = res.bound[c]
	}
	exact := map[*Candidate]bool{}
	take := inTurn(&mu, queue, func(c *Candidate, left []*Candidate) verdict {
		if guess[c] > kth()*(1+composeTolerance) {
			return pass // modelled well above the Top-th: stays modelled
		}
		// past the time limit, only until one strategy fits (the answer
		// needs one priced exactly)
		if opts.TimeLimit > 0 && time.Since(start) > opts.TimeLimit && len(fit) > 0 {
			res.stopAt(left, kth()*(1+composeTolerance), false)
			return stop
		}
		res.Priced++
		return toPrice
	})
	workers(opts.Workers, take, func(c *Candidate) {
		e, err := evaluate(p, c, opts, b.dataName(p))
		mu.Lock()
		defer mu.Unlock()
		exact[c] = true
		res.record(e, err, &fit)
	})
	// the modelled ones not priced exactly lose with their modelled cost
	for _, e := range modelled {
		if !exact[e.Cand] {
			res.Losers = append(res.Losers, e)
		}
	}
	return fit
}

// model is phase 1: the composed cost of every candidate the bounds do
// not rule out, and the candidates the model cannot price.
func (res *Result) model(cands []*Candidate, b *base, p *Program, f *folded, opts Options, start time.Time) (modelled []*Evaluated, unmodelled []*Candidate) {
	var (
		mu    sync.Mutex
		top   []*Evaluated             // modelled, sure to fit, fastest first
		model = map[groupKey]float64{} // least modelled time off the data axis per group (bound.go)
		floor = map[floorKey]float64{} // least modelled step without ZeRO's and offload's time per group and schedule
	)
	kth := func() float64 { return kthStep(top, opts.Top) }
	// bar: the exact step of the Top-th modelled can be as high as its
	// modelled step over (1 − tolerance)
	bar := func() float64 { return kth() / (1 - composeTolerance) }
	take := inTurn(&mu, cands, func(c *Candidate, left []*Candidate) verdict {
		switch {
		case opts.Memory > 0 && b.memoryBound(c, opts.Devices) > float64(opts.Memory):
			res.PrunedMemory++
			return pass
		case res.bound[c] > bar():
			res.PrunedTime++
			return pass
		case b.siblingBound(c, opts, model)*(1-composeTolerance) > bar(),
			floor[floorKey{group(c), c.Schedule}]*(1-composeTolerance) > bar():
			res.PrunedTime++
			res.PrunedSibling++
			return pass
		case opts.TimeLimit > 0 && time.Since(start) > opts.TimeLimit:
			res.stopAt(left, bar(), true)
			return stop
		}
		return toPrice
	})
	workers(opts.Workers, take, func(c *Candidate) {
		cost, err := f.compose(c, opts, b.dataName(p))
		mu.Lock()
		switch {
		case err != nil:
			// no composed model (errNoCompose), or the proxy did not
			// lower: priced exactly, the candidate itself says why
			unmodelled = append(unmodelled, c)
		default:
			res.Composed++
			e := &Evaluated{Cand: c, Cost: cost, Label: c.Label(p), Composed: true,
				Fits: opts.Memory == 0 || float64(cost.Peak) <= composeMemorySlack*float64(opts.Memory)}
			modelled = append(modelled, e)
			// only a candidate that fits whatever the model's error
			// may set the bar others are pruned against
			if opts.Memory == 0 || composeMemorySlack*float64(cost.Peak) <= float64(opts.Memory) {
				top = insertRanked(top, e)
			}
			lowerTo(model, group(c), cost.ModelAxes)
			lowerTo(floor, floorKey{group(c), c.Schedule}, cost.floor)
		}
		mu.Unlock()
	})
	res.Proxies = f.lowered()
	sort.SliceStable(unmodelled, func(i, j int) bool { return res.bound[unmodelled[i]] < res.bound[unmodelled[j]] })
	return modelled, unmodelled
}

// floorKey is a group and a schedule: the candidates whose Cost.floor is
// the same but for placements inference may choose differently.
type floorKey struct {
	g        groupKey
	schedule string
}
