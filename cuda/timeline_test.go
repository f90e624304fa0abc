package cuda_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/cuda"
	"github.com/meshrun/meshrun/internal/cli"
	"github.com/meshrun/meshrun/rt"
)

// keptSpans is the CUDA backend with each rank's stopwatch wrapped to keep
// what it measured, for comparison with the timeline the worker laid out.
type keptSpans struct {
	*cuda.Backend
	mu      sync.Mutex
	spans   map[int][]rt.DeviceSpan
	watches map[int]*keptWatch
}

type keptWatch struct {
	rt.Stopwatch
	k         *keptSpans
	rank      int
	exclusive []bool // per span of the execution
}

func (k *keptSpans) NewStopwatch(rank int) (rt.Stopwatch, error) {
	sw, err := k.Backend.NewStopwatch(rank)
	w := &keptWatch{Stopwatch: sw, k: k, rank: rank}
	k.mu.Lock()
	k.watches[rank] = w
	k.mu.Unlock()
	return w, err
}

func (w *keptWatch) Begin() (time.Time, error) {
	w.exclusive = w.exclusive[:0]
	return w.Stopwatch.Begin()
}

func (w *keptWatch) Start(exclusive bool) error {
	w.exclusive = append(w.exclusive, exclusive)
	return w.Stopwatch.Start(exclusive)
}

func (w *keptWatch) Spans() ([]rt.DeviceSpan, error) {
	s, err := w.Stopwatch.Spans()
	w.k.mu.Lock()
	w.k.spans[w.rank] = s
	w.k.mu.Unlock()
	return s, err
}

// checkInstrEvents checks a rank's instruction events (ring steps aside):
// in order and not overlapping, and the step's span is at least the sum
// of its compute time.
func checkInstrEvents(t *testing.T, dev int, evs []rt.Event) (compute, span time.Duration) {
	t.Helper()
	for i, e := range evs {
		require.GreaterOrEqual(t, e.Dur, time.Duration(0), "device %d: %s", dev, e.Name)
		if i > 0 {
			p := evs[i-1]
			require.LessOrEqual(t, p.Start+p.Dur, e.Start, "device %d: %s starts after %s ended", dev, e.Name, p.Name)
		}
		if e.Kind == "compute" {
			compute += e.Dur
		}
	}
	span = evs[len(evs)-1].Start + evs[len(evs)-1].Dur - evs[0].Start
	require.LessOrEqual(t, compute, span, "device %d: compute fits in the step", dev)
	return compute, span
}

// TestBackendDeviceTimeline: with DeviceTime, a CUDA run's timeline has
// the CPU run's events (an event per instruction, the same names and
// kinds), each the span its stopwatch measured on the stream, in order
// and not overlapping per rank; every rank of the mesh shares the GPU.
func TestBackendDeviceTimeline(t *testing.T) {
	for _, ex := range []string{"megatron_mlp", "dp_tp_block"} {
		t.Run(ex, func(t *testing.T) {
			var notes bytes.Buffer
			be := &keptSpans{Backend: newBackend(t, &notes), spans: map[int][]rt.DeviceSpan{}, watches: map[int]*keptWatch{}}
			file := "../examples/" + ex + ".mesh"
			src, err := os.ReadFile(file)
			require.NoError(t, err)
			p := compile(t, file, string(src), "", false)
			cpu, err := rt.Run(context.Background(), p, rt.Options{DeviceTime: true})
			require.NoError(t, err)
			l, err := rt.NewLocal(context.Background(), p.Exec, rt.Options{Backend: be, DeviceTime: true})
			require.NoError(t, err)
			for round := range 2 { // the second: stopwatches and events reused
				got, err := l.Run(context.Background(), nil)
				require.NoError(t, err)
				for r, d := range got.Devices {
					var evs, want []rt.Event
					for _, e := range d.Events {
						require.True(t, e.OnDevice, "device %d: %s", r, e.Name)
						if e.Kind != "ring" {
							evs = append(evs, e)
						}
					}
					for _, e := range cpu.Devices[r].Events {
						require.False(t, e.OnDevice, "the CPU backend keeps the host's clock")
						if e.Kind != "ring" {
							want = append(want, e)
						}
					}
					require.Len(t, evs, len(want), "device %d: the CPU run's events", r)
					spans := be.spans[r]
					require.Len(t, spans, len(evs))
					for i, e := range evs {
						require.Equal(t, want[i].Name, e.Name)
						require.Equal(t, want[i].Kind, e.Kind)
						require.Equal(t, spans[i].End-spans[i].Start, e.Dur, "device %d: %s lasts its span", r, e.Name)
						require.Equal(t, e.Start-evs[0].Start, spans[i].Start-spans[0].Start, "device %d: %s at its span", r, e.Name)
					}
					compute, span := checkInstrEvents(t, r, evs)
					if round == 1 && r == 0 {
						t.Logf("%s device 0: GPU compute %v of a %v step", ex, compute, span)
					}
				}
				checkRanksTakeTurns(t, be)
			}
		})
	}
}

// checkRanksTakeTurns checks, on the device's clock, that no two ranks'
// exclusive spans overlap: one ends before the other starts.
func checkRanksTakeTurns(t *testing.T, be *keptSpans) {
	t.Helper()
	type span struct {
		rank       int
		start, end uintptr
	}
	var all []span
	for r, w := range be.watches {
		evs := cuda.SpanEvents(w.Stopwatch)
		require.Len(t, evs, 1+2*len(w.exclusive))
		for i, ex := range w.exclusive {
			if ex {
				all = append(all, span{r, evs[1+2*i], evs[2+2*i]})
			}
		}
	}
	gap := func(a, b uintptr) time.Duration {
		d, err := cuda.DeviceGap(be.Backend, a, b)
		require.NoError(t, err)
		return d
	}
	for i, a := range all {
		for _, b := range all[i+1:] {
			if a.rank != b.rank {
				require.True(t, gap(a.end, b.start) >= 0 || gap(b.end, a.start) >= 0,
					"exclusive spans of ranks %d and %d overlap on the GPU", a.rank, b.rank)
			}
		}
	}
}

// TestCLITraceOnCUDA: meshrun trace --backend cuda and meshrun run
// --trace --backend cuda write Chrome trace JSON whose tracks are the
// ranks' GPU time: every instruction's event says "clock": "device", and
// per track the instruction events are in order and do not overlap.
func TestCLITraceOnCUDA(t *testing.T) {
	cuda.UseDriver(t)
	dir := t.TempDir()
	for _, cmd := range []string{"trace", "run"} {
		out := filepath.Join(dir, cmd+".json")
		args := []string{cmd, "../examples/megatron_mlp.mesh", "--backend", "cuda", "-o", out}
		if cmd == "run" {
			args[4] = "--trace"
		}
		var stdout, stderr bytes.Buffer
		code := cli.Main(args, strings.NewReader(""), &stdout, &stderr)
		require.Equal(t, cli.ExitOK, code, "%s%s", stdout.String(), stderr.String())
		require.Contains(t, stderr.String(), "meshrun: kernels run on cuda (")
		if cmd == "trace" {
			require.Contains(t, stdout.String(), "(GPU time: each instruction spans the CUDA events around its work)")
		}
		checkTraceFile(t, out)
	}
	// a pipeline's Gantt chart on the wall clock is drawn in GPU time
	var stdout, stderr bytes.Buffer
	code := cli.Main([]string{"trace", "../examples/train/pipeline_schedules.mesh", "--backend", "cuda", "--clock", "wall"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, cli.ExitOK, code, "%s%s", stdout.String(), stderr.String())
	require.Contains(t, stdout.String(), "bubble")
	require.Contains(t, stdout.String(), "the timeline is GPU time: each instruction spans the CUDA events around its work")
}

// checkTraceFile checks a Chrome trace of the Megatron MLP's 8 ranks in
// GPU time.
func checkTraceFile(t *testing.T, out string) {
	t.Helper()
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var doc struct {
		TraceEvents []struct {
			Name, Cat, Ph string
			Ts, Dur       float64
			Tid           int
			Args          map[string]any
		}
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	tracks := map[int][]rt.Event{}
	names := map[int]string{}
	for _, e := range doc.TraceEvents {
		switch {
		case e.Ph == "M":
			names[e.Tid], _ = e.Args["name"].(string)
		case e.Cat != "ring":
			require.Equal(t, "device", e.Args["clock"], "%s on device %d", e.Name, e.Tid)
			us := func(v float64) time.Duration { return time.Duration(v * 1e3) }
			tracks[e.Tid] = append(tracks[e.Tid], rt.Event{Name: e.Name, Kind: e.Cat, Start: us(e.Ts), Dur: us(e.Dur)})
		}
	}
	require.Len(t, tracks, 8, "[dp=2, tp=4]: a track per rank")
	for dev, evs := range tracks {
		require.Contains(t, names[dev], "(device time)")
		sort.SliceStable(evs, func(i, j int) bool { return evs[i].Start < evs[j].Start })
		// the JSON's microseconds are rounded: allow a nanosecond
		for i := 1; i < len(evs); i++ {
			p := evs[i-1]
			require.LessOrEqual(t, p.Start+p.Dur, evs[i].Start+time.Nanosecond, "device %d: %s after %s", dev, evs[i].Name, p.Name)
		}
	}
}
