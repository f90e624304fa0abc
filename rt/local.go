package rt

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/plan"
)

// Local is the in-process launcher: every rank of a plan is a goroutine of
// this process with its own Worker, over the in-process ring collectives.
// Workers, their groups and the transport are made once and serve every
// execution, so a training run pays for them once, not once per step.
type Local struct {
	Plan    *plan.Plan
	Workers []*Worker
	stall   func(rank int) bool
}

// NewLocal makes the workers of every rank of p.
func NewLocal(ctx context.Context, p *plan.Plan, opts Options) (*Local, error) {
	if opts.Backend == nil {
		opts.Backend = &CPU{BLAS: DefaultBLAS()}
	}
	n := p.Mesh.Size()
	comms := NewInProc(n)
	l := &Local{Plan: p, Workers: make([]*Worker, n), stall: opts.stall}
	for r := range l.Workers {
		w, err := NewWorker(ctx, p, r, opts.Backend, comms[r], opts)
		if err != nil {
			return nil, err
		}
		l.Workers[r] = w
	}
	return l, nil
}

// Exec runs every rank's program once; feed, if not nil, gives each rank
// its Feed. When a rank fails the others are cancelled, and the first
// real failure (not a cancellation it caused) is returned.
func (l *Local) Exec(ctx context.Context, feed func(rank int) Feed) ([]*RankResult, time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(l.Workers)
	out := make([]*RankResult, n)
	errs := make([]error, n)
	start := time.Now()
	var wg sync.WaitGroup
	for r, w := range l.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l.stall != nil && l.stall(r) {
				<-ctx.Done()
				errs[r] = ctx.Err()
				return
			}
			var f Feed
			if feed != nil {
				f = feed(r)
			}
			res, err := w.Run(ctx, f, start)
			if err != nil {
				errs[r] = err
				cancel()
				return
			}
			out[r] = res
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err := firstError(errs); err != nil {
		return nil, wall, err
	}
	return out, wall, nil
}

// Run executes once and assembles every output on the host.
func (l *Local) Run(ctx context.Context, feed func(rank int) Feed) (*Result, error) {
	rs, wall, err := l.Exec(ctx, feed)
	if err != nil {
		return nil, err
	}
	return l.collect(rs, wall)
}

// collect copies every rank's outputs and carried blocks to the host and
// assembles the logical outputs.
func (l *Local) collect(rs []*RankResult, wall time.Duration) (*Result, error) {
	n := len(rs)
	res := &Result{Wall: wall, Devices: make([]DeviceStats, n), Carry: make([][]*Tensor, n)}
	for r, rr := range rs {
		res.Devices[r] = rr.Stats
		for _, b := range rr.Carry {
			t, err := l.Workers[r].Backend.CopyOut(b)
			if err != nil {
				return nil, err
			}
			res.Carry[r] = append(res.Carry[r], t)
		}
	}
	for i, o := range l.Plan.Outputs {
		parts := make([]*Tensor, n)
		for r := range parts {
			t, err := l.Workers[r].Backend.CopyOut(rs[r].Outputs[i])
			if err != nil {
				return nil, err
			}
			parts[r] = t
		}
		t, err := Assemble(l.Plan.Mesh, lang.Type{DType: o.DType, Shape: o.Shape}, o.Placement, parts)
		if err != nil {
			return nil, fmt.Errorf("output %s: %v", o.Name, err)
		}
		res.Names = append(res.Names, o.Name)
		res.Outputs = append(res.Outputs, t)
	}
	return res, nil
}
