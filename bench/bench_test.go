// Package bench holds meshrun's benchmarks. Each reports a ratio against a
// reference measured in the same invocation (these machines are noisy);
// none asserts a time. Run them with bench/run.sh, which also repeats them
// with OpenBLAS when libopenblas.so.0 is present.
package bench

import (
	"context"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	meshpkg "github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/sbp"
)

// BenchmarkMatmulBackendVsRawBLAS times the backend's matmul as the
// runtime calls it (Launch on a rank's CPU backend: dispatch, an output
// from the rank's arena, GEMM; then Free, as a worker frees a dead value)
// and the raw BLAS call into a reused buffer, on matmul shapes of the
// examples (the tiny GPT's projections, MLP and output layer; the
// torch_mlp.sh MLP; the Megatron MLP), one call each per iteration, the
// order flipped every iteration. It reports raw/backend per pair of calls
// at the median and the mean (total raw over total backend) (goal ≥ 0.95
// at the median and ≥ 0.9 at the mean, issue 10). Run -benchtime 200x.
func BenchmarkMatmulBackendVsRawBLAS(b *testing.B) {
	shapes := [][3]int{ // m, k, n
		{256, 32, 32}, {256, 32, 128}, {256, 128, 32}, {256, 32, 37}, // tiny GPT
		{256, 512, 1024}, {256, 1024, 512}, // torch_mlp.sh
		{64, 512, 512}, {256, 256, 256}, {32, 512, 2048},
	}
	for _, sh := range shapes {
		m, k, n := sh[0], sh[1], sh[2]
		b.Run(ir.ShapeString(sh[:]), func(b *testing.B) {
			blas := rt.DefaultBLAS()
			cpu := rt.NewRankCPU(blas)
			g, err := lang.CheckSource("b.mesh", []byte("mesh M = [a=1]\ninput x : f32["+itoa(m)+", "+itoa(k)+"] = normal(0, 1)\ninput w : f32["+itoa(k)+", "+itoa(n)+"] = normal(0, 1)\ny = x @ w\noutput y\n"), lang.CheckOptions{})
			if err != nil {
				b.Fatal(err)
			}
			kern := lower.KernelOf(g.Outputs[0].Value)
			x := rt.NewTensor(ir.F32, []int{m, k})
			w := rt.NewTensor(ir.F32, []int{k, n})
			for i, d := 0, x.Data.([]float32); i < len(d); i++ {
				d[i] = float32(i%7) - 3
			}
			for i, d := 0, w.Data.([]float32); i < len(d); i++ {
				d[i] = float32(i%5) - 2
			}
			args := []rt.Buffer{x, w}
			c := make([]float32, m*n)
			backend := func() time.Duration {
				t0 := time.Now()
				y, err := cpu.Launch(context.Background(), kern, args, nil, sbp.Block{})
				d := time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				cpu.Free(y)
				return d
			}
			raw := func() time.Duration {
				t0 := time.Now()
				blas.Sgemm(m, n, k, x.Data.([]float32), k, w.Data.([]float32), n, c, n)
				return time.Since(t0)
			}
			backend() // the arena's first buffer
			var tBackend, tRaw time.Duration
			ratios := make([]float64, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var db, dr time.Duration
				if i%2 == 0 {
					db, dr = backend(), raw()
				} else {
					dr, db = raw(), backend()
				}
				tBackend += db
				tRaw += dr
				ratios = append(ratios, float64(dr)/float64(db))
			}
			lo, med, hi := spread(ratios)
			mean := float64(tRaw) / float64(tBackend)
			b.ReportMetric(med, "median_raw/backend")
			b.ReportMetric(mean, "mean_raw/backend")
			b.ReportMetric(2*float64(m*n*k)*float64(b.N)/tRaw.Seconds()/1e9, "raw_GFLOPs")
			b.Logf("%s with %s: raw/backend per call min %.3f median %.3f max %.3f, mean %.3f (goal: median ≥ 0.95, mean ≥ 0.9)", ir.ShapeString(sh[:]), rt.DescribeBLAS(blas), lo, med, hi, mean)
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// BenchmarkMegatronMLPMeshVsOneDevice runs examples/megatron_mlp.mesh on
// its 8 virtual devices and on 1 device (same global work), interleaved,
// and reports mesh/single wall time ("mesh_over_single", goal ≤ 1.3).
func BenchmarkMegatronMLPMeshVsOneDevice(b *testing.B) {
	g, _, err := lang.CheckFile("../examples/megatron_mlp.mesh", lang.CheckOptions{})
	if err != nil {
		b.Fatal(err)
	}
	mesh, err := lower.Lower(g, lower.Options{})
	if err != nil {
		b.Fatal(err)
	}
	single, err := lower.Lower(g, lower.Options{Mesh: g.Mesh.Single()})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var tMesh, tSingle time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if _, err := rt.Run(ctx, mesh, rt.Options{}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := rt.Run(ctx, single, rt.Options{}); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		tMesh += t1.Sub(t0)
		tSingle += t2.Sub(t1)
	}
	b.ReportMetric(float64(tMesh)/float64(tSingle), "mesh_over_single")
	b.Logf("megatron_mlp with %s: 8 devices / 1 device = %.3f", rt.DefaultBLAS().Name(), float64(tMesh)/float64(tSingle))
}

// BenchmarkTrainStep times training steps of the DP MLP, the DP×TP
// Megatron MLP and the tiny GPT on their meshes, the last two also on
// [dp=1, tp=2] (tensor parallelism alone), and on one device (same global
// batch). Each b.N iteration is one round: one rt.Train on each
// (workers made once per Train and reused by every step, as meshrun train
// does), the order flipped every round, timing steps 2..steps (parameters
// carried, not initialised). A round's ratio is the median mesh step over
// the median one-device step: the MLPs' steps take a few hundred
// microseconds, so a round runs 40 of them, and the median keeps one
// preempted step (the machine is shared) from deciding the round. It
// reports the per-round ratios as min/median/max ("mesh_over_single" is
// the median; goal ≤ 1.3) and splits the mesh step's time on device 0
// into compute, communication and the rest (sources, local steps,
// scheduling), from the timeline. It also reports the same ratio of the
// process's CPU time per step (processCPU; "cpu_mesh_over_single"), which
// the machine's other load moves much less than the wall time. Run at
// least -benchtime 5x.
func BenchmarkTrainStep(b *testing.B) {
	for _, c := range []struct {
		ex    string
		tp    int // > 0: the example on [dp=1, tp=tp] instead of its own mesh (TP alone)
		steps int
	}{{"train/mlp_dp", 0, 40}, {"train/megatron_dp_tp", 0, 40}, {"train/megatron_dp_tp", 2, 40}, {"train/gpt/gpt", 0, 12}, {"train/gpt/gpt", 2, 12}} {
		ex, name := c.ex, c.ex
		if c.tp > 0 {
			name += "/tp=" + itoa(c.tp)
		}
		b.Run(name, func(b *testing.B) {
			g, _, err := lang.CheckFile("../examples/"+ex+".mesh", lang.CheckOptions{})
			if err != nil {
				b.Fatal(err)
			}
			g.Train.Steps = c.steps
			var on *meshpkg.Mesh
			if c.tp > 0 {
				on = meshpkg.New(g.Mesh.Name, meshpkg.Axis{Name: "dp", Size: 1}, meshpkg.Axis{Name: "tp", Size: c.tp})
			}
			mesh, err := lower.Lower(g, lower.Options{Mesh: on})
			if err != nil {
				b.Fatal(err)
			}
			single, err := lower.Lower(g, lower.Options{Mesh: g.Mesh.Single()})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var tMesh, compute, comm time.Duration
			var ratios, cpuRatios, meshMed, singleMed, meshCPU, singleCPU []float64
			// instrs counts the instructions a step runs, on every rank
			// (ring steps are drawn, not run): CPU per instruction is the
			// interpreter's fixed cost where the tensors are tiny
			var instrs [2]int
			steady := func(walls, cpus *[]float64, events bool) rt.TrainConfig {
				var last time.Duration
				return rt.TrainConfig{OnStep: func(s rt.StepInfo) error {
					now := processCPU(b)
					cpu := now - last
					last = now
					if s.Step == 1 {
						return nil
					}
					if s.Step == 2 {
						instrs[btoi(events)] = countInstrs(s.Run)
					}
					*walls = append(*walls, float64(s.Wall))
					*cpus = append(*cpus, float64(cpu))
					if events {
						tMesh += s.Wall
						for _, e := range s.Run.Devices[0].Events {
							switch e.Kind {
							case "compute":
								compute += e.Dur
							case "comm":
								comm += e.Dur
							}
						}
					}
					return nil
				}}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var m, s, mc, sc []float64
				for k := 0; k < 2; k++ {
					if (k+i)%2 == 0 {
						if _, err := rt.Train(ctx, mesh, rt.Options{}, steady(&m, &mc, true)); err != nil {
							b.Fatal(err)
						}
					} else if _, err := rt.Train(ctx, single, rt.Options{}, steady(&s, &sc, false)); err != nil {
						b.Fatal(err)
					}
				}
				_, mm, _ := spread(m)
				_, sm, _ := spread(s)
				_, mcm, _ := spread(mc)
				_, scm, _ := spread(sc)
				meshMed, singleMed = append(meshMed, mm), append(singleMed, sm)
				meshCPU, singleCPU = append(meshCPU, mcm), append(singleCPU, scm)
				ratios, cpuRatios = append(ratios, mm/sm), append(cpuRatios, mcm/scm)
			}
			clo, cmed, chi := spread(cpuRatios)
			other := tMesh - compute - comm
			lo, med, hi := spread(ratios)
			_, mm, _ := spread(meshMed)
			_, sm, _ := spread(singleMed)
			_, mcpu, _ := spread(meshCPU)
			_, scpu, _ := spread(singleCPU)
			b.ReportMetric(med, "mesh_over_single")
			b.ReportMetric(lo, "ratio_min")
			b.ReportMetric(hi, "ratio_max")
			b.ReportMetric(float64(compute)/float64(tMesh), "compute_frac")
			b.ReportMetric(float64(comm)/float64(tMesh), "comm_frac")
			b.ReportMetric(cmed, "cpu_mesh_over_single")
			b.Logf("%s on %v with %s: median step mesh %v / 1 device %v; mesh/single per round min %.2f median %.2f max %.2f (%d rounds of %d steps); on device 0: compute %.0f%%, communication %.0f%%, other %.0f%%; CPU per step mesh/single per round min %.2f median %.2f max %.2f; median CPU per step mesh %v / 1 device %v; instructions per step (all ranks) mesh %d / 1 device %d",
				ex, mesh.Exec.Mesh, rt.DescribeBLAS(rt.DefaultBLAS()), time.Duration(mm), time.Duration(sm), lo, med, hi, b.N, c.steps-1,
				100*float64(compute)/float64(tMesh), 100*float64(comm)/float64(tMesh), 100*float64(other)/float64(tMesh), clo, cmed, chi,
				time.Duration(mcpu), time.Duration(scpu), instrs[1], instrs[0])
		})
	}
}

// countInstrs is the instructions a run executed on all its devices:
// its timeline events but the ring steps drawn inside collectives.
func countInstrs(r *rt.Result) int {
	n := 0
	for _, d := range r.Devices {
		for _, e := range d.Events {
			if e.Kind != "ring" {
				n++
			}
		}
	}
	return n
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// processCPU is the CPU time the process has used, user and system, on
// all its threads (BLAS's included): a step's CPU is the difference
// across it. On a shared machine the wall time of a step depends on what
// else runs; its CPU much less, so the CPU ratio of mesh to one device
// says how much more work the mesh does, the wall ratio how much of the
// machine it then got.
func processCPU(b *testing.B) time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}

// spread returns the minimum, median and maximum.
func spread(xs []float64) (lo, med, hi float64) {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return s[0], med, s[n-1]
}

// BenchmarkGPTStep times one training step of the tiny GPT
// (examples/train/gpt/gpt.mesh) per b.N iteration, on one device and on
// its [dp=2, tp=2] mesh, with the allocations per step (B/op, allocs/op):
// the garbage a step leaves for the collector. One rt.Train runs b.N+1
// steps on workers made once; the first step (initialisers, first-touch
// of every buffer) is excluded by resetting the timer when it ends, the
// final parameters' assembly by stopping it after the last.
func BenchmarkGPTStep(b *testing.B) {
	g, _, err := lang.CheckFile("../examples/train/gpt/gpt.mesh", lang.CheckOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"single", "mesh"} {
		b.Run(name, func(b *testing.B) {
			opts := lower.Options{}
			if name == "single" {
				opts.Mesh = g.Mesh.Single()
			}
			timeTrainSteps(b, g, opts)
		})
	}
}

// mlpSource is bench/torch_mlp.sh's MLP (x @ W1 -> gelu -> @ W2, MSE,
// Adam; B=256, D=512, H=1024) on mesh M, with random data and weights.
func mlpSource(mesh, split string) string {
	return "mesh M = [" + mesh + "]\n" +
		"input x : f32[256, 512] " + split + " = normal(0, 1)\n" +
		"input t : f32[256, 512] " + split + " = normal(0, 1)\n" +
		"param W1 : f32[512, 1024] = normal(0, 0.044)\n" +
		"param W2 : f32[1024, 512] = normal(0, 0.031)\n" +
		"train {\n    loss = mse(gelu(x @ W1) @ W2, t)\n    optimizer = adam(lr=0.001)\n    steps = 1\n}\n"
}

// BenchmarkMLPStep times one training step of bench/torch_mlp.sh's MLP
// per b.N iteration on one device, as BenchmarkGPTStep does (for
// profiles: -cpuprofile).
func BenchmarkMLPStep(b *testing.B) {
	g, err := lang.CheckSource("mlp.mesh", []byte(mlpSource("dp=1", "")), lang.CheckOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("BLAS: %s", rt.DescribeBLAS(rt.DefaultBLAS()))
	timeTrainSteps(b, g, lower.Options{})
}

// timeTrainSteps lowers g and trains it for b.N + 1 steps, timing steps
// 2 … N+1: the first step's set-up (every buffer's first allocation) is
// excluded by resetting the timer when it ends, the final parameters'
// assembly by stopping it after the last.
func timeTrainSteps(b *testing.B, g *ir.Graph, opts lower.Options) {
	b.Helper()
	timeTrainStepsWith(b, g, opts, nil)
}

// timeTrainStepsWith is timeTrainSteps handing each timed step's result
// to timed (when not nil) while the timer is stopped.
func timeTrainStepsWith(b *testing.B, g *ir.Graph, opts lower.Options, timed func(*rt.Result)) {
	b.Helper()
	g.Train.Steps = b.N + 1
	p, err := lower.Lower(g, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	_, err = rt.Train(context.Background(), p, rt.Options{}, rt.TrainConfig{OnStep: func(s rt.StepInfo) error {
		switch {
		case s.Step == 1:
			b.ResetTimer()
		case s.Step == s.Steps:
			b.StopTimer()
		}
		if s.Step > 1 && timed != nil {
			b.StopTimer()
			timed(s.Run)
			if s.Step < s.Steps {
				b.StartTimer()
			}
		}
		return nil
	}})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMegatronStep times one training step of the Megatron MLP
// (examples/train/megatron_dp_tp.mesh) per b.N iteration on one device,
// on its [dp=2, tp=2] mesh and on [dp=1, tp=2], as BenchmarkGPTStep does
// (for profiles: -cpuprofile; bench/meshprof.py).
func BenchmarkMegatronStep(b *testing.B) {
	g, _, err := lang.CheckFile("../examples/train/megatron_dp_tp.mesh", lang.CheckOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"single", "mesh", "tp=2"} {
		b.Run(name, func(b *testing.B) {
			opts := lower.Options{}
			switch name {
			case "single":
				opts.Mesh = g.Mesh.Single()
			case "tp=2":
				opts.Mesh = meshpkg.New(g.Mesh.Name, meshpkg.Axis{Name: "dp", Size: 1}, meshpkg.Axis{Name: "tp", Size: 2})
			}
			timeTrainSteps(b, g, opts)
		})
	}
}
