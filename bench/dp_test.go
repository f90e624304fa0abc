package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

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

// memBandwidth is the copy bandwidth of this machine now (bytes copied per
// second, best of 5 copies of 64 MiB): the rate at which an in-process
// collective can move bytes at best.
func memBandwidth() float64 {
	src, dst := make([]byte, 64<<20), make([]byte, 64<<20)
	copy(dst, src) // touch both
	best := time.Duration(1 << 62)
	for range 5 {
		t0 := time.Now()
		copy(dst, src)
		best = min(best, time.Since(t0))
	}
	return float64(len(src)) / best.Seconds()
}

// BenchmarkDPStepSplit trains dpSource on [dp=N], N = 2 … 64 (DP_MAX
// caps it), and on one device, alternating, b.N rounds of trainSteps
// steps each (steps 2.. timed), and splits the mesh step into:
//   - compute: device 0's kernels other than the optimizer's (its share of
//     the batch);
//   - replicated: device 0's optimizer kernels, which every rank repeats;
//   - source: device 0's data sources (its rows of the random batch);
//   - comm (dev 0): device 0's collective events, waiting for peers
//     included;
//   - comm (est.): the step's wall time minus every rank's compute,
//     replicated and source time shared over min(N, GOMAXPROCS) cores: the
//     time no rank computes;
//   - ideal: the bytes all ranks send per step (a ring all-reduce sends
//     2(N−1)/N of the gradient per rank) at the copy bandwidth measured in
//     the same round (goal: comm within 2× of it, issue 10 goal 2).
//
// Run with -benchtime 5x (rounds).
func BenchmarkDPStepSplit(b *testing.B) {
	const trainSteps = 6
	maxN := 64
	if v := envInt("DP_MAX"); v > 0 {
		maxN = v
	}
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
				bw := memBandwidth()
				var one time.Duration
				var r dpSplit
				for k := 0; k < 2; k++ {
					if (k+i)%2 == 0 {
						r = trainSplit(b, mesh, n, trainSteps)
					} else {
						one = trainSplit(b, single, 1, trainSteps).wall
					}
				}
				r.ideal = time.Duration(float64(r.bytes) / bw * 1e9)
				ratios = append(ratios, float64(r.wall)/float64(one))
				commRatios = append(commRatios, float64(r.commEst)/float64(r.ideal))
				s.add(r)
			}
			lo, med, hi := spread(ratios)
			clo, cmed, chi := spread(commRatios)
			per := func(d time.Duration) string { return (d / time.Duration(b.N)).Round(time.Microsecond).String() }
			b.ReportMetric(med, "mesh_over_single")
			b.ReportMetric(cmed, "comm_over_ideal")
			b.Logf("[dp=%d] %s, GOMAXPROCS %d: step %s = compute %s + replicated %s + source %s + comm %s (dev 0) / %s (est.); %.2f MB sent per step, ideal %s; mesh/1 device min %.2f median %.2f max %.2f; comm(est.)/ideal min %.2f median %.2f max %.2f (goal ≤ 2; %d rounds)",
				n, rt.DescribeBLAS(rt.DefaultBLAS()), runtime.GOMAXPROCS(0), per(s.wall), per(s.compute), per(s.replicated), per(s.source), per(s.comm), per(s.commEst),
				float64(s.bytes)/float64(b.N)/1e6, per(s.ideal), lo, med, hi, clo, cmed, chi, b.N)
		})
	}
}

// dpSplit is one training run's mean step (steps 2..), split as
// BenchmarkDPStepSplit describes.
type dpSplit struct {
	wall, compute, replicated, source, comm, commEst, ideal time.Duration
	bytes                                                   int64
}

func (s *dpSplit) add(r dpSplit) {
	s.wall += r.wall
	s.compute += r.compute
	s.replicated += r.replicated
	s.source += r.source
	s.comm += r.comm
	s.commEst += r.commEst
	s.ideal += r.ideal
	s.bytes += r.bytes
}

// trainSplit runs p and returns its mean step over steps 2..steps.
func trainSplit(b *testing.B, p *lower.Plan, n, steps int) dpSplit {
	var s dpSplit
	var work time.Duration // every rank's compute, replicated and source time
	_, err := rt.Train(context.Background(), p, rt.Options{}, rt.TrainConfig{OnStep: func(st rt.StepInfo) error {
		if st.Step == 1 {
			return nil
		}
		s.wall += st.Wall
		for dev, d := range st.Run.Devices {
			for _, e := range d.Events {
				switch {
				case e.Kind == "comm":
					s.bytes += e.Bytes
					if dev == 0 {
						s.comm += e.Dur
					}
				case e.Kind == "compute" || e.Kind == "source":
					work += e.Dur
					if dev != 0 {
						break
					}
					switch {
					case e.Kind == "source":
						s.source += e.Dur
					case replicated(e):
						s.replicated += e.Dur
					default:
						s.compute += e.Dur
					}
				}
			}
		}
		return nil
	}})
	if err != nil {
		b.Fatal(err)
	}
	k := time.Duration(steps - 1)
	s.wall, s.compute, s.replicated, s.source, s.comm = s.wall/k, s.compute/k, s.replicated/k, s.source/k, s.comm/k
	s.bytes /= int64(k)
	work /= k
	s.commEst = max(0, s.wall-work/time.Duration(min(n, runtime.GOMAXPROCS(0))))
	return s
}

// envInt is the integer in environment variable name, 0 when unset or bad.
func envInt(name string) int {
	v, _ := strconv.Atoi(os.Getenv(name))
	return v
}
