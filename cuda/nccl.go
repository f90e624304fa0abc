package cuda

// NCCL between processes: one rank per process, each on its own GPU.
//
// NCCLComm is an rt.Comm whose groups (ncclGroup, nccl_group.go) run their
// collectives with NCCL on the backend's stream, on device buffers, with
// no host copy. Point-to-point sends and receives, and the launcher's own
// messages, stay on the host communicator it wraps (MPI's, or the TCP one
// the rendezvous variables make): a plan's sends are buffered and matched
// by tag, which NCCL's send/recv are not (a pipeline stage that sends
// before it receives would wait for its peer forever).
//
// Each plan group is one NCCL communicator. Its first member makes the
// unique id (ncclGetUniqueId) and sends the 128 bytes to the others over
// the host communicator; every member then joins with ncclCommInitRank,
// which takes the id by value (nccl_cgo.go passes it so). Groups are made
// by every rank in plan order, so the blocking initialisations of
// disjoint groups never wait on each other.
//
// Timeouts: NCCL enqueues a collective and returns; a peer that never
// comes leaves the kernel spinning. So each collective is waited for by
// polling the stream (cuStreamQuery) and the communicator's asynchronous
// error until the context's deadline — the run's timeout — and on expiry
// the communicator is aborted (ncclCommAbort, which stops its kernels)
// and the error names the collective. The wait costs a host round trip
// per collective, which is the price of never hanging.

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/rt"
)

// idTag is the host tag that carries a group's unique id: above the
// plan's tags and the launcher's gathers (plan.MaxTag+1), within MPI's
// guaranteed 32767.
const idTag = plan.MaxTag + 2

// NCCLComm is one process's rank: collectives through NCCL on be's GPU,
// everything else through host.
type NCCLComm struct {
	host rt.Comm
	be   *Backend
	sent atomic.Int64 // what the groups' collectives count (rt.*Sent)

	mu    sync.Mutex
	comms []*ncclGroup // to destroy on Close
}

// NewNCCLComm loads NCCL and wraps host; be is this process's GPU.
func NewNCCLComm(host rt.Comm, be *Backend) (*NCCLComm, error) {
	if err := Load(NCCL); err != nil {
		return nil, err
	}
	if err := gpuPerProcess(); err != nil {
		return nil, err
	}
	return &NCCLComm{host: host, be: be}, nil
}

// gpuPerProcess checks that this process's local rank has a GPU of its
// own: ChooseDevice wraps local ranks around the GPUs, which lets
// logical ranks share one, but NCCL refuses two members on one GPU — and
// says so only once every member has joined, as "invalid usage". An
// explicit MESHRUN_CUDA_DEVICE is the user's choice and is not checked.
func gpuPerProcess() error {
	if os.Getenv("MESHRUN_CUDA_DEVICE") != "" {
		return nil
	}
	for _, name := range localRankVars {
		r, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			continue
		}
		n, err := DeviceCount()
		if err != nil {
			return err
		}
		if r >= n {
			return fmt.Errorf("cuda: %s=%d, but this host has %d GPU(s): NCCL needs a GPU per process, so start at most %d processes per host", name, r, n, n)
		}
		return nil
	}
	return nil
}

func (c *NCCLComm) Rank() int        { return c.host.Rank() }
func (c *NCCLComm) Size() int        { return c.host.Size() }
func (c *NCCLComm) BytesSent() int64 { return c.host.BytesSent() + c.sent.Load() }

// Send, Recv and Flush implement rt.Comm on the host communicator (a
// device buffer is read through its host copy, rt.HostReader).
func (c *NCCLComm) Send(ctx context.Context, peer, tag int, b rt.Buffer) error {
	return c.host.Send(ctx, peer, tag, b)
}
func (c *NCCLComm) Recv(ctx context.Context, peer, tag int, dt ir.DType, shape []int) (rt.Buffer, error) {
	return c.host.Recv(ctx, peer, tag, dt, shape)
}
func (c *NCCLComm) Flush(ctx context.Context) error { return c.host.Flush(ctx) }

// NewGroup implements rt.Comm: one NCCL communicator per plan group.
func (c *NCCLComm) NewGroup(ctx context.Context, id int, members []int) (rt.Group, error) {
	idx := slices.Index(members, c.Rank())
	if idx < 0 {
		return nil, fmt.Errorf("rank %d is not in group %v", c.Rank(), members)
	}
	uid, err := c.shareID(ctx, members, idx)
	if err != nil {
		return nil, fmt.Errorf("sharing group g%d's NCCL id: %w", id, err)
	}
	comm, err := c.initRank(ctx, len(members), &uid, idx)
	if err != nil {
		return nil, fmt.Errorf("group g%d %v: %w", id, members, err)
	}
	g := &ncclGroup{c: c, comm: comm, size: len(members), index: idx}
	c.mu.Lock()
	c.comms = append(c.comms, g)
	c.mu.Unlock()
	return g, nil
}

// shareID makes the id at the group's first member and sends it to the
// others as 16 int64s.
func (c *NCCLComm) shareID(ctx context.Context, members []int, idx int) (UniqueID, error) {
	var uid UniqueID
	if idx != 0 {
		b, err := c.host.Recv(ctx, members[0], idTag, ir.I64, []int{16})
		if err != nil {
			return uid, err
		}
		t, err := c.be.CopyOut(b)
		if err != nil {
			return uid, err
		}
		for i, v := range t.Data.([]int64) {
			binary.LittleEndian.PutUint64(uid[8*i:], uint64(v))
		}
		return uid, nil
	}
	uid, err := NCCLGetUniqueID()
	if err != nil {
		return uid, err
	}
	words := make([]int64, 16)
	for i := range words {
		words[i] = int64(binary.LittleEndian.Uint64(uid[8*i:]))
	}
	for _, m := range members[1:] {
		if err := c.host.Send(ctx, m, idTag, rt.FromSlice([]int{16}, words)); err != nil {
			return uid, err
		}
	}
	return uid, c.host.Flush(ctx)
}

// initRank joins the communicator. ncclCommInitRank blocks until every
// member has joined; a member that never does leaves it waiting inside
// C, so the wait for it is bounded by ctx and the error says who is
// missing (the process then exits, which ends the call).
func (c *NCCLComm) initRank(ctx context.Context, n int, uid *UniqueID, rank int) (uintptr, error) {
	type res struct {
		comm uintptr
		rc   int
	}
	done := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // the context is made current on this thread
		defer runtime.UnlockOSThread()
		comm, rc := ncInit(c.be.dev.ctx, n, uid, rank)
		done <- res{comm, rc}
	}()
	select {
	case r := <-done:
		if r.rc != 0 {
			return 0, ncclStatus("ncclCommInitRank", r.rc)
		}
		return r.comm, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("ncclCommInitRank (rank %d of %d): not every member joined: %w", rank, n, rt.ErrPeerTimeout)
	}
}

// Close destroys every communicator this rank made.
func (c *NCCLComm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for _, g := range c.comms {
		if err := g.close(); err != nil && first == nil {
			first = err
		}
	}
	c.comms = nil
	return first
}

// ncclStatus names a failed NCCL call; a negative status is the CUDA
// driver's (making the context current failed).
func ncclStatus(call string, rc int) error {
	if rc < 0 {
		return check(call+": cuCtxSetCurrent", "", -rc)
	}
	return ncclError(call, rc)
}

// ncOp is one NCCL call for the shim's nc_ops (nccl_cgo.go), whose nc_op
// it mirrors field for field: seven 64-bit fields, so the layouts agree.
// peer is the root of a broadcast or reduce.
type ncOp struct{ kind, send, recv, count, dt, op, peer int64 }

// ncOp kinds, as the shim's enum.
const (
	ncAllReduce = iota
	ncAllGather
	ncReduceScatter
	ncBroadcast
	ncReduce
	ncSend
	ncRecv
)

// cudaNotReady is cuStreamQuery's answer while work is still running.
const cudaNotReady = 600

// ncclInProgress is the asynchronous error of a communicator still busy.
const ncclInProgress = 7

// wait polls the stream until the collective just issued has finished,
// the communicator reports an error, or ctx ends (then it aborts the
// communicator). It yields first, then sleeps longer and longer, up to
// 100 µs: short collectives return at once, long ones cost no CPU.
func (g *ncclGroup) wait(ctx context.Context, what string) error {
	d := g.c.be.dev
	for spin := 0; ; spin++ {
		switch rc := ncStreamQuery(d.ctx, d.stream); {
		case rc == 0:
			return nil
		case rc < 0:
			return check("cuStreamQuery", what, -rc)
		case rc != cudaNotReady:
			return check("cuStreamQuery", what, rc)
		}
		if e, rc := ncAsyncError(g.comm); rc != 0 || (e != 0 && e != ncclInProgress) {
			if rc == 0 {
				rc = e
			}
			g.abort()
			return fmt.Errorf("NCCL %s: %w; communicator aborted", what, ncclError("ncclCommGetAsyncError", rc))
		}
		if ctx.Err() != nil {
			g.abort()
			return fmt.Errorf("NCCL %s did not finish (communicator aborted): %w", what, rt.ErrPeerTimeout)
		}
		if spin < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Duration(min(spin-63, 100)) * time.Microsecond)
		}
	}
}
