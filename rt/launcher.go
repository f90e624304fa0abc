package rt

import (
	"context"
	"fmt"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
)

// Launcher runs the ranks of a plan that live in this process: all of
// them (Local), or this process's one rank of a run started by mpirun
// (MPI). Runs, the trainer and the CLI are written against it, so they
// work the same under either.
type Launcher interface {
	Plan() *plan.Plan
	// Ranks are the ranks this process runs; Worker returns one of them.
	Ranks() []int
	Worker(rank int) *Worker
	// Lead reports whether this process reports results and writes files
	// (rank 0's process).
	Lead() bool
	// Exec runs this process's ranks once; results are in Ranks() order.
	Exec(ctx context.Context, feed func(rank int) Feed) ([]*RankResult, time.Duration, error)
	// Gather assembles logical tensors from the blocks this process's
	// ranks hold (blocks[i][j]: rank Ranks()[i]'s block of specs[j]). The
	// lead gets them; with everywhere every process does (others get nil).
	Gather(ctx context.Context, specs []plan.Tensor, blocks [][]Buffer, everywhere bool) ([]*Tensor, error)
	// GatherStats collects every rank's statistics at the lead.
	GatherStats(ctx context.Context, stats []DeviceStats) ([]DeviceStats, error)
}

// RunOn executes a plan once under a launcher and assembles its outputs
// (at the lead; with everywhere at every process).
func RunOn(ctx context.Context, l Launcher, feed func(rank int) Feed, everywhere bool) (*Result, error) {
	rs, wall, err := l.Exec(ctx, feed)
	if err != nil {
		return nil, err
	}
	return collect(ctx, l, rs, wall, everywhere)
}

// collect assembles a run's outputs and statistics.
func collect(ctx context.Context, l Launcher, rs []*RankResult, wall time.Duration, everywhere bool) (*Result, error) {
	p := l.Plan()
	blocks := make([][]Buffer, len(rs))
	stats := make([]DeviceStats, len(rs))
	for i, rr := range rs {
		blocks[i] = rr.Outputs
		stats[i] = rr.Stats
	}
	outs, err := l.Gather(ctx, p.Outputs, blocks, everywhere)
	if err != nil {
		return nil, err
	}
	devs, err := l.GatherStats(ctx, stats)
	if err != nil {
		return nil, err
	}
	res := &Result{Wall: wall, Devices: devs, Outputs: outs}
	for _, o := range p.Outputs {
		res.Names = append(res.Names, o.Name)
	}
	return res, nil
}

// assembleHost joins the host copies of a tensor's blocks (parts, by
// rank: those BlockReaders lists).
func assembleHost(p *plan.Plan, spec *plan.Tensor, parts []*Tensor) (*Tensor, error) {
	m, pl, rankOf := tensorView(p, spec)
	view := make([]*Tensor, m.Size())
	for d := range view {
		view[d] = parts[rankOf(d)]
	}
	t, err := Assemble(m, ir.Type{DType: spec.DType, Shape: spec.Shape}, pl, view)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", spec.Name, err)
	}
	return t, nil
}
