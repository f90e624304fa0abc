package planner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
)

// errStop ends a measured training run after its steps.
var errStop = errors.New("enough steps")

// measureSteps trains plan p for steps steps on the CPU runtime and
// returns the wall time of each step after the first.
func measureSteps(b *testing.B, p *lower.Plan, steps int) []time.Duration {
	var walls []time.Duration
	_, err := rt.Train(context.Background(), p, rt.Options{}, rt.TrainConfig{OnStep: func(s rt.StepInfo) error {
		if s.Step > 1 {
			walls = append(walls, s.Wall)
		}
		if s.Step == steps {
			return errStop
		}
		return nil
	}})
	if err != nil && !errors.Is(err, errStop) {
		b.Fatal(err)
	}
	return walls
}

// ranks gives each value its rank (1 = smallest), ties the mean rank.
func ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(i, j int) bool { return xs[idx[i]] < xs[idx[j]] })
	out := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && xs[idx[j+1]] == xs[idx[i]] {
			j++
		}
		for k := i; k <= j; k++ {
			out[idx[k]] = float64(i+j)/2 + 1
		}
		i = j + 1
	}
	return out
}

// spearman is the rank correlation of xs and ys.
func spearman(xs, ys []float64) float64 {
	rx, ry := ranks(xs), ranks(ys)
	mean := float64(len(xs)+1) / 2
	var sxy, sxx, syy float64
	for i := range rx {
		dx, dy := rx[i]-mean, ry[i]-mean
		sxy, sxx, syy = sxy+dx*dy, sxx+dx*dx, syy+dy*dy
	}
	return sxy / math.Sqrt(sxx*syy)
}

func TestSpearman(t *testing.T) {
	if r := spearman([]float64{1, 2, 3, 4}, []float64{10, 20, 30, 40}); math.Abs(r-1) > 1e-12 {
		t.Fatal(r)
	}
	if r := spearman([]float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}); math.Abs(r+1) > 1e-12 {
		t.Fatal(r)
	}
	// by hand: ranks (1,2,3) and (1,3,2): Σd² = 2, 1 − 6·2/(3·8) = 0.5
	if r := spearman([]float64{1, 2, 3}, []float64{5, 9, 7}); math.Abs(r-0.5) > 1e-12 {
		t.Fatal(r)
	}
}

// BenchmarkRankCorrelation prices several strategies of the tiny GPT
// (examples/train/gpt/gpt.mesh) on 4 devices and measures their step
// times on the CPU runtime, alternating strategies round by round, and
// reports the rank correlation between the model's step times and the
// measured medians, for the default device model (400 TFLOP/s, 5 µs,
// 100 GB/s), for one whose rate is this CPU's (the one-device run's
// FLOPs over its step time) with in-process links (20 µs, 2 GB/s), and
// for that one with the devices' compute sharing GOMAXPROCS cores.
//
//	go test ./planner -run '^$' -bench RankCorrelation -benchtime 1x
func BenchmarkRankCorrelation(b *testing.B) {
	p, err := Load("../examples/train/gpt/gpt.mesh")
	if err != nil {
		b.Fatal(err)
	}
	ck := []bool{true}
	cands := []*Candidate{
		{Sizes: []int{4, 1}, PP: 1, Micro: 1, Checkpoint: ck},
		{Sizes: []int{2, 2}, PP: 1, Micro: 1, Checkpoint: ck},
		{Sizes: []int{1, 4}, PP: 1, Micro: 1, Checkpoint: ck},
		{Sizes: []int{2, 2}, PP: 1, Micro: 1, Zero: 1, Checkpoint: ck},
		{Sizes: []int{4, 1}, PP: 1, Micro: 1, Zero: 3, Checkpoint: ck},
		{Sizes: []int{2, 2}, PP: 1, Micro: 1, Checkpoint: []bool{false}},
		{Sizes: []int{2, 1}, PP: 2, PPPos: 0, Micro: 1, Schedule: "1f1b", Checkpoint: ck},
		{Sizes: []int{1, 1}, PP: 4, PPPos: 0, Micro: 1, Schedule: "1f1b", Checkpoint: ck},
		{Sizes: []int{1, 2}, PP: 2, PPPos: 0, Micro: 1, Schedule: "gpipe", Checkpoint: ck},
	}
	const rounds, steps = 5, 4
	one := &Candidate{Sizes: []int{1, 1}, PP: 1, Micro: 1, Checkpoint: ck}
	def := Uniform(meshDefault())
	cpuLinks := mustLinksB(b, "*:20:2")
	plans := make([]*lower.Plan, len(cands))
	for i, c := range cands {
		if plans[i], err = compile(p, c, 4, def); err != nil {
			b.Fatal(err)
		}
	}
	onePlan, err := compile(p, one, 1, def)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		measured := make([][]time.Duration, len(cands))
		var single []time.Duration
		for range rounds {
			single = append(single, measureSteps(b, onePlan, steps)...)
			for i := range cands {
				measured[i] = append(measured[i], measureSteps(b, plans[i], steps)...)
			}
		}
		oneCost, err := price(onePlan, one, def, 1, "dp") // rate 1: seconds are FLOPs
		if err != nil {
			b.Fatal(err)
		}
		cpuRate := oneCost.Compute / median(single).Seconds()
		// the CPU runtime runs the 4 devices as goroutines on GOMAXPROCS
		// cores: a device's compute waits for the others' when the cores
		// are fewer (the hypothesis the third correlation tests)
		share := float64(4) / float64(min(4, runtime.GOMAXPROCS(0)))
		var model, cpuModel, shared, wall []float64
		var rows []string
		for i, c := range cands {
			m, err := price(plans[i], c, def, lower.ModelFLOPS, "dp")
			if err != nil {
				b.Fatal(err)
			}
			cm, err := price(plans[i], c, cpuLinks, cpuRate, "dp")
			if err != nil {
				b.Fatal(err)
			}
			ws := measured[i]
			slices.Sort(ws)
			model, cpuModel, wall = append(model, m.Step), append(cpuModel, cm.Step), append(wall, median(ws).Seconds())
			shared = append(shared, cm.Step+(share-1)*cm.Compute)
			rows = append(rows, fmt.Sprintf("%-48s model %9s  cpu model %9s  measured min %8v median %8v max %8v",
				c.Label(p), seconds(m.Step), seconds(cm.Step), ws[0].Round(time.Microsecond), median(ws).Round(time.Microsecond), ws[len(ws)-1].Round(time.Microsecond)))
		}
		b.Logf("CPU rate from the one-device run: %.3g GFLOP/s; %d rounds × %d steps per strategy\n%s", cpuRate/1e9, rounds, steps-1, strings.Join(rows, "\n"))
		b.ReportMetric(spearman(model, wall), "spearman_default")
		b.ReportMetric(spearman(cpuModel, wall), "spearman_cpu")
		b.ReportMetric(spearman(shared, wall), "spearman_cpu_shared")
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func mustLinksB(b *testing.B, spec string) *Links {
	l, err := ParseLinks(spec)
	if err != nil {
		b.Fatal(err)
	}
	return l
}
