package rt

// Device time on the timeline. A GPU backend's Launch returns when the
// kernel is queued, so host time around an instruction is its launch, and
// the work piles up in the execution's Sync. A backend that can time its
// own queue (CUDA events) implements DeviceClock; with Options.DeviceTime
// the worker then brackets every instruction with its stopwatch (an event
// before the instruction's work is issued, one after), and at the end of
// the execution, after Sync, lays the rank's timeline out in the device's
// time: each instruction's event spans its pair of device events, placed
// on the run's clock through one mark the stopwatch took, waited for, at
// the execution's start. The CPU backend implements none of this: its
// timeline is the host's, as before.

import (
	"fmt"
	"time"

	"github.com/meshrun/meshrun/plan"
)

// DeviceClock is implemented by a backend whose work runs after Launch
// returns, in order, on a queue it can time (a GPU's stream).
type DeviceClock interface {
	// NewStopwatch returns the stopwatch of one rank's worker (made once
	// per worker, used by one goroutine at a time).
	NewStopwatch(rank int) (Stopwatch, error)
}

// Stopwatch times one rank's instructions on the device's queue.
type Stopwatch interface {
	// Begin starts an execution: it marks the queue, waits for the mark
	// and returns the host time just after (the origin of Spans; it is
	// late by the wait's wake-up).
	Begin() (time.Time, error)
	// Start marks the queue before an instruction's work is issued and
	// Stop after. With exclusive, no other stopwatch of the device starts
	// an exclusive span until Stop: ranks sharing one queue then never
	// have their kernels inside each other's spans. Start holds nothing
	// when it fails; Stop always lets go.
	Start(exclusive bool) error
	Stop() error
	// Spans returns, once the queue has finished, each Start–Stop span
	// since Begin in order, as offsets from Begin's mark.
	Spans() ([]DeviceSpan, error)
}

// DeviceSpan is when the device ran an instruction's work: from when its
// queue reached the instruction's first mark (everything issued before it
// done) to when it passed the last, as offsets from Begin's mark.
type DeviceSpan struct{ Start, End time.Duration }

// stopwatch returns the worker's stopwatch when the run asked for device
// time and the backend keeps one (never on a simulated clock).
func stopwatch(be Backend, rank int, opts Options) (Stopwatch, error) {
	dc, ok := be.(DeviceClock)
	if !ok || !opts.DeviceTime || opts.Clock != nil {
		return nil, nil
	}
	return dc.NewStopwatch(rank)
}

// exclusive says whether an instruction's span may hold off the other
// ranks of the device: only those that never wait for another rank (a
// collective, send or receive waits for its peers, which may be waiting
// to start a span of their own).
func exclusive(k plan.Kind) bool {
	return k == plan.Compute || k == plan.Local || k == plan.Offload || k == plan.Fetch
}

// beginDevice starts the execution's device timing: the offset of the
// stopwatch's origin on the run's clock.
func (x *execution) beginDevice() error {
	t, err := x.w.watch.Begin()
	if err != nil {
		return fmt.Errorf("rank %d: device timing: %w", x.w.Prog.Rank, err)
	}
	x.devOrigin = t.Sub(x.start)
	return nil
}

// layDevice replaces the host times of the execution's timeline with the
// device's: every instruction's event becomes its DeviceSpan (OnDevice),
// the ring steps drawn inside a collective are moved into its new span in
// proportion, and a pipeline's actions run from their first
// instruction's device start to their mark's device end. It returns the
// rank's end: end, or the last device time if later (the origin's
// wake-up can put that past the host's).
func (x *execution) layDevice(end time.Duration) (time.Duration, error) {
	spans, err := x.w.watch.Spans()
	if err != nil {
		return 0, fmt.Errorf("rank %d: device timing: %w", x.w.Prog.Rank, err)
	}
	n := len(x.w.Prog.Prog.Instrs)
	if len(spans) != n {
		return 0, fmt.Errorf("rank %d: device timing: %d spans for %d instructions", x.w.Prog.Rank, len(spans), n)
	}
	k, rings := 0, 0 // the next instruction, and where its ring steps begin
	for j := range x.events {
		e := &x.events[j]
		if e.Kind == "ring" {
			continue
		}
		s, t := x.devOrigin+spans[k].Start, x.devOrigin+spans[k].End
		for r := rings; r < j; r++ {
			x.events[r].Start, x.events[r].Dur = within(x.events[r], *e, s, t)
			x.events[r].OnDevice = true
		}
		e.Start, e.Dur, e.OnDevice = s, t-s, true
		end = max(end, t)
		k, rings = k+1, j+1
	}
	if x.pipe != nil {
		for a, at := range x.pipe.at {
			x.pipe.spans[a].Start = x.devOrigin + spans[at[0]].Start
			x.pipe.spans[a].End = x.devOrigin + spans[at[1]].End
		}
	}
	return end, nil
}

// within maps a ring step r drawn inside its collective c's host span
// into the collective's device span [s, t], in proportion.
func within(r, c Event, s, t time.Duration) (time.Duration, time.Duration) {
	if c.Dur <= 0 {
		return s, 0
	}
	scale := float64(t-s) / float64(c.Dur)
	from := s + time.Duration(float64(max(r.Start-c.Start, 0))*scale)
	to := s + time.Duration(float64(min(r.Start+r.Dur-c.Start, c.Dur))*scale)
	return from, max(to-from, 0)
}
