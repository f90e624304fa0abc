package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
)

// BenchmarkInstrCost measures what a rank's worker costs per instruction
// beyond the kernels it launches (issue 10: on the tiny models a step is
// its instruction count times this). The program is a chain of 64
// element-wise ops on f32[4] (each kernel a few nanoseconds of
// arithmetic). Each iteration runs it once through an rt.Worker on a
// rank's CPU backend, as the local launcher runs a rank (timeline,
// holders, memory counts, shape checks), and once through the least any
// interpreter must do: the same Launch calls on another rank's CPU
// backend, each dead value freed at once; the order flips every
// iteration. It reports, at the median over the iterations, ns per
// instruction of each and worker/launches.
func BenchmarkInstrCost(b *testing.B) {
	const n = 64
	var src strings.Builder
	src.WriteString("mesh M = [a=1]\ninput x : f32[4] = normal(0, 1)\ny0 = x * x\n")
	for i := 1; i < n; i++ {
		op := []string{"+", "*", "-"}[i%3]
		fmt.Fprintf(&src, "y%d = y%d %s x\n", i, i-1, op)
	}
	fmt.Fprintf(&src, "output y%d\n", n-1)
	g, err := lang.CheckSource("chain.mesh", []byte(src.String()), lang.CheckOptions{})
	if err != nil {
		b.Fatal(err)
	}
	p, err := lower.Lower(g, lower.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	w, err := rt.NewWorker(ctx, p.Exec, 0, rt.NewRankCPU(rt.DefaultBLAS()), rt.NewInProc(1)[0], rt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	rp, err := p.Exec.Bind(0)
	if err != nil {
		b.Fatal(err)
	}
	x := rt.FromSlice([]int{4}, []float32{0.5, -1, 2, 0.25})
	feed := func(int) (rt.Buffer, error) { return x, nil } // never freed into an arena: it has no home there
	var last []rt.Event
	viaWorker := func() []float32 {
		if last != nil {
			w.ReuseTimeline(last)
		}
		res, err := w.Run(ctx, feed, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		last = res.Stats.Events
		out := slices.Clone(res.Outputs[0].(*rt.Tensor).Data.([]float32))
		w.Backend.Free(res.Outputs[0])
		return out
	}
	cpu := rt.NewRankCPU(rt.DefaultBLAS())
	slots := make([]rt.Buffer, rp.Prog.NumSlots())
	var args []rt.Buffer
	direct := func() []float32 {
		for i := range rp.Prog.Instrs {
			in, bd := &rp.Prog.Instrs[i], &rp.Instrs[i]
			var out rt.Buffer
			switch in.Kind {
			case plan.Source:
				out = x
			case plan.Compute:
				args = args[:0]
				for _, s := range in.Args {
					args = append(args, slots[s])
				}
				if out, err = cpu.Launch(ctx, in.Kernel, args, bd.In, bd.Out); err != nil {
					b.Fatal(err)
				}
			default:
				b.Fatalf("instruction %d: %s in a one-device chain", i, in.Kind)
			}
			slots[in.Out] = out
			for _, s := range in.Free {
				if slots[s] != x {
					cpu.Free(slots[s])
				}
				slots[s] = nil
			}
		}
		res := slots[rp.Prog.OutputSlots[0]]
		out := slices.Clone(res.(*rt.Tensor).Data.([]float32))
		cpu.Free(res)
		return out
	}
	if a, d := viaWorker(), direct(); !slices.Equal(a, d) { // the same program, the same bits
		b.Fatalf("worker %v, launches %v", a, d)
	}
	instrs := float64(len(rp.Prog.Instrs))
	var worker, launches, ratio []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var tw, td time.Duration
		for k := range 2 {
			t0 := time.Now()
			if (i+k)%2 == 0 {
				viaWorker()
				tw = time.Since(t0)
			} else {
				direct()
				td = time.Since(t0)
			}
		}
		worker = append(worker, float64(tw.Nanoseconds())/instrs)
		launches = append(launches, float64(td.Nanoseconds())/instrs)
		ratio = append(ratio, float64(tw)/float64(td))
	}
	b.StopTimer()
	med := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(med(worker), "ns/instr-worker")
	b.ReportMetric(med(launches), "ns/instr-launches")
	b.ReportMetric(med(ratio), "worker/launches")
}
