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
	"github.com/meshrun/meshrun/rt"
)

// BenchmarkAdamFusion is the before/after of lower's Adam fusion in one
// binary: bench/torch_mlp.sh's MLP (BenchmarkMLPStep's, on one device and
// data-parallel on [dp=2]) trained with the fusion and without
// (lower.Options.NoFuseAdam), alternating in each of b.N rounds (run with
// -benchtime 9x or more; the order flips every round). Each run trains
// 12 steps and takes the fastest of steps 3..12 (a loaded machine
// preempts single steps; the fastest is the least disturbed) of two
// figures: the step's wall time, and the time rank 0's timeline spends in
// Adam's instructions (adam_fused, or adam_moment + adam_moment2 +
// adam_update).
// Reports fused/unfused of each, min / median / max over the rounds.
func BenchmarkAdamFusion(b *testing.B) {
	const steps = 12
	for _, c := range []struct{ mesh, split string }{{"dp=1", ""}, {"dp=2", "{S(0)}"}} {
		b.Run(c.mesh, func(b *testing.B) {
			g, err := lang.CheckSource("mlp.mesh", []byte(mlpSource(c.mesh, c.split)), lang.CheckOptions{})
			if err != nil {
				b.Fatal(err)
			}
			g.Train.Steps = steps
			plans := map[bool]*lower.Plan{}
			for _, off := range []bool{false, true} {
				if plans[off], err = lower.Lower(g, lower.Options{NoFuseAdam: off}); err != nil {
					b.Fatal(err)
				}
			}
			// run trains once; it returns the fastest step and Adam time
			run := func(off bool) (step, adam time.Duration) {
				var walls, adams []time.Duration
				_, err := rt.Train(context.Background(), plans[off], rt.Options{}, rt.TrainConfig{OnStep: func(s rt.StepInfo) error {
					if s.Step >= 3 {
						walls = append(walls, s.Wall)
						adams = append(adams, adamTime(s.Run))
					}
					return nil
				}})
				if err != nil {
					b.Fatal(err)
				}
				return slices.Min(walls), slices.Min(adams)
			}
			var stepR, adamR []float64
			var fusedAdam, plainAdam []time.Duration
			for i := 0; i < b.N; i++ {
				var st, ad [2]time.Duration // [fused, unfused]
				for k := range 2 {
					j := (k + i) % 2
					st[j], ad[j] = run(j == 1)
				}
				stepR = append(stepR, float64(st[0])/float64(st[1]))
				adamR = append(adamR, float64(ad[0])/float64(ad[1]))
				fusedAdam, plainAdam = append(fusedAdam, ad[0]), append(plainAdam, ad[1])
			}
			slices.Sort(stepR)
			slices.Sort(adamR)
			b.ReportMetric(stepR[len(stepR)/2], "step_fused/unfused")
			b.ReportMetric(adamR[len(adamR)/2], "adam_fused/unfused")
			fused := 0
			for _, in := range plans[false].Exec.Programs[0].Instrs {
				if in.Kernel != nil && in.Kernel.Op == "adam_fused" {
					fused++
				}
			}
			b.Logf("%s, %d of 2 updates fused (lower grows no peak), %d rounds: step fused/unfused min %.3f median %.3f max %.3f; Adam's instructions fused/unfused min %.3f median %.3f max %.3f (median of the fastest, ms: %.2f vs %.2f)",
				c.mesh, fused, b.N, stepR[0], stepR[len(stepR)/2], stepR[len(stepR)-1], adamR[0], adamR[len(adamR)/2], adamR[len(adamR)-1],
				float64(median(fusedAdam))/1e6, float64(median(plainAdam))/1e6)
		})
	}
}

// adamTime is the time rank 0 spent in Adam's instructions in one run.
func adamTime(r *rt.Result) time.Duration {
	var t time.Duration
	for _, ev := range r.Devices[0].Events {
		if ev.Kind == "compute" && strings.HasPrefix(ev.Name, "adam_") {
			t += ev.Dur
		}
	}
	return t
}

func median(xs []time.Duration) time.Duration {
	if len(xs) == 0 {
		panic(fmt.Sprintf("median of %d figures", len(xs)))
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
