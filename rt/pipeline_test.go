package rt

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/pipeline"
	"github.com/stretchr/testify/require"
)

// uniformPipe is a program of stages identical layers (per-layer params,
// one marked stage each) on a pipeline of ranks, trained one step.
func uniformPipe(ranks, stages, micro int, schedule string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mesh M = [pipeline pp=%d]\n", ranks)
	fmt.Fprintf(&b, "input x : f32[%d, 8] = normal(0, 1)\n", 2*micro)
	for l := range stages {
		fmt.Fprintf(&b, "param W%d : f32[8, 8] = normal(0, 0.3)\n", l)
	}
	fmt.Fprintf(&b, "train {\n    pipeline = %s\n    microbatches = %d\n    h = x\n", schedule, micro)
	for l := range stages {
		fmt.Fprintf(&b, "    stage = %d\n    h = tanh(h @ W%d)\n", l, l)
	}
	b.WriteString("    loss = sum(h * h)\n    optimizer = sgd(lr=0.01)\n    steps = 1\n}\n")
	return b.String()
}

// unitCosts is the simulated clock of the schedules' textbook figures:
// every F, I and W takes one unit, B two (I and W), and messages are free.
func unitClock() *SimClock {
	return &SimClock{Action: func(a pipeline.Action) time.Duration {
		if a.Kind == pipeline.B {
			return 2 * time.Millisecond
		}
		return time.Millisecond
	}}
}

// runPipe trains p one step on the simulated clock and returns the
// pipeline timeline and the ranks' statistics.
func runPipe(t *testing.T, p *lower.Plan) ([]pipeline.Event, []DeviceStats) {
	t.Helper()
	opts := Options{Clock: unitClock()}
	l, err := NewLocal(context.Background(), p.Exec, opts)
	require.NoError(t, err)
	res, err := TrainOn(context.Background(), l, p, opts, TrainConfig{})
	require.NoError(t, err)
	return PipelineEvents(p.Exec, res.Last.Devices), res.Last.Devices
}

func TestPipelineBubblesMeasuredOnTheRuntimeClock(t *testing.T) {
	cases := []struct {
		schedule    string
		ranks, v, m int
		want        float64
	}{
		{"naive", 2, 1, 1, 1.0 / 2},
		{"naive", 4, 1, 1, 3.0 / 4},
		{"gpipe", 2, 1, 4, 1.0 / 5},
		{"gpipe", 4, 1, 8, 3.0 / 11},
		{"1f1b", 2, 1, 2, 1.0 / 3},
		{"1f1b", 4, 1, 4, 3.0 / 7},
		{"1f1b", 3, 1, 6, 2.0 / 8},
		{"interleaved(2)", 2, 2, 4, 1.0 / 9},
		{"interleaved(2)", 4, 2, 8, 3.0 / 19},
		{"interleaved(3)", 2, 3, 4, 1.0 / 13},
		{"interleaved(3)", 3, 3, 6, 2.0 / 20},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s_K%d_M%d", c.schedule, c.ranks, c.m), func(t *testing.T) {
			p := compile(t, uniformPipe(c.ranks, c.ranks*c.v, c.m, c.schedule))
			events, _ := runPipe(t, p)
			require.NotEmpty(t, events)
			require.InDelta(t, c.want, pipeline.Bubble(events, c.ranks), 1e-9, "bubble/total of %s", c.schedule)
		})
	}
}

// Zero-bubble schedules with equal F, I and W times: ZB-H1 idles a third
// of 1F1B's time, ZB-V almost never; both measured on the runtime's clock.
func TestZeroBubbleSchedulesMeasured(t *testing.T) {
	const k, m = 4, 8
	idle := func(schedule string, v int) (float64, float64) {
		p := compile(t, uniformPipe(k, k*v, m, schedule))
		events, _ := runPipe(t, p)
		start, end := pipeline.Span(events)
		busy := pipeline.Busy(events, k)
		return (end - start) - busy[k-1], pipeline.Bubble(events, k)
	}
	idle1f1b, bubble1f1b := idle("1f1b", 1)
	idleZB, bubbleZB := idle("zb1p", 1)
	_, bubbleZBV := idle("zbv", 2)
	// 1F1B idles (K−1)(F+B) = 9 units per rank, ZB-H1 (K−1)(F+I−W) = 3
	require.InDelta(t, 9e-3, idle1f1b, 1e-9)
	require.InDelta(t, idle1f1b/3, idleZB, 1e-9, "ZB-H1 idles a third of 1F1B")
	require.Less(t, bubbleZB, bubble1f1b)
	require.Less(t, bubbleZBV, 0.07, "ZB-V's bubble with M = 2K")
	require.Less(t, bubbleZBV, bubbleZB)
}

// The activations each stage keeps, from the runtime's memory accounting:
// GPipe keeps all M micro-batches, 1F1B min(M, K−s) at stage s, ZB-H1 no
// more than the schedule holds between a micro-batch's F and its W (the
// weight gradient reads the activations); with checkpointed layers only the stage's
// boundary activations (its input and its output) are kept between
// actions, where without checkpointing the layer's intermediates are too.
func TestPipelineActivationMemoryMeasured(t *testing.T) {
	for _, c := range []struct{ k, m int }{{2, 4}, {4, 4}, {4, 8}, {3, 2}} {
		live := func(schedule string) map[int]int {
			_, devs := runPipe(t, compile(t, uniformPipe(c.k, c.k, c.m, schedule)))
			out := map[int]int{}
			for _, d := range devs {
				for s, n := range d.Pipe.PeakLive {
					out[s] = n
				}
			}
			return out
		}
		gpipe, ofb, zb := live("gpipe"), live("1f1b"), live("zb1p")
		for s := range c.k {
			require.Equal(t, c.m, gpipe[s], "gpipe K=%d M=%d stage %d", c.k, c.m, s)
			require.Equal(t, min(c.m, c.k-s), ofb[s], "1f1b K=%d M=%d stage %d", c.k, c.m, s)
			require.Equal(t, untilW(t, c.k, c.m)[s], zb[s], "zb1p K=%d M=%d stage %d: activations live from F to W", c.k, c.m, s)
		}
	}
	kept := func(checkpoint string) map[int]int64 {
		src := strings.Replace(uniformPipe(4, 4, 8, "1f1b"), "train {", checkpoint+"def layer(h, W) {\n    return tanh(tanh(h @ W))\n}\ntrain {", 1)
		src = regexp.MustCompile(`h = tanh\(h @ (W\d)\)`).ReplaceAllString(src, "h = layer(h, $1)")
		_, devs := runPipe(t, compile(t, src))
		out := map[int]int64{}
		for _, d := range devs {
			for s, n := range d.Pipe.PeakLive {
				require.Equal(t, min(8, 4-s), n)
				out[s] = d.Pipe.PeakKept[s]
			}
		}
		return out
	}
	remat, full := kept("checkpoint "), kept("")
	const block = 2 * 8 * 4  // one micro-batch's [2, 8] f32 activation
	for s := 1; s < 3; s++ { // stage 0's input is the batch; stage 3 also keeps the loss's
		require.Equal(t, int64(min(8, 4-s)*2*block), remat[s], "stage %d keeps its input and output per micro-batch", s)
		require.Equal(t, int64(min(8, 4-s)*3*block), full[s], "stage %d also keeps the inner tanh", s)
	}
}

// A ring all-reduce over p devices shows on the timeline as its p−1
// reduce-scatter steps and p−1 all-gather steps, each sending 1/p of the
// tensor, inside the collective's event — in f32, and in bf16, whose
// reduce-scatter exchanges chunks directly to round once.
func TestTimelineShowsRingSteps(t *testing.T) {
	for _, dt := range []struct {
		name  string
		bytes int64
	}{{"f32", 4}, {"bf16", 2}} {
		p := compile(t, fmt.Sprintf(`mesh M = [tp=4]
input x : %[1]s[8, 16] {S(1)} = normal(0, 1)
param W : %[1]s[16, 4] {S(0)} = normal(0, 1)
y = x @ W
output y {B}
`, dt.name))
		l, err := NewLocal(context.Background(), p.Exec, Options{})
		require.NoError(t, err)
		res, err := l.Run(context.Background(), nil)
		require.NoError(t, err)
		for _, d := range res.Devices {
			var rs, ag int
			var coll Event
			for _, e := range d.Events {
				if e.Kind == "comm" {
					coll = e
				}
			}
			for _, e := range d.Events {
				if e.Kind != "ring" {
					continue
				}
				require.Equal(t, 8*4*dt.bytes/4, e.Bytes, "%s: each step sends a quarter of the [8, 4] sum", dt.name)
				require.True(t, e.Start >= coll.Start && e.Start+e.Dur <= coll.Start+coll.Dur, "%s inside the all-reduce", e.Name)
				switch {
				case strings.HasPrefix(e.Name, "reduce_scatter"):
					rs++
				case strings.HasPrefix(e.Name, "all_gather"):
					ag++
				}
			}
			require.Equal(t, 3, rs, "%s device %d", dt.name, d.Device)
			require.Equal(t, 3, ag, "%s device %d", dt.name, d.Device)
		}
	}
}

// A global reduction before the optimizer step (clipping's norm) runs
// after every rank's last action: it leaves a zero-bubble schedule's
// actions where they were, and costs the step's end at most two messages
// (each stage's share of the norm to the last stage, the factor back),
// measured with a link of one unit per message.
func TestGlobalNormCostOnZeroBubble(t *testing.T) {
	const link = time.Millisecond
	for _, schedule := range []string{"zb1p", "zbv"} {
		v := 1
		if schedule == "zbv" {
			v = 2
		}
		src := uniformPipe(4, 4*v, 8, schedule)
		run := func(src string) ([]pipeline.Event, time.Duration) {
			p := compile(t, src)
			clock := unitClock()
			clock.Link = func(int64) time.Duration { return link }
			opts := Options{Clock: clock}
			l, err := NewLocal(context.Background(), p.Exec, opts)
			require.NoError(t, err)
			res, err := TrainOn(context.Background(), l, p, opts, TrainConfig{})
			require.NoError(t, err)
			end := time.Duration(0)
			for _, d := range res.Last.Devices {
				end = max(end, d.Pipe.End)
			}
			return PipelineEvents(p.Exec, res.Last.Devices), end
		}
		plainEvents, plainEnd := run(src)
		clipEvents, clipEnd := run(strings.Replace(src, "steps = 1", "steps = 1\n    clip = 0.5", 1))
		require.Equal(t, plainEvents, clipEvents, "%s: the actions do not move", schedule)
		extra := clipEnd - plainEnd
		require.Positive(t, extra, "%s: the norm's messages cost something", schedule)
		require.LessOrEqual(t, extra, 2*link, "%s: at most two messages", schedule)
		t.Logf("%s: clipping's global norm ends the step %v later (links of %v)", schedule, extra, link)
	}
}

// untilW counts, from the ZB-H1 schedule's action order alone, the most
// micro-batches each stage holds between their F and their W.
func untilW(t *testing.T, k, m int) []int {
	s, err := pipeline.Generate("zb1p", k, m, 0)
	require.NoError(t, err)
	peak := make([]int, s.Stages)
	for _, acts := range s.Actions {
		open := map[int]int{}
		for _, a := range acts {
			switch a.Kind {
			case pipeline.F:
				open[a.Stage]++
			case pipeline.W:
				open[a.Stage]--
			}
			peak[a.Stage] = max(peak[a.Stage], open[a.Stage])
		}
	}
	return peak
}
