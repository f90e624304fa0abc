package rt

import "sync/atomic"

// slots is a counting semaphore whose uncontended acquire and release
// are one atomic add each. It bounds the calls into OpenBLAS at once
// (obSlots): a buffered channel did the same with a lock and unlock of
// the channel per send and per receive, and a deferred closure, on every
// GEMM call — 1.7% of a tiny-GPT mesh step's CPU under perf, whose four
// ranks make about 1,300 small GEMM calls a step (issue 10).
//
// count is the holders plus the waiters. An acquire that finds the count
// within max holds a slot at once; one past it waits for a token. A
// release that finds the count past max before it (so someone waits, or
// is about to) hands its slot over with a token instead of freeing it.
type slots struct {
	count  atomic.Int64
	max    int64
	tokens chan struct{}
}

func newSlots(n int) *slots {
	// every waiter finds its token buffered: a release never blocks
	return &slots{max: int64(n), tokens: make(chan struct{}, 1<<16)}
}

func (s *slots) acquire() {
	if s.count.Add(1) > s.max {
		<-s.tokens
	}
}

func (s *slots) release() {
	if s.count.Add(-1) >= s.max {
		s.tokens <- struct{}{}
	}
}
