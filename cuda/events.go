package cuda

// GPU time on the timeline (rt.DeviceClock). Launch returns once a kernel
// is queued, so a timeline read from the host clock shows launches, and
// the work piles up in the execution's Sync. A rank's stopwatch instead
// records CUDA events on the device's stream: a mark at the start of an
// execution, which it waits for (its host time is the origin), then an
// event before and after each instruction's work is issued. After the
// execution's Sync every event has passed, and one call into C reads the
// milliseconds between consecutive events; summed from the mark, they
// place each instruction's span on the run's clock. The events are the
// stopwatch's own, made as an execution first needs them and recorded
// again every execution (recording an event overwrites its last record),
// so a step costs two cuEventRecord per instruction and no allocation,
// and no wait but the mark's. Every event the device made is destroyed
// by Close.
//
// The stream is shared by every rank of the process (logical devices on
// one GPU), so their work runs one after another in issue order. An
// exclusive span (a kernel launch, a slice, a copy between tiers: work
// that waits for no other rank) holds the device's bracket lock from its
// first event to its last, so no other rank's exclusive work is issued
// inside it: the ranks' compute spans never overlap on the GPU, they take
// turns. A collective, send or receive waits for its peers and cannot
// hold the lock; its span covers that wait, and whatever the other ranks
// issued meanwhile. A peer's part of a collective (its kernels, comm.go)
// takes the lock only while it launches, so it falls between exclusive
// spans; work issued without the lock (a host copy) can still fall
// inside another rank's exclusive span and lengthen it by that work.

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/meshrun/meshrun/rt"
)

// eventBook is a device's record of the events its stopwatches made
// (destroyed by Close) and the lock of exclusive spans.
type eventBook struct {
	all     []uintptr // guarded by Device.mu
	bracket sync.Mutex
}

// newEvent creates an event with timing on and books it for Close.
func (d *Device) newEvent() (uintptr, error) {
	e, rc := drEventCreate(d.ctx)
	if rc != 0 {
		return 0, check("cuEventCreate", "", rc)
	}
	d.mu.Lock()
	d.events.all = append(d.events.all, e)
	d.mu.Unlock()
	return e, nil
}

// destroyEvents destroys every event the device's stopwatches made (at
// Close, after the stream has finished); the first failure is the error.
func (d *Device) destroyEvents() error {
	d.mu.Lock()
	all := d.events.all
	d.events.all = nil
	d.mu.Unlock()
	var err error
	for _, e := range all {
		if e2 := check("cuEventDestroy", "", drEventDestroy(d.ctx, e)); err == nil {
			err = e2
		}
	}
	return err
}

// stopwatch is rt.Stopwatch on the device's stream for one rank.
type stopwatch struct {
	dev    *Device
	rank   int
	events []uintptr // the mark, then a Start and a Stop per span
	n      int       // recorded this execution
	held   bool      // inside an exclusive span
	begun  bool
}

// NewStopwatch implements rt.DeviceClock.
func (be *Backend) NewStopwatch(rank int) (rt.Stopwatch, error) {
	return &stopwatch{dev: be.dev, rank: rank}, nil
}

// record records the execution's next event on the stream.
func (s *stopwatch) record() error {
	if s.n == len(s.events) {
		e, err := s.dev.newEvent()
		if err != nil {
			return err
		}
		s.events = append(s.events, e)
	}
	if err := check("cuEventRecord", "", drEventRecord(s.dev.ctx, s.events[s.n], s.dev.stream)); err != nil {
		return err
	}
	s.n++
	return nil
}

// Begin implements rt.Stopwatch.
func (s *stopwatch) Begin() (time.Time, error) {
	s.n, s.begun = 0, false
	if err := s.record(); err != nil {
		return time.Time{}, err
	}
	if err := check("cuEventSynchronize", "the execution's mark", drEventSync(s.dev.ctx, s.events[0])); err != nil {
		return time.Time{}, err
	}
	s.begun = true
	return time.Now(), nil
}

// Start implements rt.Stopwatch.
func (s *stopwatch) Start(exclusive bool) error {
	if !s.begun || s.n%2 == 0 {
		return fmt.Errorf("cuda: stopwatch of rank %d: a span started before Begin or inside another", s.rank)
	}
	if exclusive {
		s.dev.events.bracket.Lock()
		s.held = true
	}
	if err := s.record(); err != nil {
		s.release()
		return err
	}
	return nil
}

// Stop implements rt.Stopwatch.
func (s *stopwatch) Stop() error {
	defer s.release()
	if s.n%2 == 1 {
		return fmt.Errorf("cuda: stopwatch of rank %d: a span stopped that did not start", s.rank)
	}
	return s.record()
}

func (s *stopwatch) release() {
	if s.held {
		s.held = false
		s.dev.events.bracket.Unlock()
	}
}

// Spans implements rt.Stopwatch: the milliseconds between consecutive
// events, each rounded to a nanosecond and summed from the mark, so that
// a span's duration is exactly what its own two events measured.
func (s *stopwatch) Spans() ([]rt.DeviceSpan, error) {
	if !s.begun || s.n%2 == 0 {
		return nil, fmt.Errorf("cuda: stopwatch of rank %d: spans read before Begin or inside a span", s.rank)
	}
	ms, rc := drEventChain(s.dev.ctx, s.events[:s.n])
	if err := check("cuEventElapsedTime", fmt.Sprintf("%d events", s.n), rc); err != nil {
		return nil, err
	}
	out := make([]rt.DeviceSpan, 0, s.n/2)
	at := time.Duration(0)
	for i := 0; i+1 < len(ms); i += 2 {
		start := at + nanos(ms[i])
		at = start + nanos(ms[i+1])
		out = append(out, rt.DeviceSpan{Start: start, End: at})
	}
	return out, nil
}

// nanos converts cuEventElapsedTime's milliseconds to a duration.
func nanos(ms float32) time.Duration { return time.Duration(math.Round(float64(ms) * 1e6)) }

var _ rt.DeviceClock = (*Backend)(nil)
