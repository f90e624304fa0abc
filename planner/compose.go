package planner

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/pipeline"
)

// Composed pricing: a candidate's cost built from a folded program's
// (fold.go), as Alpa and PipeDream build a pipeline's from per-layer
// profiles — except that each unit's profile here is the exact lowering
// of the unit on the candidate's own inner mesh and links.
//
// A pipelined candidate is priced from a proxy: the folded program on
// the candidate's inner mesh and links with the pipeline axis resized to
// give each folded unit a stage of its own, under ZB-1P (whose I and W
// sum to the B of the schedules that do not split the backward), with
// three micro-batches of the candidate's size and its ZeRO stage,
// offload, checkpointing and placements (buildProxy). From the proxy's
// ranks the composition takes, per unit: its time in each action of the
// first, a middle and the last micro-batch, the bytes it sends at its
// end, its work before and after the actions (the optimizer step), its
// collectives, and its memory profile. The candidate's own cut is the
// pipeline pass's balance over the program's units, with each unit's
// model cost its folded unit's; each stage's action then costs the sum
// of its units', and the schedule simulator times the step as
// pricePipeline does. Memory per pipeline rank replays its units'
// profiles in the candidate's schedule order (rankPeak).
//
// Proxies are shared by every candidate with the same inner mesh and
// links, micro-batch size, ZeRO stage, offload, checkpointing and
// placements (pipeline size, position and schedule aside): for the
// 96-layer GPT of bench/gptgen on 4096 devices, 366 keys stand for 3724
// candidates, each a six-unit program with three micro-batches instead
// of 99 units with eight; the bounds leave about a hundred to lower.
//
// A candidate without a pipeline is extrapolated instead: the folded
// programs keeping three and four of the run are priced exactly, and
// every figure is taken as affine in the run's length (exact for sums of
// identical units; the tests compare).
//
// Composed costs rank the candidates; the best are then priced exactly
// (search_composed.go), so the figures plan prints are the lowering's own.

// folded is what the search keeps of a folded program.
type folded struct {
	plan      *foldPlan
	rows      int      // rows per step (set by Search from the analysis)
	prog      *Program // the folded program keeping three of the run
	longer    *Program // keeping four (extrapolation), nil with several runs
	mu        sync.Mutex
	proxies   map[string]*proxyEntry
	extrapols map[string]*proxyEntry
	compiles  atomic.Int64 // folded programs checked and lowered (lowered)
}

type proxyEntry struct {
	once sync.Once
	px   *proxy
	err  error
}

func newFolded(p *Program) *folded {
	fp := p.fold(3)
	if fp == nil {
		return nil
	}
	prog, err := loadSource(p.Path, fp.Source)
	if err != nil || prog.Units != fp.Units {
		return nil
	}
	f := &folded{plan: fp, prog: prog, proxies: map[string]*proxyEntry{}, extrapols: map[string]*proxyEntry{}}
	if len(fp.Runs) == 1 {
		if fp4 := p.fold(4); fp4 != nil {
			if longer, err := loadSource(p.Path, fp4.Source); err == nil {
				f.longer = longer
			}
		}
	}
	return f
}

// lowered counts the folded programs lowered so far.
func (f *folded) lowered() int { return int(f.compiles.Load()) }

// compile is compileSource of a folded program, counted (lowered).
func (f *folded) compile(path string, src []byte, c *Candidate, n int, links *Links) (*lower.Plan, error) {
	f.compiles.Add(1)
	return compileSource(path, src, c, n, links)
}

// proxy is a lowered folded program, walked per pipeline rank.
type proxy struct {
	// stageRank is the proxy schedule's (the lowered plan itself is not
	// kept: a search holds hundreds of proxies)
	stageRank []int
	ranks     []*rankTime
	tails     []*rankTime // per rank, the actions of its micro-batch 1 (a middle one)
	// stageOf: each folded unit's stage in the proxy; owner: the unit
	// the stage's costs are counted for (the one with most compute)
	stageOf, owner    []int
	micros            int       // the proxy's micro-batches (2, or the candidate's)
	unitCompute, sent []float64 // per folded unit, for the real cut
	// per proxy rank, on its device of highest peak: what explain
	// counts as held, and the memory profile of its actions
	param, optim, grad []int64
	mem                []*memProfile
	flat               *Cost // composeFlat's extrapolation
}

// microFor maps a candidate's micro-batch (of micro) to the proxy's
// that stands for it: the first, a middle one, the last.
func (px *proxy) microFor(micro int) func(int) int {
	if micro <= px.micros {
		return func(m int) int { return m }
	}
	return func(m int) int {
		switch m {
		case 0:
			return 0
		case micro - 1:
			return px.micros - 1
		}
		return 1
	}
}

// zeroBubble says whether a schedule splits the backward (I and W).
func zeroBubble(schedule string) bool {
	return schedule == "zb1p" || schedule == "zbv"
}

func (f *folded) key(c *Candidate, links *Links, extrapolate bool) string {
	var b strings.Builder
	full := c.fullSizes()
	for i := range c.Sizes {
		a := i
		if c.PP > 1 && i >= c.PPPos {
			a++
		}
		l, _ := links.Axis(full, a)
		fmt.Fprintf(&b, "%d:%g:%g,", c.Sizes[i], l.Alpha, l.Beta)
	}
	fmt.Fprintf(&b, "|%d|%d|%v|%v|%v", c.Micro, c.Zero, c.Offload, c.Checkpoint, c.Place)
	if extrapolate {
		return "x" + b.String()
	}
	return b.String()
}

// compileSource checks and lowers a program text for candidate c's
// topology (the real candidate's, whatever mesh the text declares).
func compileSource(path string, src []byte, c *Candidate, n int, links *Links) (*lower.Plan, error) {
	g, err := lang.CheckSource(path, src, lang.CheckOptions{Devices: n, Dir: filepath.Dir(path)})
	if err != nil {
		return nil, err
	}
	return lower.Lower(g, lower.Options{Topo: topology(g, c, links)})
}

// proxyFor lowers (once per key) the proxy of pipelined candidate c.
func (f *folded) proxyFor(c *Candidate, opts Options, dataAxis string) (*proxy, error) {
	k := f.key(c, opts.Links, false)
	f.mu.Lock()
	e := f.proxies[k]
	if e == nil {
		e = &proxyEntry{}
		f.proxies[k] = e
	}
	f.mu.Unlock()
	e.once.Do(func() { e.px, e.err = f.buildProxy(c, opts, dataAxis) })
	return e.px, e.err
}

// buildProxy lowers the proxy: the folded program on c's inner mesh and
// links, a stage per unit under ZB-1P (whose I and W sum to any other
// schedule's B), and three micro-batches of c's size (the batch
// rewritten): the first and the last differ from the others (the first
// backward makes the gradients, the last forward and backward free what
// the step kept for all), and every middle one costs what the second
// does — or all of c's micro-batches where they are three or fewer, or
// the program's shapes refuse a smaller batch.
func (f *folded) buildProxy(c *Candidate, opts Options, dataAxis string) (*proxy, error) {
	pc := *c
	pc.PP, pc.Schedule = f.plan.Units, "zb1p"
	n := 1
	for _, s := range pc.fullSizes() {
		n *= s
	}
	var lp *lower.Plan
	var err error
	if k := 3; k < c.Micro && f.rows > 0 && f.rows%c.Micro == 0 {
		pc.Micro, pc.batch = k, f.rows/c.Micro*k
		lp, err = f.compile(f.prog.Path, f.prog.Source(&pc, ""), c, n, opts.Links)
	}
	if lp == nil {
		pc.Micro, pc.batch = c.Micro, 0
		if lp, err = f.compile(f.prog.Path, f.prog.Source(&pc, ""), c, n, opts.Links); err != nil {
			return nil, err
		}
	}
	if lp.Pipe == nil || len(lp.Pipe.Stages.UnitStage) != f.plan.Units {
		return nil, fmt.Errorf("the folded program's units do not match the fold")
	}
	px := &proxy{stageRank: lp.Pipe.Schedule.StageRank, stageOf: lp.Pipe.Stages.UnitStage, micros: pc.Micro}
	px.unitCompute, px.sent = lower.UnitCosts(lp.Graph)
	px.owner = make([]int, lp.Pipe.Schedule.Stages)
	for st := range px.owner {
		px.owner[st] = -1
	}
	for u, st := range px.stageOf {
		if o := px.owner[st]; o < 0 || px.unitCompute[u] > px.unitCompute[o] {
			px.owner[st] = u
		}
	}
	full := lp.Exec.Mesh
	sched := lp.Pipe.Schedule
	px.ranks, px.tails = make([]*rankTime, sched.Ranks), make([]*rankTime, sched.Ranks)
	for _, p := range []*[]int64{&px.param, &px.optim, &px.grad} {
		*p = make([]int64, sched.Ranks)
	}
	px.mem = make([]*memProfile, sched.Ranks)
	for r := range px.ranks {
		coord := make([]int, full.NumAxes())
		coord[lp.Pipe.Axis] = r
		px.ranks[r], px.tails[r] = walkTail(lp, lp.Exec.ProgramOf(full.Device(coord)), opts.Rate, dataAxis, 1)
	}
	peakDev := make([]int, sched.Ranks)
	for d := range full.Size() {
		r := full.Coord(d)[lp.Pipe.Axis]
		if lp.Peak[d] > lp.Peak[peakDev[r]] || full.Coord(peakDev[r])[lp.Pipe.Axis] != r {
			peakDev[r] = d
		}
	}
	for r, d := range peakDev {
		px.param[r], px.optim[r], px.grad[r] = lower.HeldBytes(lp, d)
		px.mem[r] = profile(lp, d)
	}
	return px, nil
}

// composePipeline prices pipelined candidate c from its proxy.
func (f *folded) composePipeline(c *Candidate, opts Options, dataAxis string) (*Cost, error) {
	px, err := f.proxyFor(c, opts, dataAxis)
	if err != nil {
		return nil, err
	}
	sched, err := pipeline.FromSpec(c.Schedule, c.PP, c.Micro)
	if err != nil {
		return nil, err
	}
	units := f.plan.Unit // program unit → folded unit
	compute, sent := make([]float64, len(units)), make([]float64, len(units))
	for u, fu := range units {
		compute[u], sent[u] = px.unitCompute[fu], px.sent[fu]
	}
	cut := lower.BalanceUnits(compute, sent, sched.Stages)
	// each real stage's units, in order
	stageUnits := make([][]int, sched.Stages)
	for u, st := range cut {
		stageUnits[st] = append(stageUnits[st], u)
	}
	ranks := make([]*rankTime, sched.Ranks)
	for r := range ranks {
		ranks[r] = newRankTime()
	}
	mem := make([]rankMemory, sched.Ranks)
	proxyRanks := make([][]int, sched.Stages) // per stage, its units' proxy ranks
	pm := px.microFor(c.Micro)
	zb := zeroBubble(c.Schedule)
	for st, us := range stageUnits {
		r := ranks[sched.StageRank[st]]
		for _, u := range us {
			fu := units[u]
			pst := px.stageOf[fu]
			if px.owner[pst] != fu {
				continue // its stage's costs are counted for another unit
			}
			pr := px.stageRank[pst]
			q := px.ranks[pr]
			r.addTotals(q, 1)
			if c.Micro > px.micros {
				r.addTotals(px.tails[pr], float64(c.Micro-px.micros))
			}
			for m := range c.Micro {
				for _, tm := range [][2]map[actKey]float64{{r.action, q.action}, {r.data, q.data}} {
					t := func(k pipeline.Kind) float64 { return tm[1][actKey{pst, pm(m), k}] }
					tm[0][actKey{st, m, pipeline.F}] += t(pipeline.F)
					if zb {
						tm[0][actKey{st, m, pipeline.I}] += t(pipeline.I)
						tm[0][actKey{st, m, pipeline.W}] += t(pipeline.W)
					} else {
						tm[0][actKey{st, m, pipeline.B}] += t(pipeline.I) + t(pipeline.W)
					}
				}
			}
			mem[sched.StageRank[st]].addUnit(px, pr)
			proxyRanks[st] = append(proxyRanks[st], pr)
		}
		// what the stage sends: its last unit's forward output, its
		// first unit's input gradient
		first, last := px.stageOf[units[us[0]]], px.stageOf[units[us[len(us)-1]]]
		pf, pl := px.stageRank[first], px.stageRank[last]
		// (nothing to send where the next stage is on the same rank, as
		// at the turn of a V-shaped schedule)
		local := func(to int) bool { return to >= 0 && to < sched.Stages && sched.StageRank[to] == sched.StageRank[st] }
		for m := range c.Micro {
			if !local(st + 1) {
				r.sent[actKey{st, m, pipeline.F}] = px.ranks[pl].sent[actKey{last, pm(m), pipeline.F}]
			}
			if !local(st - 1) {
				r.sent[actKey{st, m, pipeline.I}] = px.ranks[pf].sent[actKey{first, pm(m), pipeline.I}]
			}
		}
	}
	link, _ := opts.Links.Axis(c.fullSizes(), c.PPPos)
	cost, err := simulatePipeline(ranks, sched, link)
	if err != nil {
		return nil, err
	}
	if cost.floor, err = floorPipeline(ranks, sched, link); err != nil {
		return nil, err
	}
	for r, m := range mem {
		if peak := rankPeak(px, sched, r, proxyRanks); peak > cost.Peak {
			cost.Peak, cost.Params, cost.Optimizer, cost.Gradients = peak, m.param, m.optim, m.grad
			cost.Activations = cost.Peak - cost.Params - cost.Optimizer
		}
	}
	return cost, nil
}

func newRankTime() *rankTime {
	return &rankTime{comm: map[string]float64{}, bytes: map[string]float64{}, axis: map[string]float64{},
		action: map[actKey]float64{}, sent: map[actKey]float64{}, data: map[actKey]float64{}}
}

// addTotals adds scale times q's totals (not its actions) to r.
func (r *rankTime) addTotals(q *rankTime, scale float64) {
	r.compute += scale * q.compute
	r.pre += scale * q.pre
	r.post += scale * q.post
	r.preData += scale * q.preData
	r.postData += scale * q.postData
	r.model += scale * q.model
	for _, m := range [][2]map[string]float64{{r.comm, q.comm}, {r.bytes, q.bytes}, {r.axis, q.axis}} {
		for k, v := range m[1] {
			m[0][k] += scale * v
		}
	}
}

// floorPipeline is the composed step without the time the ZeRO stage and
// offload change (collectives over the data axis, host copies): what no
// candidate of the same group, whatever its ZeRO stage or offload, can
// beat — the same actions and sends, each no longer.
func floorPipeline(ranks []*rankTime, sched *pipeline.Schedule, link mesh.Link) (float64, error) {
	less := make([]*rankTime, len(ranks))
	for i, r := range ranks {
		l := *r
		l.action = make(map[actKey]float64, len(r.action))
		for k, v := range r.action {
			l.action[k] = v - r.data[k]
		}
		l.pre, l.post = r.pre-r.preData, r.post-r.postData
		less[i] = &l
	}
	c, err := simulatePipeline(less, sched, link)
	if err != nil {
		return 0, err
	}
	return c.Step, nil
}

// compose prices c from the folded program; ok is false where it cannot
// (no fold, or a candidate the fold does not model).
func (f *folded) compose(c *Candidate, opts Options, dataAxis string) (*Cost, error) {
	if c.PP > 1 {
		return f.composePipeline(c, opts, dataAxis)
	}
	if f.longer == nil {
		return nil, errNoCompose
	}
	return f.composeFlat(c, opts, dataAxis)
}

var errNoCompose = fmt.Errorf("no composed model for this candidate")
