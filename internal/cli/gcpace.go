package cli

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// explain is a short-lived batch compiler, and nearly everything it
// allocates early stays alive to the end (the graph, the plan, the
// report). Go's default pacing (GOGC=100) collects each time the heap
// doubles from 4 MB on, so it scans the growing live heap a dozen times
// or more: on a 96-layer pipelined GPT that was about half of explain's
// CPU. compilePacing lets the heap grow to startHeap before the first
// collection, then hands back to GOGC's pacing, so the heap stays within
// max(startHeap, twice what is alive) as before, and a small program
// collects once or never.
//
// Only GOGC is changed, never the memory limit (the runtime's LimitMemory
// owns that), and not at all when the user set GOGC. Overlapping holds in
// one process (tests, the REPL) share one setting; the last to finish
// restores GOGC from before the first.
const startHeap = 512 << 20

var pacing struct {
	sync.Mutex
	holds  int
	before int  // GOGC before the first hold
	ours   bool // GOGC is set by compilePacing and not yet restored
}

// compilePacing starts a hold and returns the function that ends it.
func compilePacing() (release func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	pacing.Lock()
	defer pacing.Unlock()
	pacing.holds++
	if pacing.holds == 1 {
		pacing.before = debug.SetGCPercent(percentFor(liveHeap()))
		pacing.ours = true
		armAfterGC()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pacing.Lock()
			defer pacing.Unlock()
			pacing.holds--
			if pacing.holds == 0 && pacing.ours {
				debug.SetGCPercent(pacing.before)
				pacing.ours = false
			}
		})
	}
}

// percentFor is the GOGC whose next heap goal is about startHeap when
// live bytes survived the last collection (the goal is live·(1+GOGC/100),
// and at least 4 MB·GOGC/100), and 100 once twice live reaches it.
func percentFor(live uint64) int {
	live = max(live, 4<<20)
	if 2*live >= startHeap {
		return 100
	}
	return int(100 * (startHeap - live) / live)
}

// armAfterGC makes the next collection call afterGC: a finalizer runs once
// its object is found unreachable, that is after a collection.
func armAfterGC() {
	runtime.SetFinalizer(&gcSentinel{}, func(*gcSentinel) { afterGC() })
}

// gcSentinel holds a pointer so that it is not a tiny allocation (those
// share a block, and their finalizers may never run).
type gcSentinel struct{ _ *int }

// afterGC re-aims GOGC at startHeap from what this collection left alive,
// until twice that reaches startHeap; then GOGC is what it was before.
func afterGC() {
	pacing.Lock()
	defer pacing.Unlock()
	if !pacing.ours {
		return
	}
	pct := percentFor(liveHeap())
	if pct <= 100 {
		debug.SetGCPercent(pacing.before)
		return
	}
	debug.SetGCPercent(pct)
	armAfterGC()
}

// liveHeap is the bytes the last collection found alive.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
