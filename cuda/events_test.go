package cuda

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// newWatch is a stopwatch of be for rank.
func newWatch(t *testing.T, be *Backend, rank int) *stopwatch {
	t.Helper()
	sw, err := be.NewStopwatch(rank)
	require.NoError(t, err)
	return sw.(*stopwatch)
}

// deviceAfter is the device's time from event a to event b (negative when
// b passed first): how the tests compare two stopwatches' events.
func deviceAfter(t *testing.T, d *Device, a, b uintptr) time.Duration {
	t.Helper()
	ms, rc := drEventChain(d.ctx, []uintptr{a, b})
	require.NoError(t, check("cuEventElapsedTime", "", rc))
	return time.Duration(float64(ms[0]) * 1e6)
}

// The stopwatch measures the stream, not the host's calls: a span the
// host slept through (the stream idle between its events) lasts at least
// the sleep; a kernel's span is positive; spans come in order, each
// after the last; a second execution starts again from its own mark.
func TestBackendStopwatchMeasuresTheStream(t *testing.T) {
	be := newTestBackend(t)
	n := 1 << 10
	if onGPU() {
		n = 1 << 22 // a kernel of some microseconds
	}
	x, err := be.CopyIn(rt.NewTensor(ir.F32, []int{n}))
	require.NoError(t, err)
	k := &plan.Kernel{Op: "exp", DType: ir.F32, Shape: []int{n}, ArgDTypes: []ir.DType{ir.F32}}
	sw := newWatch(t, be, 0)
	const nap = 3 * time.Millisecond
	for range 2 {
		_, err = sw.Begin()
		require.NoError(t, err)
		require.NoError(t, sw.Start(false))
		time.Sleep(nap)
		require.NoError(t, sw.Stop())
		require.NoError(t, sw.Start(true))
		y, err := be.Launch(context.Background(), k, []rt.Buffer{x}, nil, sbp.Block{})
		require.NoError(t, err)
		require.NoError(t, sw.Stop())
		require.NoError(t, be.Sync(context.Background()))
		be.Free(y)
		spans, err := sw.Spans()
		require.NoError(t, err)
		require.Len(t, spans, 2)
		require.GreaterOrEqual(t, spans[0].Start, time.Duration(0))
		require.GreaterOrEqual(t, spans[0].End-spans[0].Start, nap-time.Microsecond, "the host slept between the events")
		require.LessOrEqual(t, spans[0].End, spans[1].Start, "in order")
		require.Greater(t, spans[1].End, spans[1].Start, "the kernel takes time")
		t.Logf("slept %v: span %v; exp over %d floats: %v", nap, spans[0].End-spans[0].Start, n, spans[1].End-spans[1].Start)
	}
	require.Len(t, sw.events, 5, "the second execution recorded the first's events again")
}

// A stopwatch used out of order says so, and a failed Start holds
// nothing (another rank's exclusive span can start).
func TestBackendStopwatchMisuse(t *testing.T) {
	be := newTestBackend(t)
	sw := newWatch(t, be, 3)
	require.ErrorContains(t, sw.Start(true), "stopwatch of rank 3: a span started before Begin")
	_, err := sw.Spans()
	require.ErrorContains(t, err, "spans read before Begin")
	_, err = sw.Begin()
	require.NoError(t, err)
	require.ErrorContains(t, sw.Stop(), "a span stopped that did not start")
	require.NoError(t, sw.Start(true))
	require.ErrorContains(t, sw.Start(true), "inside another")
	_, err = sw.Spans()
	require.ErrorContains(t, err, "inside a span")
	require.NoError(t, sw.Stop())
	done := make(chan error)
	other := newWatch(t, be, 4)
	go func() {
		if _, err := other.Begin(); err != nil {
			done <- err
			return
		}
		if err := other.Start(true); err != nil {
			done <- err
			return
		}
		done <- other.Stop()
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the lock of exclusive spans is still held after Stop")
	}
}

// An event the driver fails to record is an error naming the call, and
// the exclusive span it would have started holds nothing; Close destroys
// every event the stopwatches made.
func TestBackendStopwatchFailureAndClose(t *testing.T) {
	fakeOnly(t)
	useDriver(t)
	log := filepath.Join(t.TempDir(), "log")
	t.Setenv("MESHRUN_FAKE_LIFECYCLE", log)
	be, err := NewBackend(0, nil)
	require.NoError(t, err)
	sw := newWatch(t, be, 0)
	_, err = sw.Begin()
	require.NoError(t, err)
	require.NoError(t, sw.Start(true))
	require.NoError(t, sw.Stop())
	require.Equal(t, 3, heldAfter(t, log)["event"])
	t.Setenv("MESHRUN_FAKE_FAIL", "cuEventRecord")
	require.EqualError(t, sw.Start(true), "cuda: cuEventRecord: CUDA_ERROR_INVALID_VALUE (1)")
	require.False(t, sw.held)
	require.True(t, be.dev.events.bracket.TryLock(), "the failed Start let go of the lock")
	be.dev.events.bracket.Unlock()
	t.Setenv("MESHRUN_FAKE_FAIL", "")
	require.NoError(t, be.Close())
	require.Empty(t, heldAfter(t, log), "Close destroyed the events (and everything else)")
}

// Ranks sharing the device take turns: spans that are exclusive never
// overlap on the device's clock, though each rank sleeps inside its own
// (which, without the lock, lets the other's events fall inside).
func TestBackendStopwatchSerializesRanks(t *testing.T) {
	be := newTestBackend(t)
	const ranks, spans = 3, 6
	watches := make([]*stopwatch, ranks)
	var wg sync.WaitGroup
	errs := make([]error, ranks)
	for r := range watches {
		watches[r] = newWatch(t, be, r)
		wg.Add(1)
		go func(sw *stopwatch) {
			defer wg.Done()
			errs[r] = func() error {
				if _, err := sw.Begin(); err != nil {
					return err
				}
				for range spans {
					if err := sw.Start(true); err != nil {
						return err
					}
					time.Sleep(200 * time.Microsecond)
					if err := sw.Stop(); err != nil {
						return err
					}
				}
				return nil
			}()
		}(watches[r])
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, be.Sync(context.Background()))
	for a := range ranks {
		for b := a + 1; b < ranks; b++ {
			for i := range spans {
				for j := range spans {
					ea, eb := watches[a].events[1+2*i:3+2*i], watches[b].events[1+2*j:3+2*j]
					aFirst := deviceAfter(t, be.dev, ea[1], eb[0]) >= 0
					bFirst := deviceAfter(t, be.dev, eb[1], ea[0]) >= 0
					require.True(t, aFirst || bFirst, "span %d of rank %d and span %d of rank %d overlap", i, a, j, b)
				}
			}
		}
	}
}

// A big matmul's span is the GPU's time for it: on a GPU, between what
// 1 PFLOP/s and 1 TFLOP/s would take for its 2n³ flops in f32 (no GPU
// multiplies f32 faster than the first, any worth testing beats the
// second; a span of the launch alone would be far below the first). The
// first matmul warms cuBLAS up and is not counted. On the fake (and with
// MESHRUN_BENCH_SMALL=1, as when bench/gpu.sh is tried on the fake) the
// matmul is small and its span, the emulated GEMM's host time, positive.
func TestBackendMatmulGPUTime(t *testing.T) {
	be := newTestBackend(t)
	big := onGPU() && os.Getenv("MESHRUN_BENCH_SMALL") != "1"
	n := 48
	if big {
		n = 4096
	}
	a, err := be.CopyIn(rt.NewTensor(ir.F32, []int{n, n}))
	require.NoError(t, err)
	k := &plan.Kernel{Op: "matmul", DType: ir.F32, Shape: []int{n, n}, ArgDTypes: []ir.DType{ir.F32, ir.F32}}
	sw := newWatch(t, be, 0)
	_, err = sw.Begin()
	require.NoError(t, err)
	const rounds = 4
	for range rounds {
		require.NoError(t, sw.Start(true))
		y, err := be.Launch(context.Background(), k, []rt.Buffer{a, a}, nil, sbp.Block{})
		require.NoError(t, err)
		require.NoError(t, sw.Stop())
		be.Free(y) // reused by the next round's result: stream order
	}
	require.NoError(t, be.Sync(context.Background()))
	spans, err := sw.Spans()
	require.NoError(t, err)
	require.Len(t, spans, rounds)
	var sum time.Duration
	for _, s := range spans[1:] {
		require.Greater(t, s.End, s.Start)
		sum += s.End - s.Start
	}
	flops := 2 * float64(n) * float64(n) * float64(n) * (rounds - 1)
	t.Logf("f32 %d³ matmul ×%d: GPU time %v, %.2f TFLOP/s", n, rounds-1, sum, flops/sum.Seconds()/1e12)
	if big {
		require.GreaterOrEqual(t, sum.Seconds(), flops/1e15, "faster than 1 PFLOP/s: the span missed the work")
		require.LessOrEqual(t, sum.Seconds(), flops/1e12, "slower than 1 TFLOP/s")
	}
}
