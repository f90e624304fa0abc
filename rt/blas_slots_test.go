package rt

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSlotsBoundAndHandOver: many goroutines take and give back slots of
// a semaphore of 3; no more than 3 ever hold one at once, every waiter
// gets one in the end (a lost hand-over would leave one waiting forever),
// and the bound is reached (the test exercises the waiting path).
func TestSlotsBoundAndHandOver(t *testing.T) {
	const limit, workers, rounds = 3, 16, 2000
	s := newSlots(limit)
	var in, most atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				s.acquire()
				n := in.Add(1)
				for {
					m := most.Load()
					if n <= m || most.CompareAndSwap(m, n) {
						break
					}
				}
				runtime.Gosched() // hold it a while
				in.Add(-1)
				s.release()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("waiters never got their slots")
	}
	require.LessOrEqual(t, most.Load(), int64(limit))
	require.Equal(t, int64(limit), most.Load(), "the bound was never reached: the waiting path went untested")
	require.Zero(t, s.count.Load())
	require.Zero(t, len(s.tokens), "a token left over would let a later call past the bound")
}
