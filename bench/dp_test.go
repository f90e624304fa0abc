package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
)

// dpSource is a data-parallel MLP (x @ W1 -> gelu -> @ W2, MSE, Adam;
// global batch 256, width 256, hidden 512: 1 MiB of f32 gradients per
// step) on [dp=n].
func dpSource(n int) string {
	return fmt.Sprintf(`mesh M = [dp=%d]
input x : f32[256, 256] {S(0)} = normal(0, 1)
input t : f32[256, 256] {S(0)} = normal(0, 1)
param W1 : f32[256, 512] = normal(0, 0.0625)
param W2 : f32[512, 256] = normal(0, 0.044)
train {
    loss = mse(gelu(x @ W1) @ W2, t)
    optimizer = adam(lr=0.001)
    steps = 1
}
`, n)
}

// replicated says whether an event is optimizer work, which pure data
// parallelism repeats on every rank (the parameters are replicated).
func replicated(e rt.Event) bool {
	return strings.HasPrefix(e.Name, "adam_") || strings.HasPrefix(e.Name, "sgd") || strings.HasPrefix(e.Name, "momentum")
}

// memBandwidth is the copy bandwidth of this machine now: bytes copied
// per second by min(n, GOMAXPROCS) goroutines each copying 16 MiB at once
// (best of 5): the rate at which n in-process ranks can move bytes at best.
func memBandwidth(n int) float64 {
	w := min(n, runtime.GOMAXPROCS(0))
	src, dst := make([][]byte, w), make([][]byte, w)
	for i := range src {
		src[i], dst[i] = make([]byte, 16<<20), make([]byte, 16<<20)
		copy(dst[i], src[i]) // touch both
	}
	best := time.Duration(1 << 62)
	for range 5 {
		var wg sync.WaitGroup
		t0 := time.Now()
		for i := range src {
			wg.Add(1)
			go func() { defer wg.Done(); copy(dst[i], src[i]) }()
		}
		wg.Wait()
		best = min(best, time.Since(t0))
	}
	return float64(w*len(src[0])) / best.Seconds()
}

// allReduces times the DP step's collectives alone: n goroutine ranks on
// the in-process transport the local launcher uses (rt.NewInProc, ring
// groups) all-reduce one f32 tensor per shape, started together; it
// returns the wall time from the start to the last rank's end and the
// bytes all ranks sent.
func allReduces(b *testing.B, n int, shapes [][]int) (time.Duration, int64) {
	ctx := context.Background()
	comms := rt.NewInProc(n)
	members := make([]int, n)
	for i := range members {
		members[i] = i
	}
	groups := make([]rt.Group, n)
	for r, c := range comms {
		g, err := c.NewGroup(ctx, 0, members)
		if err != nil {
			b.Fatal(err)
		}
		groups[r] = g
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			xs := make([]*rt.Tensor, len(shapes))
			for i, sh := range shapes {
				xs[i] = rt.NewTensor(ir.F32, sh)
				clear(xs[i].Data.([]float32)) // touched before the clock starts
			}
			<-start
			for _, x := range xs {
				if _, err := groups[r].AllReduce(ctx, x, rt.OpSum); err != nil {
					errs[r] = err
					return
				}
			}
		}()
	}
	time.Sleep(time.Millisecond) // let every rank reach the start line
	t0 := time.Now()
	close(start)
	wg.Wait()
	d := time.Since(t0)
	var sent int64
	for r, c := range comms {
		if errs[r] != nil {
			b.Fatal(errs[r])
		}
		sent += c.BytesSent()
	}
	return d, sent
}

// BenchmarkDPStepSplit trains dpSource on [dp=N], N = 2 … 64 (DP_MAX
// caps it), and on one device, alternating, b.N rounds of trainSteps
// steps each (steps 2.. timed), and splits the mesh step into:
//   - compute: device 0's kernels other than the optimizer's (its share of
//     the batch; on fewer cores than ranks a kernel's wall time includes
//     the time other ranks held its core);
//   - replicated: device 0's optimizer kernels, which every rank repeats;
//   - source: device 0's data sources (its rows of the random batch);
//   - comm (in step): device 0's collective events, waiting for peers
//     included;
//   - comm (alone): the step's two gradient all-reduces run by N ranks
//     with nothing else to do (allReduces), start to last finish;
//   - ideal: the bytes all ranks send (a ring all-reduce sends 2(N−1)/N of
//     the gradient per rank) at the copy bandwidth of min(N, GOMAXPROCS)
//     cores measured in the same round.
//
// Goal (issue 10, goal 2): comm (alone) within 2× of ideal. Run with
// -benchtime 5x (rounds).
func BenchmarkDPStepSplit(b *testing.B) {
	const trainSteps = 6
	maxN := 64
	if v := envInt("DP_MAX"); v > 0 {
		maxN = v
	}
	grads := [][]int{{256, 512}, {512, 256}} // W1's and W2's gradients
	for n := 2; n <= maxN; n *= 2 {
		b.Run(fmt.Sprintf("dp=%d", n), func(b *testing.B) {
			g, err := lang.CheckSource("dp.mesh", []byte(dpSource(n)), lang.CheckOptions{})
			if err != nil {
				b.Fatal(err)
			}
			g.Train.Steps = trainSteps
			mesh, err := lower.Lower(g, lower.Options{})
			if err != nil {
				b.Fatal(err)
			}
			single, err := lower.Lower(g, lower.Options{Mesh: g.Mesh.Single()})
			if err != nil {
				b.Fatal(err)
			}
			var s dpSplit
			var ratios, commRatios []float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var one time.Duration
				var r dpSplit
				for k := 0; k < 3; k++ {
					switch (k + i) % 3 {
					case 0:
						t := trainSplit(b, mesh, trainSteps)
						r.wall, r.compute, r.replicated, r.source, r.comm = t.wall, t.compute, t.replicated, t.source, t.comm
					case 1:
						one = trainSplit(b, single, trainSteps).wall
					case 2:
						r.alone, r.bytes = allReduces(b, n, grads)
						r.ideal = time.Duration(float64(r.bytes) / memBandwidth(n) * 1e9)
					}
				}
				ratios = append(ratios, float64(r.wall)/float64(one))
				commRatios = append(commRatios, float64(r.alone)/float64(r.ideal))
				s.add(r)
			}
			lo, med, hi := spread(ratios)
			clo, cmed, chi := spread(commRatios)
			per := func(d time.Duration) string { return (d / time.Duration(b.N)).Round(time.Microsecond).String() }
			b.ReportMetric(med, "mesh_over_single")
			b.ReportMetric(cmed, "comm_over_ideal")
			b.Logf("[dp=%d] %s, GOMAXPROCS %d: step %s: compute %s, replicated %s, source %s, comm %s in the step (device 0, waiting included); the all-reduces alone %s for %.2f MB sent, ideal %s; mesh/1 device min %.2f median %.2f max %.2f; comm alone/ideal min %.2f median %.2f max %.2f (goal ≤ 2; %d rounds)",
				n, rt.DescribeBLAS(rt.DefaultBLAS()), runtime.GOMAXPROCS(0), per(s.wall), per(s.compute), per(s.replicated), per(s.source), per(s.comm), per(s.alone),
				float64(s.bytes)/float64(b.N)/1e6, per(s.ideal), lo, med, hi, clo, cmed, chi, b.N)
		})
	}
}

// dpSplit is one training run's mean step (steps 2..), split as
// BenchmarkDPStepSplit describes.
type dpSplit struct {
	wall, compute, replicated, source, comm, alone, ideal time.Duration
	bytes                                                 int64 // sent by all ranks in the all-reduces alone
}

func (s *dpSplit) add(r dpSplit) {
	s.wall += r.wall
	s.compute += r.compute
	s.replicated += r.replicated
	s.source += r.source
	s.comm += r.comm
	s.alone += r.alone
	s.ideal += r.ideal
	s.bytes += r.bytes
}

// trainSplit runs p and returns device 0's mean step over steps 2..steps.
func trainSplit(b *testing.B, p *lower.Plan, steps int) dpSplit {
	var s dpSplit
	_, err := rt.Train(context.Background(), p, rt.Options{}, rt.TrainConfig{OnStep: func(st rt.StepInfo) error {
		if st.Step == 1 {
			return nil
		}
		s.wall += st.Wall
		for _, e := range st.Run.Devices[0].Events {
			switch {
			case e.Kind == "comm":
				s.comm += e.Dur
			case e.Kind == "source":
				s.source += e.Dur
			case e.Kind == "compute" && replicated(e):
				s.replicated += e.Dur
			case e.Kind == "compute":
				s.compute += e.Dur
			}
		}
		return nil
	}})
	if err != nil {
		b.Fatal(err)
	}
	k := time.Duration(steps - 1)
	s.wall, s.compute, s.replicated, s.source, s.comm = s.wall/k, s.compute/k, s.replicated/k, s.source/k, s.comm/k
	return s
}

// envInt is the integer in environment variable name, 0 when unset or bad.
func envInt(name string) int {
	v, _ := strconv.Atoi(os.Getenv(name))
	return v
}
