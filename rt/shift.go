package rt

import (
	"errors"
	"iter"
	"sync/atomic"
	"time"
)

// Shifts: how the in-process launcher runs more ranks than processors.
//
// With a goroutine per rank and more ranks than processors (GOMAXPROCS),
// Go's scheduler decides who runs, and every wait at a collective is a
// goroutine put to sleep and woken: the woken one is queued on its
// waker's processor, the ranks drift from one processor to the other,
// and a spinning waiter takes turns from those still working. Measured
// on the Megatron MLP on [dp=2, tp=2] (4 ranks, tiny tensors): the step
// took as long with two processors as with one (bench/README.md).
//
// Instead the launcher makes one shift per processor: a goroutine that
// runs ranks as coroutines (iter.Pull), one at a time. When a rank must
// wait at a collective's barrier it parks, handing its shift back in a
// direct switch that involves no scheduler, and the shift resumes the
// next rank; resumed again later, a parked rank looks whether its wait
// is over and parks again if not. A wait between ranks that one shift
// runs is thus a few switches. Each shift visits the ranks in its own
// order, its own share first (rank r belongs to shift r mod the number
// of shifts), then the other shifts' shares, and resumes each rank that
// no other shift is running (a claim per resume): a shift whose share is ahead takes up
// the ranks of one that lags, as when the machine's other load holds
// the lagging shift's processor. When a whole round moves no rank (each
// waits for a rank another shift is running), the shift polls the way
// hot waits do (hotwait.go): it yields its processor every hotYield (or
// first after hotFirst), and after hotBudget it sleeps shiftNap between
// rounds, so a long kernel on another shift costs little CPU here.
//
// A rank's coroutine is made once and kept with its grown stack; each
// execution hands it a job. Coroutines are made on a goroutine of the
// launcher's, never locked to its OS thread, and resumed only by
// goroutines that are not locked either (a caller that is leaves shift 0
// to the crew): Go kills the process when a coroutine is resumed in
// another thread-lock state than the one it was made in. Only waits at
// barriers park: the launcher uses shifts only for plans whose ranks
// block nowhere else (no point-to-point messages, no simulated clock,
// CPU backends).

// parker is what a rank running as a coroutine of a shift parks with.
// The launcher sets on before an execution's ranks start (Local.pace);
// the rest is read and written only by the rank's coroutine and by the
// shift that claimed the rank, while the coroutine is suspended.
type parker struct {
	on    bool                // this execution runs the rank in a shift
	yield func(struct{}) bool // the coroutine's: back to the shift
	// moves counts the rank's progress between two parks: a wait it
	// began, or one it got past (a shift none of whose ranks moved in a
	// round is idle)
	moves uint64
}

// parking says whether waits of this rank park.
func (p *parker) parking() bool { return p != nil && p.on }

// errShiftEnded ends a parked wait whose shift will never resume it (the
// launcher was collected mid-execution).
var errShiftEnded = errors.New("the rank's shift ended")

// park hands the shift back until it resumes this rank.
func (p *parker) park() error {
	if !p.yield(struct{}{}) {
		return errShiftEnded
	}
	return nil
}

// rankCoro is one rank's coroutine: it runs each job it is handed, then
// gives its shift back with done set. A shift claims it (busy) before
// resuming it, so that no two shifts run it at once.
type rankCoro struct {
	next func() (struct{}, bool)
	stop func()
	pk   *parker
	job  func()
	done atomic.Bool
	busy atomic.Bool
}

func newRankCoro(pk *parker) *rankCoro {
	c := &rankCoro{pk: pk}
	c.done.Store(true)
	c.next, c.stop = iter.Pull(func(yield func(struct{}) bool) {
		pk.yield = yield
		for {
			job := c.job
			c.job = nil
			job()
			c.done.Store(true)
			if !yield(struct{}{}) {
				return
			}
		}
	})
	return c
}

// shiftWork is one execution's ranks, the order each shift visits them
// in, and how many ranks are not done.
type shiftWork struct {
	orders [][]*rankCoro
	live   atomic.Int32
}

// newShiftWork hands each rank its job and orders the ranks for each of
// shifts shifts (shiftOrders).
func newShiftWork(ranks []*rankCoro, jobs []func(), shifts int) *shiftWork {
	return startShifts(ranks, jobs, shiftOrders(ranks, shifts))
}

// shiftOrders is the order each of shifts shifts visits the ranks in:
// shift s its own ranks (r mod shifts = s) first, then those of shift
// s+1, and so on round. A launcher keeps them from one execution to the
// next (they change only with the number of shifts).
func shiftOrders(ranks []*rankCoro, shifts int) [][]*rankCoro {
	orders := make([][]*rankCoro, shifts)
	for s := range shifts {
		orders[s] = make([]*rankCoro, 0, len(ranks))
		for k := range shifts {
			for r := (s + k) % shifts; r < len(ranks); r += shifts {
				orders[s] = append(orders[s], ranks[r])
			}
		}
	}
	return orders
}

// startShifts hands each rank its job, to run in orders.
func startShifts(ranks []*rankCoro, jobs []func(), orders [][]*rankCoro) *shiftWork {
	w := &shiftWork{orders: orders}
	for i, c := range ranks {
		c.job = jobs[i]
		c.done.Store(false)
	}
	w.live.Store(int32(len(ranks)))
	return w
}

// run is shift s: it resumes, in its order, each rank that is not done
// and that no other shift holds, round after round until every rank is
// done. Taking another shift's rank keeps both processors busy when one
// shift's ranks are ahead: the other's may be waiting for a processor
// that the machine's other load holds.
func (w *shiftWork) run(s int) {
	var idle shiftIdle
	for w.live.Load() > 0 {
		moved := false
		for _, c := range w.orders[s] {
			if w.resume(c) {
				moved = true
			}
		}
		if moved {
			idle.reset()
		} else {
			idle.wait()
		}
	}
}

// resume runs c, if no other shift holds it and it is not done, until it
// parks or is done, and says whether it moved (shiftIdle).
func (w *shiftWork) resume(c *rankCoro) bool {
	if c.done.Load() || !c.busy.CompareAndSwap(false, true) {
		return false
	}
	defer c.busy.Store(false)
	if c.done.Load() { // done by the shift that held it
		return false
	}
	before := c.pk.moves
	c.next()
	if c.done.Load() {
		w.live.Add(-1)
		return true
	}
	return c.pk.moves != before
}

// shiftIdle paces a shift whose ranks all wait for other shifts (see the
// file comment), yielding as pollFor does.
type shiftIdle struct {
	idle bool // since a fruitless round
	pc   pacing
}

// shiftNap is how long a shift sleeps between two rounds once it has
// polled for hotBudget (the kernel's timers make it longer).
const shiftNap = 20 * time.Microsecond

func (s *shiftIdle) reset() { s.idle = false }

func (s *shiftIdle) wait() {
	if !s.idle {
		s.idle, s.pc = true, startPacing()
		return
	}
	if !s.pc.pace(hotBudget) {
		time.Sleep(shiftNap)
	}
}
