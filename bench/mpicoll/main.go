// Command mpicoll compares meshrun's MPI collectives (rt.MPIComm's Group:
// what a rank's program calls under `--launcher mpi`) with the raw calls of
// package rt/mpi on the same buffers, in one invocation:
//
//	mpirun -np 4 go run ./bench/mpicoll     (bench/mpi.sh builds and runs it)
//
// For each collective and size it alternates the two (the order flips
// every round), times a batch of calls between barriers, takes the slowest
// rank's time, and prints GB/s and the ratio meshrun/raw (goal ≥ 0.9) as
// min/median/max over the rounds. The raw side reuses a preallocated
// receive buffer; meshrun's Group returns a fresh tensor per call, as the
// interpreter needs, so that allocation is part of what is measured.
//
// Sizes are of the result: an all-reduce of S bytes reduces S bytes on
// every rank; an all-gather of S bytes gathers S/p bytes from each of the
// p ranks (along dim 0, which needs no packing). GB/s is S over the time of
// one call (algorithm bandwidth).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/rt/mpi"
)

func main() {
	sizes := flag.String("sizes", "1,16", "result sizes in MiB, comma-separated")
	rounds := flag.Int("rounds", 7, "rounds (each times both sides once per collective and size)")
	budget := flag.Duration("batch", 100*time.Millisecond, "about how long one timed batch of calls lasts")
	only := flag.String("only", "", "time only this side (meshrun, raw or raw+alloc), e.g. with -cpuprofile")
	prof := flag.String("cpuprofile", "", "write rank 0's CPU profile to this file")
	flag.Parse()
	onlySide = *only
	if err := mpi.Load(); err != nil {
		fmt.Println("mpicoll: skipped:", err)
		return
	}
	ctx := context.Background()
	if *prof != "" && os.Getenv("OMPI_COMM_WORLD_RANK")+os.Getenv("PMI_RANK") == "0" {
		f, err := os.Create(*prof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mpicoll:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "mpicoll:", err)
			os.Exit(1)
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if err := run(ctx, *sizes, *rounds, *budget); err != nil {
		fmt.Fprintln(os.Stderr, "mpicoll:", err)
		mpi.Abort(1)
	}
	if err := mpi.Finalize(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "mpicoll:", err)
		mpi.Abort(1)
	}
}

// onlySide, when set, names the one side that is timed (the others are
// skipped), for profiling one of them.
var onlySide string

// side is one way of doing a collective: meshrun's or the raw call.
type side struct {
	name string
	call func() error
}

func run(ctx context.Context, sizeList string, rounds int, budget time.Duration) error {
	comm, err := rt.NewMPIComm(ctx)
	if err != nil {
		return err
	}
	world := mpi.World()
	p, me := world.Size(), world.Rank()
	lead := me == 0
	if p < 2 {
		if lead {
			fmt.Println("mpicoll: skipped: one rank; start it under mpirun -np 4")
		}
		return nil
	}
	members := make([]int, p)
	for i := range members {
		members[i] = i
	}
	g, err := comm.NewGroup(ctx, 0, members)
	if err != nil {
		return err
	}
	// meshrun's side lives as in a worker: each result is freed when its
	// slot dies, and the MPI launcher's backend recycles it for the next
	// collective's result
	be := comm.RecyclingCPU()
	free := func(b rt.Buffer, err error) error {
		if err == nil {
			be.Free(b)
		}
		return err
	}
	if lead {
		path, abi, version := mpi.Library()
		version = strings.TrimSpace(strings.TrimRight(version, "\x00")) // Open MPI's ends in a NUL
		fmt.Printf("mpicoll: %d ranks, %s (%s, %s), thread multiple %v; %d rounds, alternating\n", p, path, abi, version, mpi.ThreadMultiple(), rounds)
		fmt.Printf("%-10s %6s %12s %12s   %s\n", "collective", "MiB", "meshrun GB/s", "raw GB/s", "meshrun/raw min / median / max")
	}
	for _, s := range strings.Split(sizeList, ",") {
		mib, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("bad size %q", s)
		}
		bytes := int(mib * (1 << 20))
		const cols = 256
		rows := bytes / 4 / cols / p // rows per rank in the all-gather
		if rows < 1 {
			return fmt.Errorf("size %v MiB is too small for %d ranks", mib, p)
		}
		n := rows * p * cols // elements of the result

		// all-reduce: n elements on every rank
		x := rt.NewTensor(ir.F32, []int{rows * p, cols})
		fill(x.Data.([]float32), me)
		recv := make([]float32, n)
		ar := []side{
			{"meshrun", func() error { return free(g.AllReduce(ctx, x, rt.OpSum)) }},
			{"raw", func() error { return mpi.Allreduce(ctx, world, x.Data.([]float32), recv, mpi.Sum) }},
			{"raw+alloc", func() error { return mpi.Allreduce(ctx, world, x.Data.([]float32), make([]float32, n), mpi.Sum) }},
		}
		if err := compare(ctx, world, "all_reduce", mib, 4*n, ar, rounds, budget); err != nil {
			return err
		}

		// all-gather: rows×cols from each rank, joined along dim 0
		blk := rt.NewTensor(ir.F32, []int{rows, cols})
		fill(blk.Data.([]float32), me)
		lens := make([]int, p)
		counts := make([]int, p)
		for i := range lens {
			lens[i], counts[i] = rows, rows*cols
		}
		ag := []side{
			{"meshrun", func() error { return free(g.AllGather(ctx, blk, 0, lens)) }},
			{"raw", func() error { return mpi.Allgatherv(ctx, world, blk.Data.([]float32), recv, counts) }},
			{"raw+alloc", func() error { return mpi.Allgatherv(ctx, world, blk.Data.([]float32), make([]float32, n), counts) }},
		}
		if err := compare(ctx, world, "all_gather", mib, 4*n, ag, rounds, budget); err != nil {
			return err
		}
	}
	return nil
}

func fill(d []float32, rank int) {
	for i := range d {
		d[i] = float32((i+rank)%13) - 6
	}
}

// compare times every side round after round (the order reverses every
// round) and prints one line at rank 0: the first side is meshrun's, the
// second the raw call it is compared with; any others are diagnostics.
func compare(ctx context.Context, world *mpi.Comm, name string, mib float64, bytes int, s []side, rounds int, budget time.Duration) error {
	if onlySide != "" {
		return profileOnly(ctx, world, name, s, rounds, budget)
	}
	// One untimed call each warms up MPI's connections and buffers; a
	// second, timed, sizes the batches (every rank gets the slowest rank's
	// time, so all make the same number of calls).
	iters := 3 // at least
	for _, sd := range s {
		if err := sd.call(); err != nil {
			return fmt.Errorf("%s %s: %w", sd.name, name, err)
		}
		t, err := timeBatch(ctx, world, sd.call, 1)
		if err != nil {
			return fmt.Errorf("%s %s: %w", sd.name, name, err)
		}
		iters = max(iters, int(budget/max(t, time.Microsecond)))
	}
	per := make([][]float64, len(s)) // seconds per call, per round
	var ratio []float64              // raw time / meshrun time = meshrun GB/s / raw GB/s
	for r := 0; r < rounds; r++ {
		t := make([]time.Duration, len(s))
		for k := range s {
			i := k
			if r%2 == 1 {
				i = len(s) - 1 - k
			}
			d, err := timeBatch(ctx, world, s[i].call, iters)
			if err != nil {
				return fmt.Errorf("%s %s: %w", s[i].name, name, err)
			}
			t[i] = d
		}
		for i := range s {
			per[i] = append(per[i], t[i].Seconds()/float64(iters))
		}
		ratio = append(ratio, float64(t[1])/float64(t[0]))
	}
	if world.Rank() == 0 {
		gbs := func(sec []float64) float64 { return float64(bytes) / median(sec) / 1e9 }
		slices.Sort(ratio)
		extra := ""
		for i := 2; i < len(s); i++ {
			extra += fmt.Sprintf("; %s %.2f GB/s", s[i].name, gbs(per[i]))
		}
		fmt.Printf("%-10s %6g %12.3f %12.3f   %.3f / %.3f / %.3f   (%.0f / %.0f µs per call, %d calls per batch%s)\n",
			name, mib, gbs(per[0]), gbs(per[1]), ratio[0], median(ratio), ratio[len(ratio)-1], 1e6*median(per[0]), 1e6*median(per[1]), iters, extra)
	}
	return nil
}

// profileOnly runs one side's batches for as long as a comparison would.
func profileOnly(ctx context.Context, world *mpi.Comm, name string, s []side, rounds int, budget time.Duration) error {
	for _, sd := range s {
		if sd.name != onlySide {
			continue
		}
		t, err := timeBatch(ctx, world, sd.call, 1)
		if err != nil {
			return err
		}
		iters := max(3, int(budget/max(t, time.Microsecond)))
		for range rounds {
			if _, err := timeBatch(ctx, world, sd.call, iters); err != nil {
				return err
			}
		}
		if world.Rank() == 0 {
			fmt.Printf("%-10s %s only: %d rounds of %d calls\n", name, sd.name, rounds, iters)
		}
		return nil
	}
	return fmt.Errorf("no side %q", onlySide)
}

// timeBatch runs call iters times between barriers and returns the
// slowest rank's time (the same on every rank).
func timeBatch(ctx context.Context, world *mpi.Comm, call func() error, iters int) (time.Duration, error) {
	if err := world.Barrier(ctx); err != nil {
		return 0, err
	}
	t0 := time.Now()
	for range iters {
		if err := call(); err != nil {
			return 0, err
		}
	}
	mine := []float64{time.Since(t0).Seconds()}
	slowest := make([]float64, 1)
	if err := mpi.Allreduce(ctx, world, mine, slowest, mpi.Max); err != nil {
		return 0, err
	}
	return time.Duration(slowest[0] * float64(time.Second)), nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
