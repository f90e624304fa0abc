package rt

import (
	"runtime"
	"sync"
)

// parallelFor runs body over [0, n) in chunks on up to GOMAXPROCS
// goroutines when n is large enough to pay for them (intra-op parallelism,
// as a BLAS does for GEMM); small loops run inline.
func parallelFor(n int, body func(lo, hi int)) {
	const grain = 1 << 15
	workers := min(runtime.GOMAXPROCS(0), (n+grain-1)/grain)
	if workers <= 1 {
		body(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			body(lo, hi)
		}()
	}
	wg.Wait()
}
