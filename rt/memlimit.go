package rt

import (
	"os"
	"runtime/debug"

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

// memoryMargin is what the limit allows above the plan's total: a fifth
// of it (free lists, messages in flight, the collector's own lag) and
// the runtime, program and plan themselves.
func memoryMargin(total int64) int64 { return total/5 + 64<<20 }

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
// returns a function that restores the previous limit. The collector still runs as GOGC says
// below the limit; above it, it runs as often as it must (at most half
// the CPU, so a plan that needs more than it says slows down rather than
// stops).
func LimitMemory(total int64) (restore func()) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	old := debug.SetMemoryLimit(MemoryLimitFor(total))
	return func() { debug.SetMemoryLimit(old) }
}
