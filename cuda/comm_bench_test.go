package cuda

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
)

// BenchmarkCollectivesVsCopy times the collectives of p logical ranks
// sharing the GPU (every member in its own goroutine, as the launcher
// runs them: barriers, launches, the caching allocator) against a
// device-to-device copy (cuMemcpyDtoDAsync) of one member's block, on the
// same device in the same run. A collective's traffic is what its kernels
// must at least read and write, counted as the copy counts its own (bytes
// read + bytes written): an all-reduce of n bytes per member reads p·n
// and writes p·n, an all-gather of n-byte blocks reads p·n and writes
// p·p·n, a reduce-scatter reads p·n and writes n. Each round runs reps of
// one side then reps of the other, the order flipping every round, each
// ending with a stream synchronisation; it reports each side's GB/s
// (best round) and collective/copy bandwidth as min, median and max over
// the rounds. On the fake driver (or with MESHRUN_BENCH_SMALL=1) sizes
// are small and the figures say nothing of a GPU.
func BenchmarkCollectivesVsCopy(b *testing.B) {
	be := newTestBackend(b)
	elems, reps, rounds := 1<<24, 10, 7 // 64 MiB of f32 per member
	if !onGPU() || os.Getenv("MESHRUN_BENCH_SMALL") == "1" {
		elems, reps, rounds = 1<<12, 2, 5
	}
	for _, p := range []int{2, 4, 8} {
		for _, kind := range []string{"all_reduce", "all_gather", "reduce_scatter"} {
			b.Run(fmt.Sprintf("%s_%d_members", kind, p), func(b *testing.B) {
				benchCollective(b, be, kind, p, elems, reps, rounds)
			})
		}
	}
}

func benchCollective(b *testing.B, be *Backend, kind string, p, elems, reps, rounds int) {
	w := newCommWorld(b, be, p)
	rng := rand.New(rand.NewSource(1))
	ins := make([]rt.Buffer, p)
	for i := range ins {
		x, err := be.CopyIn(randomTensor(rng, ir.F32, []int{elems}, false))
		require.NoError(b, err)
		ins[i] = x
		defer be.Free(x)
	}
	n := int64(elems * 4)
	moved := map[string]int64{"all_reduce": 2 * int64(p) * n, "all_gather": int64(p)*n + int64(p*p)*n, "reduce_scatter": int64(p)*n + n}[kind]
	lens := make([]int, p)
	for i := range lens {
		lens[i] = elems / p
	}
	lens[p-1] += elems - p*(elems/p)
	gather := slices.Repeat([]int{elems}, p)
	ctx := context.Background()
	collective := func() {
		for range reps {
			var wg sync.WaitGroup
			errs := make([]error, p)
			for i, g := range w.groups {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var r rt.Buffer
					switch kind {
					case "all_reduce":
						r, errs[i] = g.AllReduce(ctx, ins[i], rt.OpSum)
					case "all_gather":
						r, errs[i] = g.AllGather(ctx, ins[i], 0, gather)
					case "reduce_scatter":
						r, errs[i] = g.ReduceScatter(ctx, ins[i], 0, lens, rt.OpSum)
					}
					if errs[i] == nil {
						be.Free(r)
					}
				}()
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(b, err)
			}
		}
		require.NoError(b, be.Sync(ctx))
	}
	dst, err := be.Alloc(ir.F32, []int{elems})
	require.NoError(b, err)
	defer be.Free(dst)
	copyOnce := func() {
		for range reps {
			require.NoError(b, be.dev.copyOnDevice(dst.(*Buf).ptr, ins[0].(*Buf).ptr, n))
		}
		require.NoError(b, be.Sync(ctx))
	}
	collective() // warm-up: kernels loaded, the allocator's blocks made
	copyOnce()
	var ratios, tColl, tCopy []float64
	for range b.N {
		x, y := alternate(rounds, collective, copyOnce)
		tColl, tCopy = append(tColl, x...), append(tCopy, y...)
	}
	for i := range tColl {
		ratios = append(ratios, (float64(moved)/tColl[i])/(float64(2*n)/tCopy[i]))
	}
	slices.Sort(ratios)
	collGBs := float64(moved) * float64(reps) / slices.Min(tColl) / 1e9
	copyGBs := float64(2*n) * float64(reps) / slices.Min(tCopy) / 1e9
	b.ReportMetric(collGBs, "collective-GB/s")
	b.ReportMetric(copyGBs, "copy-GB/s")
	b.ReportMetric(ratios[len(ratios)/2], "ratio-median")
	b.Logf("%s of %d KiB per member, %d members on %s: %.0f GB/s vs a device copy's %.0f GB/s; collective/copy bandwidth min %.2f median %.2f max %.2f over %d rounds of %d",
		kind, n>>10, p, be.Name(), collGBs, copyGBs, ratios[0], ratios[len(ratios)/2], ratios[len(ratios)-1], len(ratios), reps)
}
