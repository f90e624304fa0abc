package rt

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrun/meshrun/internal/threadlock"
	"github.com/meshrun/meshrun/plan"
)

// Local is the in-process launcher: every rank of a plan is a goroutine of
// this process with its own Worker, over the in-process ring collectives.
// Workers, their groups and the transport are made once and serve every
// execution, so a training run pays for them once, not once per step.
type Local struct {
	plan    *plan.Plan
	Workers []*Worker
	stall   func(rank int) bool
	clock   *SimClock
	// crew runs ranks 1..n-1 of every execution (rank 0 runs on the
	// caller's goroutine), or shifts 1.. (all of them when the caller is
	// locked to its thread); nil until the first execution.
	crew []*crewMember
	// hot: the ranks wait for each other hot (hotwait.go); shared with
	// the crew and the ranks' barriers, and decided again at each
	// execution, as GOMAXPROCS may have changed since the last
	hot *atomic.Bool
	// shiftable: the plan's ranks block nowhere but at their groups'
	// barriers, so that more ranks than processors run in shifts
	// (shift.go); parks are the ranks' parkers, coros their coroutines
	// (made at the first execution in shifts), orders the shifts' visits
	// of them (shiftOrders)
	shiftable bool
	parks     []*parker
	coros     []*rankCoro
	orders    [][]*rankCoro
}

// NewLocal makes the workers of every rank of p.
func NewLocal(ctx context.Context, p *plan.Plan, opts Options) (*Local, error) {
	n := p.Mesh.Size()
	comms := NewInProc(n)
	l := &Local{plan: p, Workers: make([]*Worker, n), stall: opts.stall, clock: opts.Clock, hot: &comms[0].shared.hot, parks: make([]*parker, n)}
	for r, c := range comms {
		l.parks[r] = c.park
	}
	budget := make([]int64, n) // 0: none
	if opts.Backend == nil && n >= budgetRanks {
		budget = p.Peaks()
	}
	if opts.Backend == nil {
		shareBLASThreads(n) // the ranks' GEMMs run at once: a share each
	}
	if opts.Backends != nil && len(opts.Backends) != n {
		return nil, fmt.Errorf("%d backends for %d ranks", len(opts.Backends), n)
	}
	bes := make([]Backend, n)
	for r := range bes {
		bes[r] = opts.Backend
		if opts.Backends != nil {
			bes[r] = opts.Backends[r]
		}
		if bes[r] == nil {
			// a CPU per rank, each recycling its own kernels' outputs
			// from one step to the next (a shared one would need a lock
			// per allocation)
			bes[r] = &CPU{BLAS: DefaultBLAS(), arena: newArena(budget[r])}
		}
		// every rank's before any group is made: a group runs on a
		// device when all its members' backends are that device
		comms[r].DrawResultsFrom(bes[r])
	}
	for r, be := range bes {
		w, err := NewWorker(ctx, p, r, be, comms[r], opts)
		if err != nil {
			return nil, err
		}
		l.Workers[r] = w
	}
	l.shiftable = opts.Backend == nil && opts.Backends == nil && l.clock == nil && !l.passesMessages()
	return l, nil
}

// passesMessages says whether a rank's program sends or receives
// point to point (a pipeline's stages), waits that do not park.
func (l *Local) passesMessages() bool {
	for _, w := range l.Workers {
		for i := range w.Prog.Prog.Instrs {
			if k := w.Prog.Prog.Instrs[i].Kind; k == plan.Send || k == plan.Recv {
				return true
			}
		}
	}
	return false
}

// budgetRanks is the mesh size from which each rank's arena keeps only
// what its peak in the plan allows (hostPool.budget). With many ranks in
// one process, memory is what bounds the mesh one can study: on 256
// data-parallel ranks the budget takes the process from 1.31x to 1.19x
// the plan's total, for about 14% more CPU (buffers a step frees that do
// not fit are made again the next). Smaller meshes recycle everything.
const budgetRanks = 128

// Exec runs every rank's program once; feed, if not nil, gives each rank
// its Feed. When a rank fails the others are cancelled, and the first
// real failure (not a cancellation it caused) is returned.
func (l *Local) Exec(ctx context.Context, feed func(rank int) Feed) ([]*RankResult, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(l.Workers)
	if l.clock != nil {
		l.clock.reset() // every rank finished the last execution
	}
	hot, shifts := l.pace(n)
	out := make([]*RankResult, n)
	errs := make([]error, n)
	start := time.Now()
	rank := func(r int) {
		// a bug that panics outside an instruction's kernel (which
		// recovers its own, execution.exec) fails the rank: a rank in a
		// shift would otherwise unwind through its shift, leaving the
		// others waiting for it
		defer func() {
			if p := recover(); p != nil {
				errs[r] = fmt.Errorf("rank %d: internal error: %v", r, p)
				cancel()
			}
		}()
		if l.stall != nil && l.stall(r) {
			l.stalled(ctx, r)
			errs[r] = ctx.Err()
			return
		}
		var f Feed
		if feed != nil {
			f = feed(r)
		}
		res, err := l.Workers[r].Run(ctx, f, start)
		if err != nil {
			errs[r] = err
			cancel()
			return
		}
		out[r] = res
	}
	// the caller runs rank 0 (shift 0), the crew the others. A coroutine
	// must be resumed in the thread-lock state it was made in (the
	// runtime kills the process otherwise): they are made unlocked
	// (inShifts), and a caller locked to its OS thread
	// (runtime.LockOSThread, a cgo callback) leaves every shift to the
	// crew and only waits, sleeping (a poller would hold a processor a
	// shift needs).
	var tasks []func()
	if shifts > 0 {
		work := l.inShifts(shifts, rank)
		if threadlock.Locked() {
			tasks = append(tasks, func() {})
			hot = false
		}
		for s := range shifts {
			tasks = append(tasks, func() { work.run(s) })
		}
	} else {
		for r := range n {
			tasks = append(tasks, func() { rank(r) })
		}
	}
	l.together(tasks, hot)
	wall := time.Since(start)
	err := firstError(errs)
	if err != nil {
		return nil, wall, err
	}
	return out, wall, nil
}

// pace decides how n ranks wait for each other in this execution: hot
// (hotwait.go), and in how many shifts (0: a goroutine per rank;
// shift.go) — with more ranks than processors, one per processor, each
// of which then has a processor of its own.
func (l *Local) pace(n int) (hot bool, shifts int) {
	hot = hotRanks(n)
	if procs := runtime.GOMAXPROCS(0); l.shiftable && n > procs {
		hot, shifts = procs > 1, procs
	}
	if l.hot.Load() != hot { // (written only on a change: every rank reads it)
		l.hot.Store(hot)
	}
	for _, pk := range l.parks {
		pk.on = shifts > 0
	}
	return hot, shifts
}

// together runs tasks[0] on the caller's goroutine and the others on the
// crew, and returns when all are done.
func (l *Local) together(tasks []func(), hot bool) {
	crew := l.hire()
	var wg sync.WaitGroup
	var left atomic.Int32 // tasks 1.. still running
	left.Store(int32(len(tasks) - 1))
	wg.Add(len(tasks) - 1)
	for i, task := range tasks[1:] {
		crew[i].give(func() {
			// done before counted out: the caller, seeing left at 0,
			// then finds the wait group done rather than sleeping on
			// it for the moment between the two
			defer left.Add(-1)
			defer wg.Done()
			task()
		})
	}
	tasks[0]()
	if hot {
		pollFor(hotBudget, func() bool { return left.Load() == 0 })
	}
	wg.Wait()
}

// stalled is a stalled rank's execution (Options.stall, for tests: a
// peer that never comes): it waits until ctx ends, parked if it runs in
// a shift.
func (l *Local) stalled(ctx context.Context, r int) {
	pk := l.parks[r]
	if !pk.parking() {
		<-ctx.Done()
		return
	}
	for ctx.Err() == nil && pk.park() == nil {
	}
}

// inShifts hands the ranks' coroutines their jobs (rank(r)) for shifts
// shifts.
func (l *Local) inShifts(shifts int, rank func(r int)) *shiftWork {
	if l.coros == nil {
		// made on a goroutine of their own, never locked to a thread,
		// as the crew that resumes them (see Exec)
		l.coros = make([]*rankCoro, len(l.Workers))
		made := make(chan struct{})
		go func() {
			defer close(made)
			for r := range l.coros {
				l.coros[r] = newRankCoro(l.parks[r])
			}
		}()
		<-made
		// the coroutines end with the launcher (none is running then)
		runtime.AddCleanup(l, func(coros []*rankCoro) {
			for _, c := range coros {
				c.stop()
			}
		}, l.coros)
	}
	jobs := make([]func(), len(l.coros))
	for r := range jobs {
		jobs[r] = func() { rank(r) }
	}
	if len(l.orders) != shifts {
		l.orders = shiftOrders(l.coros, shifts)
	}
	return startShifts(l.coros, jobs, l.orders)
}

// hire returns the goroutines that run ranks 1..n-1, started on the first
// execution and kept for the launcher's life: a goroutine made per rank
// per step starts on a small stack and grows it by copying as the rank's
// program runs, every step (runtime.copystack, 3-7% of a mesh step of
// the Megatron MLP); a kept one keeps its grown stack. Each waits on its
// own channel, which holds no reference to the launcher, so the launcher
// can be collected, and a cleanup then closes the channels and the
// goroutines end.
func (l *Local) hire() []*crewMember {
	if l.crew != nil || len(l.Workers) < 2 {
		return l.crew
	}
	l.crew = make([]*crewMember, len(l.Workers)-1)
	for i := range l.crew {
		c := &crewMember{jobs: make(chan func()), hot: l.hot}
		l.crew[i] = c
		go c.serve()
	}
	runtime.AddCleanup(l, func(crew []*crewMember) {
		for _, c := range crew {
			close(c.jobs)
		}
	}, l.crew)
	return l.crew
}

// crewMember is a goroutine that runs one rank's part of each execution.
// Between executions it waits for its next job on jobs; a hot one
// (hotwait.go) first polls for up to hotBudget, so that the next step's
// job, usually handed over within microseconds, finds it running.
type crewMember struct {
	jobs  chan func()
	state atomic.Int32 // crewSleeping, crewPolling or crewHanded
	job   atomic.Pointer[func()]
	hot   *atomic.Bool // the launcher's: whether to poll after a job
}

const (
	crewSleeping = iota // at jobs (or running a job)
	crewPolling         // polling for a job
	crewHanded          // a job is being or has been put in job
)

// give hands the member its next job: directly when it polls, else
// through its channel.
func (c *crewMember) give(job func()) {
	if c.state.CompareAndSwap(crewPolling, crewHanded) {
		c.job.Store(&job)
		return
	}
	c.jobs <- job
}

// serve runs the member's jobs until its channel is closed.
func (c *crewMember) serve() {
	for job := range c.jobs {
		job()
		for c.hot.Load() && c.pollJob() {
		}
	}
}

// pollJob polls for a job for up to hotBudget and runs it, and says
// whether it ran one (false: the member goes back to its channel).
func (c *crewMember) pollJob() bool {
	c.state.Store(crewPolling)
	if !pollFor(hotBudget, func() bool { return c.state.Load() == crewHanded }) &&
		c.state.CompareAndSwap(crewPolling, crewSleeping) {
		return false
	}
	// handed: give stores the job right after its swap
	var job *func()
	for job = c.job.Load(); job == nil; job = c.job.Load() {
	}
	c.job.Store(nil)
	c.state.Store(crewSleeping)
	(*job)()
	return true
}

// Run executes once and assembles every output on the host.
func (l *Local) Run(ctx context.Context, feed func(rank int) Feed) (*Result, error) {
	return RunOn(ctx, l, feed, true)
}

// Plan implements Launcher.
func (l *Local) Plan() *plan.Plan { return l.plan }

// Ranks implements Launcher: every rank.
func (l *Local) Ranks() []int {
	out := make([]int, len(l.Workers))
	for i := range out {
		out[i] = i
	}
	return out
}

// Worker implements Launcher.
func (l *Local) Worker(rank int) *Worker { return l.Workers[rank] }

// Lead implements Launcher: the only process leads.
func (l *Local) Lead() bool { return true }

// Gather implements Launcher: host copies of every rank's blocks, joined.
func (l *Local) Gather(_ context.Context, specs []plan.Tensor, blocks [][]Buffer, _ bool) ([]*Tensor, error) {
	out := make([]*Tensor, len(specs))
	for j := range specs {
		parts := make([]*Tensor, len(l.Workers))
		for _, r := range BlockReaders(l.plan, &specs[j]) { // replicas once
			t, err := l.Workers[r].BackendOf(specs[j].Host).CopyOut(blocks[r][j])
			if err != nil {
				return nil, err
			}
			parts[r] = t
		}
		t, err := assembleHost(l.plan, &specs[j], parts)
		if err != nil {
			return nil, err
		}
		out[j] = t
	}
	return out, nil
}

// GatherStats implements Launcher: every rank's statistics are here.
func (l *Local) GatherStats(_ context.Context, stats []DeviceStats) ([]DeviceStats, error) {
	return stats, nil
}
