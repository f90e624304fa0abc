package rt

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Several hot crew members, each given its next job the moment its last
// one signals that it is done (the member has then not yet gone back to
// polling: give finds it neither polling nor at its channel), or after a
// gap around hotBudget: every job runs exactly once, on its own member,
// in turn, with at most one job of a member running at a time.
func TestCrewMembersHandOverUnderStress(t *testing.T) {
	const members, rounds = 3, 400
	crew := make([]*crewMember, members)
	for i := range crew {
		crew[i] = &crewMember{jobs: make(chan func()), hot: hotFlag(true)}
		go crew[i].serve()
		defer close(crew[i].jobs)
	}
	gaps := []time.Duration{0, 0, 0, hotBudget / 2, hotBudget, hotBudget + 3*time.Microsecond}
	ran := make([][]int, members)
	var running [members]atomic.Int32
	for k := range rounds {
		var wg sync.WaitGroup
		wg.Add(members)
		for m, c := range crew {
			c.give(func() {
				defer wg.Done()
				if running[m].Add(1) != 1 {
					t.Errorf("member %d runs two jobs at once (round %d)", m, k)
				}
				ran[m] = append(ran[m], k)
				running[m].Add(-1)
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: a job never ran", k)
		}
		if g := gaps[k%len(gaps)]; g > 0 {
			time.Sleep(g)
		}
	}
	for m := range crew {
		require.Len(t, ran[m], rounds, "member %d", m)
		for i, k := range ran[m] {
			require.Equal(t, i, k, "member %d", m)
		}
	}
}

// A hot launcher (as many ranks as processors) whose peer never comes
// still fails with ErrPeerTimeout, and a cancelled context still ends
// its ranks' waits: the polls are bounded by hotBudget.
func TestHotLocalTimesOutAndCancels(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	p := compile(t, `mesh M = [tp=2]
param W : f32[8, 8] {S(1)} = normal(0, 1)
y = to(W, {B})
output y
`)
	l, err := NewLocal(context.Background(), p.Exec, Options{Timeout: 100 * time.Millisecond, stall: func(d int) bool { return d == 1 }})
	require.NoError(t, err)
	require.True(t, l.hot.Load())
	for range 3 { // the crew, hot after the first execution, times out too
		_, err = l.Run(context.Background(), nil)
		require.True(t, errors.Is(err, ErrPeerTimeout), "%v", err)
	}
	l, err = NewLocal(context.Background(), p.Exec, Options{stall: func(d int) bool { return d == 1 }})
	require.NoError(t, err)
	requireCancelEnds(t, l, "hot")
}

// Whether a launcher's ranks wait hot is decided at each execution, not
// once when it is made: GOMAXPROCS may change in between (a program's
// call, or the runtime following the container's CPU limit). A 4-rank
// launcher made with 4 processors runs its ranks in shifts once it has
// fewer (shift.go): then its shifts, one per processor, wait for each
// other hot, and with one processor (one shift) nothing does. Its crew
// and its ranks' barriers follow, and its results stay the same.
func TestHotFollowsGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	p := compile(t, rowParallelMatmul(4))
	l, err := NewLocal(context.Background(), p.Exec, Options{})
	require.NoError(t, err)
	var want *Tensor
	for _, procs := range []int{4, 2, 4, 1} {
		runtime.GOMAXPROCS(procs)
		res, err := l.Run(context.Background(), nil)
		require.NoError(t, err)
		if want == nil {
			want = res.Outputs[0]
		}
		require.Equal(t, want.Data, res.Outputs[0].Data, "GOMAXPROCS=%d", procs)
		hot := procs > 1
		require.Equal(t, hot, l.hot.Load(), "GOMAXPROCS=%d: the launcher", procs)
		for _, pk := range l.parks {
			require.Equal(t, procs < 4, pk.on, "GOMAXPROCS=%d: in shifts", procs)
		}
		for _, c := range l.crew {
			require.Equal(t, hot, c.hot.Load(), "GOMAXPROCS=%d: its crew", procs)
		}
		for _, w := range l.Workers {
			for _, g := range w.Groups {
				if r, ok := g.(*Ring); ok {
					require.Equal(t, hot, r.shm.s.bar.hot.Load(), "GOMAXPROCS=%d: rank %d's barrier", procs, w.Prog.Rank)
				}
			}
		}
	}
}

// yieldEarly follows what yields are found to do: a yield that let
// another goroutine run (it took hotShared or more) turns early yields
// on, an early yield that did not turns them off, and nothing else
// changes them.
func TestYieldEarlyLearnsFromYields(t *testing.T) {
	defer yieldEarly.Store(yieldEarly.Load())
	for _, c := range []struct {
		was, early bool
		took       time.Duration
		want       bool
	}{
		{false, false, hotShared, true},
		{false, false, hotShared / 2, false},
		{false, true, hotShared / 2, false},
		{false, true, hotShared, true},
		{true, true, hotShared / 2, false},
		{true, true, hotShared, true},
		{true, false, hotShared / 2, true},
	} {
		yieldEarly.Store(c.was)
		learnYield(c.took, c.early)
		require.Equal(t, c.want, yieldEarly.Load(), "%+v", c)
	}
}

// With one processor, a hot wait's peer runs only when the waiter
// yields: its first yield lets the peer run, and the wait learns to
// yield early from then on.
func TestPollForLearnsThatItSharesAProcessor(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	defer yieldEarly.Store(yieldEarly.Load())
	yieldEarly.Store(false)
	// (a few tries: were the test's goroutine preempted before it polls,
	// the peer would be done before the wait begins)
	for try := 0; try < 5 && !yieldEarly.Load(); try++ {
		var done atomic.Bool
		go func() {
			for t0 := time.Now(); time.Since(t0) < 4*hotShared; {
			}
			done.Store(true)
		}()
		require.True(t, pollFor(time.Second, done.Load))
	}
	require.True(t, yieldEarly.Load())
}
