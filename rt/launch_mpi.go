package rt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt/mpi"
	"github.com/meshrun/meshrun/sbp"
)

// gatherTag is the tag of the launcher's own messages (outputs and
// statistics on their way to the lead). MPI guarantees tags up to 32767;
// plans use smaller ones (plan.MaxTag).
const gatherTag = plan.MaxTag + 1

// MPI is the launcher of a run started by mpirun or srun: this process
// runs one rank, its MPI world rank, with the plan every process compiled
// for itself (compilation is deterministic). Outputs and statistics travel
// to rank 0's process, which reports them and writes every file.
type MPI struct {
	plan  *plan.Plan
	comm  Comm // MPIComm, or TCPComm under a rendezvous (NewProcess)
	w     *Worker
	world Group
}

// NewMPI initialises MPI and makes this process's worker and groups.
func NewMPI(ctx context.Context, p *plan.Plan, opts Options) (*MPI, error) {
	c, err := NewMPIComm(ctx)
	if err != nil {
		return nil, err
	}
	if c.Size() != p.Mesh.Size() {
		err := fmt.Errorf("MPI counts %d processes, but the mesh %s has %d devices: start one process per device (mpirun -np %d)",
			c.Size(), p.Mesh, p.Mesh.Size(), p.Mesh.Size())
		if info := mpi.Launcher(); info.Size > 0 && info.Size != c.Size() {
			// the launcher said otherwise: the library is not the launcher's
			path, abi, _ := mpi.Library()
			err = fmt.Errorf("%w; %s started %d, so the loaded MPI (%s, %s) is not the launcher's: see MESHRUN_MPI_LIB", err, info.Launcher, info.Size, abi, path)
		}
		return nil, err
	}
	return NewProcess(ctx, p, c, opts)
}

// NewProcess makes this process's worker and groups over c, a
// communicator between processes (MPI's or the rendezvous's TCPComm),
// which the launcher keeps for its own messages; the worker runs on
// opts.Comm's communicator when set.
func NewProcess(ctx context.Context, p *plan.Plan, c Comm, opts Options) (*MPI, error) {
	if c.Size() != p.Mesh.Size() {
		return nil, fmt.Errorf("%d processes, but the mesh %s has %d devices: start one process per device", c.Size(), p.Mesh, p.Mesh.Size())
	}
	all := make([]int, c.Size())
	for i := range all {
		all[i] = i
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	gctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	world, err := c.NewGroup(gctx, len(p.Groups), all)
	if err != nil {
		return nil, err
	}
	if err := sameRun(gctx, world, p, opts.Seed); err != nil {
		return nil, err
	}
	if mc, ok := c.(*MPIComm); ok && opts.Backend == nil {
		// one rank per process: no other rank can hold a freed buffer, so
		// collective results may reuse them
		opts.Backend = mc.RecyclingCPU()
	}
	if opts.Backend == nil {
		opts.Backend = &CPU{BLAS: DefaultBLAS()}
	}
	wc := c
	if opts.Comm != nil {
		if wc, err = opts.Comm(ctx, c); err != nil {
			return nil, err
		}
	}
	w, err := NewWorker(ctx, p, c.Rank(), opts.Backend, wc, opts)
	if err != nil {
		return nil, err
	}
	return &MPI{plan: p, comm: c, w: w, world: world}, nil
}

// sameRun checks that every process compiled the same plan with the same
// seed: each compiles the program itself, and a stale copy of the file on
// one host, or other flags, would otherwise run quietly to a wrong answer
// or crash inside MPI on mismatched buffers.
func sameRun(ctx context.Context, world Group, p *plan.Plan, seed uint64) error {
	data, err := plan.Marshal(p)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	mine := []int64{int64(binary.LittleEndian.Uint64(sum[:8])), int64(seed)}
	var x Buffer
	if world.Index() == 0 {
		x = FromSlice([]int{2}, mine)
	}
	b, err := world.Broadcast(ctx, x, 0, ir.I64, []int{2})
	if err != nil {
		return fmt.Errorf("comparing plans with rank 0: %w", err)
	}
	lead := b.(*Tensor).Data.([]int64)
	if lead[0] != mine[0] || lead[1] != mine[1] {
		return fmt.Errorf("this process compiled another program than rank 0's (plan %016x, seed %d; rank 0: plan %016x, seed %d): every process must run the same .mesh file (and .npy shapes) with the same flags and meshrun",
			uint64(mine[0]), mine[1], uint64(lead[0]), lead[1])
	}
	return nil
}

func (m *MPI) Plan() *plan.Plan        { return m.plan }
func (m *MPI) Ranks() []int            { return []int{m.comm.Rank()} }
func (m *MPI) Worker(rank int) *Worker { return m.w }
func (m *MPI) Lead() bool              { return m.comm.Rank() == 0 }

// Exec implements Launcher. Each process's timeline starts at its own
// clock's origin for the run: processes share no clock.
func (m *MPI) Exec(ctx context.Context, feed func(rank int) Feed) ([]*RankResult, time.Duration, error) {
	start := time.Now()
	var f Feed
	if feed != nil {
		f = feed(m.comm.Rank())
	}
	res, err := m.w.Run(ctx, f, start)
	if err != nil {
		return nil, time.Since(start), err
	}
	return []*RankResult{res}, time.Since(start), nil
}

// Gather implements Launcher: every rank whose block Assemble reads sends
// it to rank 0 (replicas once), which assembles them; with everywhere rank
// 0 broadcasts the results.
func (m *MPI) Gather(ctx context.Context, specs []plan.Tensor, blocks [][]Buffer, everywhere bool) ([]*Tensor, error) {
	ctx, cancel := context.WithTimeout(ctx, m.w.Timeout)
	defer cancel()
	me := m.comm.Rank()
	var out []*Tensor
	if me == 0 {
		out = make([]*Tensor, len(specs))
	}
	mesh := m.plan.Mesh
	for j := range specs {
		spec := &specs[j]
		readers := BlockReaders(m.plan, spec)
		if me != 0 {
			if !slices.Contains(readers, me) {
				continue // a replica rank 0 will not read: nothing to send
			}
			mine, err := m.w.BackendOf(specs[j].Host).CopyOut(blocks[0][j])
			if err != nil {
				return nil, err
			}
			if err := m.comm.Send(ctx, 0, gatherTag, mine); err != nil {
				return nil, err
			}
			continue
		}
		parts := make([]*Tensor, m.comm.Size())
		for _, r := range readers {
			if r == 0 {
				mine, err := m.w.BackendOf(specs[j].Host).CopyOut(blocks[0][j])
				if err != nil {
					return nil, err
				}
				parts[0] = mine
				continue
			}
			shape := sbp.Layout(mesh, spec.Shape, spec.Placement, r).Len
			b, err := m.comm.Recv(ctx, r, gatherTag, spec.DType, shape)
			if err != nil {
				return nil, fmt.Errorf("gathering %s from rank %d: %w", spec.Name, r, err)
			}
			parts[r] = b.(*Tensor)
		}
		var err error
		if out[j], err = assembleHost(m.plan, spec, parts); err != nil {
			return nil, err
		}
	}
	if err := m.comm.Flush(ctx); err != nil {
		return nil, err
	}
	if !everywhere {
		return out, nil
	}
	all := make([]*Tensor, len(specs))
	for j := range specs {
		var x Buffer
		if me == 0 {
			x = out[j]
		}
		b, err := m.world.Broadcast(ctx, x, 0, specs[j].DType, specs[j].Shape)
		if err != nil {
			return nil, fmt.Errorf("broadcasting %s: %w", specs[j].Name, err)
		}
		all[j] = b.(*Tensor)
	}
	return all, nil
}

// GatherStats implements Launcher. A rank's statistics travel as numbers:
// peak, final, sent and held bytes, then start, duration and bytes of each
// instruction (the lead knows every rank's program, hence the names).
func (m *MPI) GatherStats(ctx context.Context, stats []DeviceStats) ([]DeviceStats, error) {
	ctx, cancel := context.WithTimeout(ctx, m.w.Timeout)
	defer cancel()
	st := stats[0]
	if m.comm.Rank() != 0 {
		if err := m.comm.Send(ctx, 0, gatherTag, encodeStats(st)); err != nil {
			return nil, err
		}
		return nil, m.comm.Flush(ctx)
	}
	out := []DeviceStats{st}
	for r := 1; r < m.comm.Size(); r++ {
		prog := m.plan.ProgramOf(r)
		b, err := m.comm.Recv(ctx, r, gatherTag, ir.I64, []int{statsHeader + 3*len(prog.Instrs)})
		if err != nil {
			return nil, fmt.Errorf("gathering statistics from rank %d: %w", r, err)
		}
		out = append(out, decodeStats(r, prog, b.(*Tensor)))
	}
	return out, nil
}

// statsHeader is how many numbers precede the events in encoded stats.
const statsHeader = 10

// encodeStats flattens a rank's statistics; an event's third number is
// the bytes it sent or, for a copy between tiers, the bytes it copied
// (an instruction never does both).
func encodeStats(st DeviceStats) *Tensor {
	onDevice := int64(0) // a rank's events are all the device's or none
	if len(st.Events) > 0 && st.Events[0].OnDevice {
		onDevice = 1
	}
	v := []int64{st.Peak, st.Final, st.BytesSent, st.Held, st.HostPeak, st.HostFinal, st.HostHeld, st.ToHost, st.ToDevice, onDevice}
	for _, e := range st.Events {
		v = append(v, int64(e.Start), int64(e.Dur), e.Bytes+e.Copied)
	}
	return FromSlice([]int{len(v)}, v)
}

func decodeStats(rank int, prog *plan.Program, t *Tensor) DeviceStats {
	v := t.Data.([]int64)
	st := DeviceStats{Device: rank, Peak: v[0], Final: v[1], BytesSent: v[2], Held: v[3],
		HostPeak: v[4], HostFinal: v[5], HostHeld: v[6], ToHost: v[7], ToDevice: v[8]}
	for i, l := range labelsOf(prog) {
		e := v[statsHeader+3*i:]
		ev := l.event(time.Duration(e[0]), time.Duration(e[1]), e[2])
		ev.OnDevice = v[9] == 1
		if l.kind == plan.Offload.String() || l.kind == plan.Fetch.String() {
			ev.Bytes, ev.Copied = 0, e[2] // a copy sends nothing
		}
		st.Events = append(st.Events, ev)
	}
	return st
}
