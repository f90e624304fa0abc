package rt

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Hot waits: how the in-process launcher's goroutines wait for each other
// when every rank has a processor of its own.
//
// A rank that must wait (for its peers at a collective's barrier, for the
// next step's job, for the other ranks at the end of a step) normally
// sleeps, and whoever completes the wait wakes it. In Go a woken goroutine
// is queued on the waker's processor, and the other processor, idle since
// its goroutine slept, must be woken by the kernel to steal it: on this
// project's 2-core virtual machines the woken rank ran 7-18 µs after the
// wake (measured on the Megatron MLP on [dp=1, tp=2], from each rank's
// timeline: a collective's wait exceeded its peer's lateness by that much,
// and rank 1 began each step 10 µs after rank 0). A step of that model
// has five such waits and lasts 50 µs on one device.
//
// When the process has no more ranks than processors (GOMAXPROCS), a
// waiting rank instead polls for up to hotBudget, yielding once every
// hotYield, or first after hotFirst (see pollFor): it keeps its
// processor and its thread awake, and sees the wait end within
// nanoseconds. Past the budget it sleeps as
// before, so a peer that is late (a long kernel, a descheduled thread on
// a shared machine) costs at most hotBudget of a core, during which any
// goroutine queued on that processor still runs at the next yield. With more ranks
// than processors a poller would hold a processor that a peer it waits
// for needs, so those launchers never poll (a rank then sleeps at once or
// yields, barrier.spin). The local launcher decides at each execution
// (Local.Exec), not once: GOMAXPROCS may change under it (a program's
// call, or the runtime following a container's CPU limit), and asking
// once per step keeps the scheduler's lock out of every wait.

// hotBudget is how long a hot wait polls before it sleeps: a few of the
// waits measured above, and small next to a step of any model where
// waking costs little in comparison.
const hotBudget = 50 * time.Microsecond

// hotRanks says whether n ranks in this process may wait hot: each can
// have a processor of its own.
func hotRanks(n int) bool { return n > 1 && n <= runtime.GOMAXPROCS(0) }

// pollFor polls done until it says true (then true) or the budget has
// passed (then false). The clock is read every 64 polls: a read costs
// about 50 ns here, a poll of an atomic a few. It yields once every
// hotYield: the peer it waits for may be queued on this very processor
// (a goroutine just started or woken goes to its starter's queue, and
// the idle processor's thread takes microseconds to come and steal it),
// and a poll that never yielded would keep it from running for the
// whole budget. (Measured: the data-parallel MLP's all-reduces alone on
// two ranks, bench/dp_test.go, took 2.3x the ideal at the median with a
// poll that never yielded, against 1.1x sleeping at once.)
//
// When the machine's other load leaves the process one core, both ranks
// take turns on one processor, and each wait costs the peer up to
// hotYield of its run: the Megatron MLP step on [dp=1, tp=2] took 105 µs
// at the median with one core busy with another process, against 65 µs
// yielding after 0.5 µs (as with GOMAXPROCS=1). On an idle machine that
// early yield cost 5-10% of the step instead (a yield is a trip through
// the scheduler's global queue). So the first yield comes after hotFirst
// only while yields are found to let another goroutine run (yieldEarly).
func pollFor(budget time.Duration, done func() bool) bool {
	pc := startPacing()
	for k := 1; ; k++ {
		if done() {
			return true
		}
		if k%64 == 0 && !pc.pace(budget) {
			return done()
		}
	}
}

// pacing is the yielding of one hot wait (pollFor, and an idle shift's
// rounds): once every hotYield, the first time after hotFirst while
// yieldEarly.
type pacing struct {
	start   time.Time
	yielded time.Duration // when, since start, it last yielded
	early   bool          // the next yield is an early one
}

func startPacing() pacing {
	pc := pacing{start: time.Now(), early: yieldEarly.Load()}
	if pc.early {
		pc.yielded = hotFirst - hotYield
	}
	return pc
}

// pace yields if it is time to, learning from the yield (learnYield),
// and says whether the wait is still within budget (false: past it, and
// nothing done).
func (pc *pacing) pace(budget time.Duration) bool {
	now := time.Since(pc.start)
	if now > budget {
		return false
	}
	if now-pc.yielded > hotYield {
		runtime.Gosched()
		pc.yielded = time.Since(pc.start)
		learnYield(pc.yielded-now, pc.early)
		pc.early = false
	}
	return true
}

// yieldEarly says whether hot waits yield after hotFirst (pollFor): set
// when a yield let another goroutine run (it took hotShared or more),
// cleared when an early yield did not. One for the process: the
// machine's other load bears on all its ranks alike.
var yieldEarly atomic.Bool

// learnYield updates yieldEarly from a yield that took d, early or not
// (an early one that let another goroutine run sets it too: another wait
// may have cleared it since this one began).
func learnYield(d time.Duration, early bool) {
	switch {
	case d >= hotShared && !yieldEarly.Load():
		yieldEarly.Store(true)
	case d < hotShared && early && yieldEarly.Load():
		yieldEarly.Store(false)
	}
}

// hotShared is how long a yield takes when it let another goroutine run
// on the processor: a trip through the scheduler alone takes a few
// hundred nanoseconds.
const hotShared = 2 * time.Microsecond

// hotFirst is how long a hot wait polls before its first yield while
// yieldEarly: a peer that runs on another core usually arrives within it
// (a collective's ranks arrive within a microsecond or two of each other
// in a balanced step), and one that shares this processor runs after it.
const hotFirst = 500 * time.Nanosecond

// hotYield is how long a hot wait polls between two yields.
const hotYield = 5 * time.Microsecond
