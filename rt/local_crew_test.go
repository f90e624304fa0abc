package rt

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// goroutinesIn counts the goroutines whose stacks show frame (a
// function's name and its opening parenthesis).
func goroutinesIn(frame string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), frame)
		}
		buf = make([]byte, 2*len(buf))
	}
}

// serving counts the goroutines in serve: the local launchers' rank
// goroutines. (A stack trace does not print the channel that would tell
// one launcher's from another's.)
func serving() int { return goroutinesIn("meshrun/rt.(*crewMember).serve(") }

// settled collects what earlier tests left (no test here runs in
// parallel) until count stops falling, and returns it: counting all
// goroutines made these tests flaky, as other tests' goroutines ended
// meanwhile.
func settled(count func() int) int {
	n := count()
	for range 100 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		m := count()
		if m == n {
			return n
		}
		n = m
	}
	return n
}

// The local launcher's rank goroutines outlive an execution (the next
// one reuses them) but not the launcher: once it is collected they end.
// Both when its ranks wait hot (as many as processors) and when they
// sleep.
func TestLocalGoroutinesEndWithIt(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	for _, n := range []int{2, 4} {
		p := compile(t, rowParallelMatmul(n))
		before := settled(serving)
		func() {
			l, err := NewLocal(context.Background(), p.Exec, Options{})
			require.NoError(t, err)
			require.Equal(t, n == 2, l.hot.Load())
			for range 2 {
				_, err := l.Run(context.Background(), nil)
				require.NoError(t, err)
			}
			require.Equal(t, before+n-1, serving(), "ranks 1..n-1 wait for the next execution")
			runtime.KeepAlive(l) // else collectable, and its crew ended, before the count
		}()
		deadline := time.Now().Add(10 * time.Second)
		for serving() > before && time.Now().Before(deadline) {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		require.Equal(t, before, serving(), "the launcher's goroutines end once it is collected")
	}
}

// A hot crew member runs every job it is given exactly once and in turn,
// whether the next comes while it polls (at once), after it went back to
// its channel (past hotBudget), or in the race between the two.
func TestCrewMemberHandsOver(t *testing.T) {
	c := &crewMember{jobs: make(chan func()), hot: hotFlag(true)}
	go c.serve()
	defer close(c.jobs)
	gaps := []time.Duration{0, time.Microsecond, hotBudget - 5*time.Microsecond, hotBudget, hotBudget + 5*time.Microsecond, 3 * hotBudget}
	var ran []int
	for i := range 300 {
		done := make(chan struct{})
		c.give(func() {
			ran = append(ran, i)
			close(done)
		})
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("job %d never ran", i)
		}
		time.Sleep(gaps[i%len(gaps)])
	}
	for i, j := range ran {
		require.Equal(t, i, j)
	}
	require.Len(t, ran, 300)
}

// hotFlag is a launcher's hot flag set to hot.
func hotFlag(hot bool) *atomic.Bool {
	var f atomic.Bool
	f.Store(hot)
	return &f
}
