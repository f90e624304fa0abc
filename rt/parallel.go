package rt

import (
	"runtime"
	"sync"
)

// parallelGrain is the fewest elements a chunk of parallelFor runs: a
// goroutine costs about a microsecond to start and join, the time a
// core takes over some ten thousand elements of a cheap loop.
const parallelGrain = 1 << 15

// parallelFor runs body over [0, n) in chunks on up to GOMAXPROCS
// goroutines when n is large enough to pay for them (intra-op parallelism,
// as a BLAS does for GEMM); small loops run inline.
func parallelFor(n int, body func(lo, hi int)) {
	if n <= parallelGrain {
		// without asking GOMAXPROCS, which takes the scheduler's global
		// lock: nearly every loop of a mesh step is this small, and the
		// ranks asked at once (0.5% of a tiny-GPT mesh step's CPU under
		// perf, the lock's cache line bouncing between cores; issue 10)
		body(0, n)
		return
	}
	workers := min(runtime.GOMAXPROCS(0), (n+parallelGrain-1)/parallelGrain)
	if workers <= 1 {
		body(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	// the caller runs the first chunk itself: the others' goroutines may
	// find no free processor (a peer rank holding one in a hot wait,
	// hotwait.go), and a caller parked in wg.Wait meanwhile would leave
	// them all to one processor
	for lo := chunk; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(lo, hi)
		}()
	}
	body(0, min(chunk, n))
	wg.Wait()
}

// parallelSlices runs f over d and in (of one length) in chunks, as
// parallelFor does, where f is a plain function (vecmath.Gelu), through
// parallelWith: a small loop makes no closure.
func parallelSlices(d, in []float32, f func(d, in []float32)) {
	parallelWith(len(d), slicePair{d, in, f}, func(a slicePair, lo, hi int) { a.f(a.d[lo:hi], a.in[lo:hi]) })
}

// slicePair is parallelSlices' state.
type slicePair struct {
	d, in []float32
	f     func(d, in []float32)
}

// parallelWith is parallelFor for a body that is a plain function of its
// state a (the slices and scalars a closure would capture): a closure
// handed to parallelFor escapes (its goroutines run it), so a caller that
// builds one allocates on every call, and nearly every loop of a mesh
// step is small enough to run inline; here the closure is made only on
// the parallel path, so a small loop allocates nothing (gelu, exp, tanh,
// sigmoid, the unfused Adam ops and the f64 update each made one per
// call). body must capture nothing, or it is that closure again.
func parallelWith[A any](n int, a A, body func(a A, lo, hi int)) {
	if n <= parallelGrain {
		body(a, 0, n)
		return
	}
	parallelFor(n, func(lo, hi int) { body(a, lo, hi) })
}
