package rt

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// The Megatron MLP on [dp=2, tp=2] trains to the same losses and
// parameters, bit for bit, with a goroutine per rank (8 processors),
// in two shifts (2) and in one (1): shifts change who runs when, never
// what is computed.
func TestShiftsTrainLikeGoroutines(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	g, _, err := lang.CheckFile(exampleDir+"/megatron_dp_tp.mesh", lang.CheckOptions{})
	require.NoError(t, err)
	g.Train.Steps = 6
	p, err := lower.Lower(g, lower.Options{})
	require.NoError(t, err)
	var want *TrainResult
	for _, procs := range []int{8, 2, 1} {
		runtime.GOMAXPROCS(procs)
		res, err := Train(context.Background(), p, Options{}, TrainConfig{})
		require.NoError(t, err, "GOMAXPROCS=%d", procs)
		if want == nil {
			want = res
			continue
		}
		require.Equal(t, want.Losses, res.Losses, "GOMAXPROCS=%d", procs)
		for i, f := range want.Final {
			require.Equal(t, f.Data, res.Final[i].Data, "GOMAXPROCS=%d: %s", procs, want.Params[i].Name)
		}
	}
}

// A launcher with more ranks than processors runs them in shifts, one
// per processor (the orders it keeps made again when their number
// changes), and with as many processors as ranks as goroutines; a
// pipelined plan, whose ranks wait for messages, never in shifts.
func TestShiftsOnlyWhereRanksOutnumberProcessors(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	p := compile(t, rowParallelMatmul(4))
	l, err := NewLocal(context.Background(), p.Exec, Options{})
	require.NoError(t, err)
	require.True(t, l.shiftable)
	for _, procs := range []int{4, 3, 1} {
		runtime.GOMAXPROCS(procs)
		_, err := l.Run(context.Background(), nil)
		require.NoError(t, err)
		for r, pk := range l.parks {
			require.Equal(t, procs < 4, pk.on, "GOMAXPROCS=%d: rank %d in a shift", procs, r)
		}
		if procs < 4 { // the kept orders follow the number of shifts
			require.Len(t, l.orders, procs, "GOMAXPROCS=%d", procs)
			for s, o := range l.orders {
				require.ElementsMatch(t, l.coros, o, "GOMAXPROCS=%d: shift %d visits every rank once", procs, s)
				require.Same(t, l.coros[s], o[0], "GOMAXPROCS=%d: shift %d visits its own share first", procs, s)
			}
		}
	}
	require.Len(t, l.coros, 4, "each rank's coroutine, made at the first execution in shifts")

	g, _, err := lang.CheckFile(exampleDir+"/mlp_offload_pipe.mesh", lang.CheckOptions{})
	require.NoError(t, err)
	pp, err := lower.Lower(g, lower.Options{})
	require.NoError(t, err)
	l, err = NewLocal(context.Background(), pp.Exec, Options{})
	require.NoError(t, err)
	require.False(t, l.shiftable, "a pipeline's ranks send and receive")
}

// A rank in a shift whose peer never comes fails with ErrPeerTimeout,
// in one shift and in two, and a cancelled context ends the parked
// ranks' waits.
func TestShiftsTimeOutAndCancel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	p := compile(t, rowParallelMatmul(4))
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		l, err := NewLocal(context.Background(), p.Exec, Options{Timeout: 50 * time.Millisecond, stall: func(d int) bool { return d == 3 }})
		require.NoError(t, err)
		for range 2 {
			_, err = l.Run(context.Background(), nil)
			require.True(t, errors.Is(err, ErrPeerTimeout), "GOMAXPROCS=%d: %v", procs, err)
			require.True(t, l.parks[0].on, "GOMAXPROCS=%d: in shifts", procs)
		}
		l, err = NewLocal(context.Background(), p.Exec, Options{stall: func(d int) bool { return d == 3 }})
		require.NoError(t, err)
		requireCancelEnds(t, l, fmt.Sprintf("GOMAXPROCS=%d, in shifts", procs))
	}
}

// Four ranks in two shifts (ranks 0, 2 and 1, 3), each on a goroutine of
// its own, meet at a barrier of all four and at one of each shift's pair
// in turn, many times: nobody gets past a barrier before every member
// has arrived, and every rank passes every generation.
func TestShiftsMeetAtBarriers(t *testing.T) {
	const ranks, rounds = 4, 2000
	all := &barrier{n: ranks}
	pairs := []*barrier{{n: 2}, {n: 2}} // ranks 0, 2; ranks 1, 3
	arrived := make([]int, rounds)      // written under mu
	var mu sync.Mutex
	parks, coros := parkedCoros(t, ranks)
	passed := make([]int, ranks)
	job := func(r int) func() {
		return func() {
			for k := range rounds {
				mu.Lock()
				arrived[k]++
				mu.Unlock()
				if err := all.waitWith(context.Background(), time.Minute, nil, parks[r]); err != nil {
					t.Errorf("rank %d, round %d: %v", r, k, err)
					return
				}
				mu.Lock()
				if arrived[k] != ranks {
					t.Errorf("rank %d got past round %d with %d of %d arrived", r, k, arrived[k], ranks)
				}
				mu.Unlock()
				if err := pairs[r%2].waitWith(context.Background(), time.Minute, nil, parks[r]); err != nil {
					t.Errorf("rank %d, round %d: %v", r, k, err)
					return
				}
				passed[r]++
			}
		}
	}
	jobs := make([]func(), ranks)
	for r := range jobs {
		jobs[r] = job(r)
	}
	work := newShiftWork(coros, jobs, 2)
	var wg sync.WaitGroup
	for s := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work.run(s)
		}()
	}
	wg.Wait()
	for r, n := range passed {
		require.Equal(t, rounds, n, "rank %d", r)
	}
}

// A rank that panics outside its kernels (here in the instruction hook)
// fails the execution with an error, with a goroutine per rank and in
// shifts, and the launcher runs again afterwards.
func TestRankPanicFailsTheExecution(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	p := compile(t, rowParallelMatmul(4))
	for _, procs := range []int{8, 2, 1} {
		runtime.GOMAXPROCS(procs)
		var armed atomic.Bool
		armed.Store(true)
		l, err := NewLocal(context.Background(), p.Exec, Options{Hook: func(rank, instr int) {
			if rank == 1 && instr == 1 && armed.Load() {
				panic("hook")
			}
		}})
		require.NoError(t, err)
		_, err = l.Run(context.Background(), nil)
		require.ErrorContains(t, err, "rank 1: internal error: hook", "GOMAXPROCS=%d", procs)
		armed.Store(false)
		_, err = l.Run(context.Background(), nil)
		require.NoError(t, err, "GOMAXPROCS=%d: the next execution", procs)
	}
}

// parkedCoros makes n rank coroutines whose waits park, ended when the
// test ends.
func parkedCoros(t *testing.T, n int) ([]*parker, []*rankCoro) {
	parks := make([]*parker, n)
	coros := make([]*rankCoro, n)
	for r := range coros {
		parks[r] = &parker{on: true}
		coros[r] = newRankCoro(parks[r])
	}
	t.Cleanup(func() {
		for _, c := range coros {
			c.stop()
		}
	})
	return parks, coros
}

// requireCancelEnds runs l once with a context cancelled after 30 ms and
// requires the run to end with context.Canceled within 10 s (a rank of
// l's stalls until cancelled).
func requireCancelEnds(t *testing.T, l *Local, what string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(30*time.Millisecond, cancel)
	done := make(chan error, 1)
	go func() { _, err := l.Run(ctx, nil); done <- err }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled, what)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: a cancelled run never ended", what)
	}
}
