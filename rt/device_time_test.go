package rt

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/plan"
)

// clockedCPU is the CPU backend with a DeviceClock whose stopwatches
// report made-up spans (span k of an execution: [10k+3, 10k+3+(k%4+1)]
// µs after the mark, some longer than the host took): what the worker
// lays on the timeline must be exactly those, wherever the host's clock
// put the instruction. It keeps each rank's spans and flags.
type clockedCPU struct {
	*CPU
	mu      sync.Mutex
	watches map[int]*fakeWatch
	failAt  int // Stop of this span (1-based) fails; 0: none
}

type fakeWatch struct {
	be         *clockedCPU
	begun      bool
	open       bool
	spans      []DeviceSpan
	exclusives []bool
}

func newClockedCPU() *clockedCPU {
	return &clockedCPU{CPU: &CPU{BLAS: DefaultBLAS()}, watches: map[int]*fakeWatch{}}
}

func (c *clockedCPU) NewStopwatch(rank int) (Stopwatch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &fakeWatch{be: c}
	c.watches[rank] = w
	return w, nil
}

func (w *fakeWatch) Begin() (time.Time, error) {
	w.begun, w.spans, w.exclusives = true, nil, nil
	return time.Now(), nil
}

func (w *fakeWatch) Start(exclusive bool) error {
	if !w.begun || w.open {
		return errors.New("start outside an execution or inside a span")
	}
	w.open = true
	w.exclusives = append(w.exclusives, exclusive)
	return nil
}

func (w *fakeWatch) Stop() error {
	if !w.open {
		return errors.New("stop without start")
	}
	w.open = false
	k := len(w.spans)
	start := time.Duration(10*k+3) * time.Microsecond
	w.spans = append(w.spans, DeviceSpan{Start: start, End: start + time.Duration(k%4+1)*time.Microsecond})
	if w.be.failAt == len(w.spans) {
		return errors.New("the device's clock broke")
	}
	return nil
}

func (w *fakeWatch) Spans() ([]DeviceSpan, error) { return w.spans, nil }

// checkDeviceTimeline checks one rank's timeline against its stopwatch:
// an instruction event per span, each at its span (relative to the
// first: the origin is the host's), ring steps inside their collective,
// and which spans were exclusive.
func checkDeviceTimeline(t *testing.T, prog *plan.Program, d DeviceStats, w *fakeWatch) {
	t.Helper()
	var instrs []Event
	var ring []Event
	for _, e := range d.Events {
		require.True(t, e.OnDevice, "device %d: %s is timed on the device", d.Device, e.Name)
		if e.Kind == "ring" {
			ring = append(ring, e)
			continue
		}
		for _, r := range ring {
			require.GreaterOrEqual(t, r.Start, e.Start, "device %d: a ring step of %s inside it", d.Device, e.Name)
			require.LessOrEqual(t, r.Start+r.Dur, e.Start+e.Dur, "device %d: a ring step of %s inside it", d.Device, e.Name)
		}
		ring = nil
		instrs = append(instrs, e)
	}
	require.Len(t, instrs, len(prog.Instrs), "device %d: an event per instruction", d.Device)
	require.Len(t, w.spans, len(prog.Instrs), "device %d: a span per instruction", d.Device)
	origin := instrs[0].Start - w.spans[0].Start
	for k, e := range instrs {
		s := w.spans[k]
		require.Equal(t, s.End-s.Start, e.Dur, "device %d: %s lasts as its span", d.Device, e.Name)
		require.Equal(t, origin+s.Start, e.Start, "device %d: %s starts at its span", d.Device, e.Name)
		in := &prog.Instrs[k]
		want := in.Kind == plan.Compute || in.Kind == plan.Local || in.Kind == plan.Offload || in.Kind == plan.Fetch
		require.Equal(t, want, w.exclusives[k], "device %d: %s (%s) exclusive", d.Device, e.Name, in.Kind)
	}
}

// With DeviceTime on a backend with a DeviceClock, every instruction's
// event is its device span; without DeviceTime, or on the CPU backend,
// the timeline is the host's.
func TestDeviceTimeLaysTheTimelineOnTheDevice(t *testing.T) {
	p := compile(t, rowParallelMatmul(4))
	be := newClockedCPU()
	l, err := NewLocal(context.Background(), p.Exec, Options{Backend: be, DeviceTime: true})
	require.NoError(t, err)
	for range 2 { // the second execution begins the stopwatches again
		res, err := l.Run(context.Background(), nil)
		require.NoError(t, err)
		for _, d := range res.Devices {
			checkDeviceTimeline(t, p.Exec.ProgramOf(d.Device), d, be.watches[d.Device])
		}
	}
	for _, opts := range []Options{{Backend: newClockedCPU()}, {DeviceTime: true}} {
		res, err := Run(context.Background(), p, opts)
		require.NoError(t, err)
		for _, d := range res.Devices {
			for _, e := range d.Events {
				require.False(t, e.OnDevice, "%s: the host's clock", e.Name)
			}
		}
		if b, ok := opts.Backend.(*clockedCPU); ok {
			require.Empty(t, b.watches, "no stopwatch without DeviceTime")
		}
	}
}

// A pipeline's actions run from their first instruction's device start
// to their mark's device end, and the rank's end is no earlier than its
// last span.
func TestDeviceTimeMovesPipelineActions(t *testing.T) {
	p := compile(t, pipe3D("1f1b", "", false))
	be := newClockedCPU()
	opts := Options{Backend: be, DeviceTime: true}
	l, err := NewLocal(context.Background(), p.Exec, opts)
	require.NoError(t, err)
	r, err := TrainOn(context.Background(), l, p, opts, TrainConfig{Start: p.Graph.Train.Steps - 1})
	require.NoError(t, err)
	for _, d := range r.Last.Devices {
		prog := p.Exec.ProgramOf(d.Device)
		checkDeviceTimeline(t, prog, d, be.watches[d.Device])
		require.NotNil(t, d.Pipe)
		require.NotEmpty(t, d.Pipe.Actions)
		starts, ends := map[time.Duration]bool{}, map[time.Duration]bool{}
		var last time.Duration
		for _, e := range d.Events {
			if e.Kind != "ring" {
				starts[e.Start], ends[e.Start+e.Dur] = true, true
				last = max(last, e.Start+e.Dur)
			}
		}
		for _, a := range d.Pipe.Actions {
			require.True(t, starts[a.Start], "device %d: %v starts where an instruction does", d.Device, a.Act)
			require.True(t, ends[a.End], "device %d: %v ends where its mark does", d.Device, a.Act)
			require.Less(t, a.Start, a.End, "device %d: %v", d.Device, a.Act)
		}
		require.GreaterOrEqual(t, d.Pipe.End, last, "device %d: the rank ends after its last span", d.Device)
	}
}

// A stopwatch's failure fails the run at the instruction it timed.
func TestDeviceTimeFailureNamesTheInstruction(t *testing.T) {
	p := compile(t, rowParallelMatmul(2))
	be := newClockedCPU()
	be.failAt = 3
	_, err := Run(context.Background(), p, Options{Backend: be, DeviceTime: true})
	var re *RunError
	require.ErrorAs(t, err, &re)
	require.ErrorContains(t, err, "the device's clock broke")
	require.Equal(t, p.Exec.ProgramOf(re.Device).Instrs[2].Pos, re.Pos, "the third instruction's line")
}
