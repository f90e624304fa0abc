package rt

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// coroutines counts the goroutines of the ranks' coroutines (shift.go):
// suspended or running, their stacks show newRankCoro's function.
func coroutines() int { return goroutinesIn("meshrun/rt.newRankCoro.func1(") }

// The ranks' coroutines outlive an execution in shifts (the next one
// resumes them) but not the launcher: once it is collected its cleanup
// stops them, whether its last execution ran in shifts or (GOMAXPROCS
// raised meanwhile) with a goroutine per rank.
func TestShiftCoroutinesEndWithTheLauncher(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	p := compile(t, rowParallelMatmul(4))
	for _, last := range []int{2, 4} {
		before := settled(coroutines)
		func() {
			runtime.GOMAXPROCS(2)
			l, err := NewLocal(context.Background(), p.Exec, Options{})
			require.NoError(t, err)
			_, err = l.Run(context.Background(), nil)
			require.NoError(t, err)
			runtime.GOMAXPROCS(last)
			_, err = l.Run(context.Background(), nil)
			require.NoError(t, err)
			require.Equal(t, before+4, coroutines(), "a coroutine per rank, kept")
			runtime.KeepAlive(l) // else collectable, and its coroutines stopped, before the count
		}()
		deadline := time.Now().Add(10 * time.Second)
		for coroutines() > before && time.Now().Before(deadline) {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		require.Equal(t, before, coroutines(), "GOMAXPROCS=%d last: the coroutines end once the launcher is collected", last)
	}
}

// A caller whose goroutine is locked to its OS thread (a program that
// calls runtime.LockOSThread, as GUI and GPU code does, or a cgo
// callback) runs a launcher in shifts like any other, whether it was
// locked at the launcher's first execution in shifts or only later, and
// so does an unlocked caller after a locked one. The runtime kills the
// process when a coroutine is resumed in a thread-lock state other than
// its creator's. Run in a child process: that is a fatal error, not a
// panic.
func TestShiftsFromALockedThread(t *testing.T) {
	if os.Getenv("MESHRUN_SHIFT_LOCKED") == "1" {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
		p := compile(t, rowParallelMatmul(4))
		want, err := Run(context.Background(), p, Options{})
		require.NoError(t, err)
		for _, lockedFirst := range []bool{true, false} {
			l, err := NewLocal(context.Background(), p.Exec, Options{})
			require.NoError(t, err)
			for i, procs := range []int{2, 1, 3, 2, 1, 2} {
				locked := i%2 == 0 == lockedFirst
				runtime.GOMAXPROCS(procs)
				var res *Result
				done := make(chan struct{})
				go func() { // a goroutine of its own: locking the test's would outlive the case
					defer close(done)
					if locked {
						runtime.LockOSThread()
						defer runtime.UnlockOSThread()
					}
					res, err = l.Run(context.Background(), nil)
				}()
				<-done
				require.NoError(t, err)
				require.True(t, l.parks[0].on, "GOMAXPROCS=%d: in shifts", procs)
				require.Equal(t, want.Outputs[0].Data, res.Outputs[0].Data, "GOMAXPROCS=%d, locked %v", procs, locked)
			}
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestShiftsFromALockedThread$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MESHRUN_SHIFT_LOCKED=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// A rank that fails (its feed) before a collective its peers already
// wait at, parked in shifts, ends the execution with its error, not a
// hang, in one shift, in two and in three (four ranks: uneven shares);
// the launcher then runs again and computes what a goroutine per rank
// does.
func TestShiftsEndWhenARankFails(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	p := compile(t, rowParallelMatmul(4))
	runtime.GOMAXPROCS(8)
	want, err := Run(context.Background(), p, Options{})
	require.NoError(t, err)
	for _, procs := range []int{1, 2, 3} {
		runtime.GOMAXPROCS(procs)
		l, err := NewLocal(context.Background(), p.Exec, Options{})
		require.NoError(t, err)
		for _, bad := range []int{0, 2, 3} {
			feed := func(r int) Feed {
				return func(int) (Buffer, error) {
					if r == bad {
						return nil, errors.New("no batch")
					}
					return nil, nil
				}
			}
			done := make(chan error, 1)
			go func() { _, err := l.Run(context.Background(), feed); done <- err }()
			select {
			case err := <-done:
				require.ErrorContains(t, err, "no batch", "GOMAXPROCS=%d, rank %d failing", procs, bad)
				require.NotErrorIs(t, err, context.Canceled, "GOMAXPROCS=%d: the failure, not a peer's cancellation", procs)
			case <-time.After(10 * time.Second):
				t.Fatalf("GOMAXPROCS=%d: rank %d failed and the execution in shifts never ended", procs, bad)
			}
			require.True(t, l.parks[0].on, "GOMAXPROCS=%d: in shifts", procs)
			res, err := l.Run(context.Background(), nil)
			require.NoError(t, err)
			require.Equal(t, want.Outputs[0].Data, res.Outputs[0].Data, "GOMAXPROCS=%d", procs)
		}
	}
}

// Seven ranks in three shifts (uneven shares: 3, 2 and 2 ranks), each
// shift on a goroutine of its own, meet at barriers of three kinds in
// an order that differs by rank: all seven; the even and the odd ranks;
// and, each round, a random pair. Ranks spin for random lengths between
// waits, so that shifts take up each other's ranks at every point of a
// wait. Nobody passes a barrier before its members have all arrived,
// and every rank finishes every round.
func TestShiftsMeetAtMixedBarriers(t *testing.T) {
	const ranks, shifts, rounds = 7, 3, 400
	all := &barrier{n: ranks}
	parity := []*barrier{{n: 4}, {n: 3}} // ranks 0, 2, 4, 6; ranks 1, 3, 5
	pairs := make([][2]int, rounds)      // round k's pair
	pairBar := make([]*barrier, rounds)
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range pairs {
		a := rng.IntN(ranks)
		b := (a + 1 + rng.IntN(ranks-1)) % ranks
		pairs[k], pairBar[k] = [2]int{a, b}, &barrier{n: 2}
	}
	var mu sync.Mutex
	arrivedAll := make([]int, rounds)
	arrivedPar := make([][2]int, rounds)
	parks, coros := parkedCoros(t, ranks)
	wait := func(b *barrier, r int) bool {
		if err := b.waitWith(context.Background(), time.Minute, nil, parks[r]); err != nil {
			t.Errorf("rank %d: %v", r, err)
			return false
		}
		return true
	}
	spin := func(seed uint64) {
		for i := range seed % 2000 {
			_ = i
		}
	}
	finished := make([]int, ranks)
	job := func(r int) func() {
		return func() {
			rs := rand.New(rand.NewPCG(uint64(r), 7))
			for k := range rounds {
				spin(rs.Uint64())
				mu.Lock()
				arrivedAll[k]++
				mu.Unlock()
				if !wait(all, r) {
					return
				}
				mu.Lock()
				if arrivedAll[k] != ranks {
					t.Errorf("rank %d passed round %d's barrier of all with %d arrived", r, k, arrivedAll[k])
				}
				arrivedPar[k][r%2]++
				mu.Unlock()
				spin(rs.Uint64())
				if !wait(parity[r%2], r) {
					return
				}
				mu.Lock()
				if want := []int{4, 3}[r%2]; arrivedPar[k][r%2] != want {
					t.Errorf("rank %d passed round %d's parity barrier with %d arrived", r, k, arrivedPar[k][r%2])
				}
				mu.Unlock()
				if p := pairs[k]; p[0] == r || p[1] == r {
					spin(rs.Uint64())
					if !wait(pairBar[k], r) {
						return
					}
				}
				finished[r]++
			}
		}
	}
	jobs := make([]func(), ranks)
	for r := range jobs {
		jobs[r] = job(r)
	}
	for range 3 { // the same coroutines, three executions
		clear(finished)
		clear(arrivedAll)
		clear(arrivedPar)
		work := newShiftWork(coros, jobs, shifts)
		var wg sync.WaitGroup
		for s := range shifts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				work.run(s)
			}()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("the shifts never finished")
		}
		for r, n := range finished {
			require.Equal(t, rounds, n, "rank %d", r)
		}
		require.Zero(t, work.live.Load())
	}
}
