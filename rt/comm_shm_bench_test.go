package rt

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meshrun/meshrun/ir"
)

// BenchmarkAllReduceShmVsRing: p ranks all-reduce the DP MLP's two
// gradients (BenchmarkDPStepSplit's [256, 512] and [512, 256] f32, 1 MiB
// in all; ALLREDUCE_KIB changes it) through shared memory and by message
// passing (the Ring the shared path simulates), and copy the ring's bytes
// with min(p, GOMAXPROCS) goroutines (the ideal), the three alternating
// in each of b.N rounds (run with -benchtime 5x or more). Each round
// times the fastest of three repetitions of each (a loaded machine
// preempts single runs). Reports shm/ring and shm/ideal, min / median /
// max over the rounds.
func BenchmarkAllReduceShmVsRing(b *testing.B) {
	shapes := [][]int{{256, 512}, {512, 256}}
	if kib := envInt("ALLREDUCE_KIB"); kib > 0 {
		shapes = [][]int{{kib * 256}}
	}
	for _, p := range []int{2, 4, 8, 16, 32, 64} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			shm, ring := allReduceWorld(p, true, shapes), allReduceWorld(p, false, shapes)
			bytes := ring() // what the ring sends, all ranks
			src, dst := make([]byte, bytes), make([]byte, bytes)
			ideal := func() int64 { return copyWith(min(p, runtime.GOMAXPROCS(0)), dst, src) }
			var vsRing, vsIdeal []float64
			for i := 0; i < b.N; i++ {
				var t [3]time.Duration
				for k := range 3 {
					j := (k + i) % 3
					t[j] = fastest(3, []func() int64{func() int64 { return shm() }, ring, ideal}[j])
				}
				vsRing = append(vsRing, float64(t[0])/float64(t[1]))
				vsIdeal = append(vsIdeal, float64(t[0])/float64(t[2]))
			}
			lo, med, hi := spreadOf(vsRing)
			ilo, imed, ihi := spreadOf(vsIdeal)
			b.ReportMetric(med, "shm/ring")
			b.ReportMetric(imed, "shm/ideal")
			b.Logf("p=%d, %.2f MB sent (ring's count): shm/ring min %.3f median %.3f max %.3f; shm/ideal min %.2f median %.2f max %.2f (%d rounds)",
				p, float64(bytes)/1e6, lo, med, hi, ilo, imed, ihi, b.N)
		})
	}
}

// allReduceWorld returns a function that has p ranks all-reduce one
// tensor of each shape, started together, and returns the bytes they
// count as sent.
func allReduceWorld(p int, shm bool, shapes [][]int) func() int64 {
	comms := NewInProc(p)
	members := make([]int, p)
	for i := range members {
		members[i] = i
	}
	gs, xs := make([]*Ring, p), make([][]*Tensor, p)
	for r := range p {
		g, _ := comms[r].NewGroup(context.Background(), 0, members)
		gs[r] = g.(*Ring)
		if !shm {
			gs[r].shm = nil
		}
		for _, s := range shapes {
			x := NewTensor(ir.F32, s)
			for i := range x.Data.([]float32) {
				x.Data.([]float32)[i] = float32(r + i%7) // real pages, not the zero page
			}
			xs[r] = append(xs[r], x)
		}
	}
	return func() int64 {
		before := sentBy(comms)
		var wg sync.WaitGroup
		for r := range p {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, x := range xs[r] {
					if _, err := gs[r].AllReduce(context.Background(), x, OpSum); err != nil {
						panic(err)
					}
				}
			}()
		}
		wg.Wait()
		return sentBy(comms) - before
	}
}

func sentBy(comms []*InProc) int64 {
	var n int64
	for _, c := range comms {
		n += c.BytesSent()
	}
	return n
}

// copyWith copies src to dst in w pieces on w goroutines.
func copyWith(w int, dst, src []byte) int64 {
	var wg sync.WaitGroup
	n := len(src)
	for i := range w {
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[i*n/w:(i+1)*n/w], src[i*n/w:(i+1)*n/w])
		}()
	}
	wg.Wait()
	return int64(n)
}

// fastest times f k times and returns the shortest.
func fastest(k int, f func() int64) time.Duration {
	best := time.Duration(1 << 62)
	for range k {
		t0 := time.Now()
		f()
		best = min(best, time.Since(t0))
	}
	return best
}

func spreadOf(xs []float64) (lo, med, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return s[0], med, s[n-1]
}

// envInt is the integer in environment variable name, 0 when unset or bad.
func envInt(name string) int {
	v, _ := strconv.Atoi(os.Getenv(name))
	return v
}

// BenchmarkSmallAllReduceShmVsRing: the latency that tensor-parallel steps
// of small tensors pay. p ranks, each a goroutine that stays alive, run
// 200 back-to-back all-reduces of 256 f32 values, through shared memory
// and by message passing alternately in each of b.N rounds (-benchtime
// 5x or more); reports shm/ring per round, min / median / max, and the
// time per all-reduce.
func BenchmarkSmallAllReduceShmVsRing(b *testing.B) {
	const calls = 200
	for _, p := range []int{2, 4, 8} {
		b.Run(fmt.Sprintf("p=%d", p), func(b *testing.B) {
			shm := allReduceWorld(p, true, repeat([]int{256}, calls))
			ring := allReduceWorld(p, false, repeat([]int{256}, calls))
			var ratios []float64
			var tShm, tRing time.Duration
			for i := 0; i < b.N; i++ {
				var t [2]time.Duration
				for k := range 2 {
					j := (k + i) % 2
					t[j] = fastest(3, []func() int64{shm, ring}[j])
				}
				tShm, tRing = tShm+t[0], tRing+t[1]
				ratios = append(ratios, float64(t[0])/float64(t[1]))
			}
			lo, med, hi := spreadOf(ratios)
			b.ReportMetric(med, "shm/ring")
			per := func(d time.Duration) time.Duration { return d / time.Duration(b.N*calls) }
			b.Logf("p=%d: %v (shm) / %v (ring) per all-reduce of 256 f32; shm/ring min %.3f median %.3f max %.3f (%d rounds)",
				p, per(tShm), per(tRing), lo, med, hi, b.N)
		})
	}
}

func repeat(shape []int, n int) [][]int {
	out := make([][]int, n)
	for i := range out {
		out[i] = shape
	}
	return out
}
