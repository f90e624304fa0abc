package rt

import (
	"os"
	"runtime/debug"
	"sync"

	"github.com/meshrun/meshrun/plan"
)

// Go's collector lets the heap grow to twice what survived the last
// collection (GOGC=100) before it collects again. The plan knows what
// every rank holds at its peak, so a process that runs all of a plan's
// ranks (the local launcher) can do better: a soft memory limit of the
// plan's total plus a margin makes the collector run when the heap nears
// what the plan needs, not twice what it last found alive. On the
// data-parallel MLP over 256 virtual devices that is the difference
// between about 2.7x and 1.3x the plan's total (bench/dpmem.sh).

// memoryMargin is what the limit allows above the plan's total: a tenth
// of it (free lists, messages in flight, the collector's own lag) and
// the runtime, program and plan themselves. The process's RSS runs a
// little above the limit (goroutine stacks, pages not yet returned to
// the system): with a fifth, 256 devices measured 1.31x the plan.
func memoryMargin(total int64) int64 { return total/10 + 64<<20 }

// PlanTotal is the sum of the ranks' peaks (plan.Peaks).
func PlanTotal(p *plan.Plan) int64 {
	var total int64
	for _, b := range p.Peaks() {
		total += b
	}
	return total
}

// MemoryLimitFor is the soft memory limit for running ranks whose peaks
// sum to total in one process: total plus memoryMargin.
func MemoryLimitFor(total int64) int64 { return total + memoryMargin(total) }

// LimitMemory sets the process's soft memory limit to
// MemoryLimitFor(total) unless the user chose one (GOMEMLIMIT), and
// returns a function that lifts it again. Runs that overlap in one
// process (tests, the REPL) add up: the limit is the sum of theirs, and
// the last to finish restores the limit from before the first. The
// collector still runs as GOGC says below the limit; above it, it runs as
// often as it must (at most half the CPU, so a plan that needs more than
// it says slows down rather than stops).
func LimitMemory(total int64) (restore func()) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	limits.Lock()
	defer limits.Unlock()
	if limits.active == 0 {
		limits.before = debug.SetMemoryLimit(-1)
	}
	limits.active++
	limits.sum += MemoryLimitFor(total)
	debug.SetMemoryLimit(limits.sum)
	var once sync.Once
	return func() {
		once.Do(func() {
			limits.Lock()
			defer limits.Unlock()
			limits.active--
			limits.sum -= MemoryLimitFor(total)
			if limits.active == 0 {
				debug.SetMemoryLimit(limits.before)
				return
			}
			debug.SetMemoryLimit(limits.sum)
		})
	}
}

// limits is the state LimitMemory shares between overlapping runs.
var limits struct {
	sync.Mutex
	active      int
	sum, before int64
}
