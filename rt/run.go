// Package rt runs executable plans (package plan). A Worker runs ONE
// rank's program against two interfaces: a Backend (device memory and
// kernels; the CPU backend here is the definition of every op) and a Comm
// (tagged point-to-point messages and the groups collectives run on,
// created once at start-up). The worker knows nothing of the language:
// its program names kernels, boxing steps, groups and peers.
//
// Source instructions build the rank's block of an input or param (or take
// what the caller feeds: the trainer's carried state); compute instructions
// launch a kernel on local blocks; local steps slice or make a value
// partial; collectives run on the rank's group; send/recv move a tensor to
// or from a peer with a tag. After each instruction the result's shape is
// checked against the plan, the slots whose last use it was are freed, and
// the memory accounting and the timeline are updated. Every communication
// waits at most Options.Timeout, and a fault names the rank, its
// coordinate, the op and the source line.
//
// A plan with a host tier (offload) gives each worker a second backend,
// a CPU of its own for the rank's host memory: instructions marked Host
// run there, offload and fetch copy a buffer from one backend into a new
// buffer of the other, and each tier's bytes are counted apart, with the
// bytes each copy moved on the timeline.
//
// On a pipelined plan each rank runs its own program (its stages' actions
// in the schedule's order); the worker records each action's span and the
// activations each stage keeps alive, and with Options.Clock a SimClock
// replaces wall time so schedules' bubbles can be read off exactly.
//
// The timeline is the host's clock around each instruction, except with
// Options.DeviceTime on a backend that times its own queue (DeviceClock,
// device_time.go: a GPU's events), where each instruction's event is the
// span the device spent on its work.
//
// Launchers: Local runs every rank as a goroutine of this process over the
// in-process ring collectives (the default); package rt/mpi and the CLI run
// one rank per process under mpirun.
package rt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lower"
)

// Options configure a run.
type Options struct {
	Seed    uint64
	Timeout time.Duration // per collective; 0 = 60s
	Backend Backend       // nil = CPU with DefaultBLAS
	// Backends, if set, is each rank's backend on the local launcher
	// (ranks on several GPUs of this process), in place of Backend: a
	// group whose members share one device runs its collectives there,
	// others through host copies.
	Backends []Backend
	// Hook, if set, is called before every instruction a rank runs: the
	// multi-process tests inject failures with it. It must not wait for
	// another rank: the local launcher may run several ranks on one
	// goroutine (shifts, rt/shift.go), and only waits at collectives
	// hand it over.
	Hook func(rank, instr int)
	// stall makes a device wait for cancellation before running (tests of
	// the collective timeout).
	stall func(dev int) bool
	// files shares loaded .npy files between runs (the trainer's steps).
	files *npyCache
	// Clock, if set, replaces wall time with a simulated clock (the
	// in-process launcher only): see SimClock.
	Clock *SimClock
	// DeviceTime times the timeline on the device where the backend can
	// (a DeviceClock: the CUDA backend's events), not by the host around
	// each launch; it costs two event records per instruction and a wait
	// per execution, so only a command that shows the timeline asks.
	DeviceTime bool
	// Comm, if set, makes the communicator a process's rank runs on from
	// the one between processes (NewProcess): the CUDA backend's NCCL
	// communicator, whose collectives run on the GPU.
	Comm func(ctx context.Context, host Comm) (Comm, error)
}

// Event is one entry of a device's timeline.
type Event struct {
	Name  string
	Kind  string // "source", "compute", "comm", "local"
	Start time.Duration
	Dur   time.Duration
	Bytes int64 // bytes this device sent
	// Copied is, for an offload or fetch, the bytes copied between the
	// device's memory and its host's (ZeRO-Offload's host tier).
	Copied int64
	Where  string
	// OnDevice says Start and Dur are the device's: the span between the
	// events its stopwatch recorded around the instruction (DeviceTime).
	OnDevice bool
}

// DeviceStats is what one device did.
type DeviceStats struct {
	Device    int
	Peak      int64 // bytes
	Final     int64 // bytes held at the end (the outputs)
	BytesSent int64
	// Held is, in a training run, the bytes of parameters and optimizer
	// states the device keeps from one step to the next.
	Held int64
	// HostPeak, HostFinal and HostHeld are Peak, Final and Held for the
	// rank's host tier (offload; 0 otherwise); ToHost and ToDevice are the
	// bytes its offload and fetch instructions copied.
	HostPeak, HostFinal, HostHeld int64
	ToHost, ToDevice              int64
	Events                        []Event
	// Pipe is, on a pipelined plan, the rank's actions and activations.
	Pipe *PipeStats
}

// Result is a finished run.
type Result struct {
	Names   []string
	Outputs []*Tensor // logical tensors, in Plan.Outputs order
	Devices []DeviceStats
	Wall    time.Duration
}

// Output returns the named output.
func (r *Result) Output(name string) *Tensor {
	for i, n := range r.Names {
		if n == name {
			return r.Outputs[i]
		}
	}
	return nil
}

// RunError is a fault on one device.
type RunError struct {
	Device int
	Coord  string
	Op     string
	Pos    ir.Pos
	Where  string // Pos and the call chain that led there, when known
	Err    error
}

func (e *RunError) Error() string {
	where := e.Where
	if where == "" {
		where = ir.FormatPos(e.Pos)
	}
	return fmt.Sprintf("%s: device %d %s: %s: %v", where, e.Device, e.Coord, e.Op, e.Err)
}

func (e *RunError) Unwrap() error { return e.Err }

// Run executes a plan once on in-process ranks (the local launcher) and
// assembles every output on the host.
func Run(ctx context.Context, p *lower.Plan, opts Options) (*Result, error) {
	l, err := NewLocal(ctx, p.Exec, opts)
	if err != nil {
		return nil, err
	}
	return l.Run(ctx, nil)
}

// firstError prefers a real failure over the cancellations it caused.
func firstError(errs []error) error {
	var cancelled error
	for _, e := range errs {
		if e == nil {
			continue
		}
		if errors.Is(e, context.Canceled) {
			if cancelled == nil {
				cancelled = e
			}
			continue
		}
		return e
	}
	return cancelled
}

var negInf = math.Inf(-1)

func fillNegInf(t *Tensor) {
	switch d := t.Data.(type) {
	case []uint16:
		neg := uint16(0xff80) // bf16 -inf
		if t.DType == ir.F16 {
			neg = 0xfc00
		}
		for i := range d {
			d[i] = neg
		}
	case []float32:
		for i := range d {
			d[i] = float32(negInf)
		}
	case []float64:
		for i := range d {
			d[i] = negInf
		}
	}
}
