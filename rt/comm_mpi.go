package rt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt/mpi"
)

// MPIComm is a Comm over MPI: one rank per process, its groups split from
// MPI_COMM_WORLD once at start-up. Collectives map to MPI's v variants
// (uneven lengths need no padding); a tensor cut along a dim that is not
// the outermost is packed into one contiguous block per member first, as
// MPI concatenates flat buffers. Half-precision values are reduced in f32
// and rounded once. Every call is bounded by its context (package mpi
// polls nonblocking requests), so a lost peer is a timeout, never a hang.
//
// BytesSent counts what the ring algorithms of the in-process
// communicator send for the same calls, byte for byte (MPI chooses its own
// algorithms and does not report its traffic), so the figures compare
// with explain's model and with the local launcher.
type MPIComm struct {
	world *mpi.Comm
	sent  atomic.Int64
	mu    sync.Mutex
	sends []pendingSend // started, not yet known to be complete
	pool  *hostPool     // where results are allocated (nil: fresh memory)
}

// pendingSend is a started MPI_Isend and the tensor it reads, which must
// stay untouched until the send completes.
type pendingSend struct {
	req  *mpi.Request
	t    *Tensor
	peer int
	tag  int
}

// NewMPIComm initialises MPI (once per process) and returns the world.
func NewMPIComm(ctx context.Context) (*MPIComm, error) {
	if !mpi.Initialized() {
		if err := mpi.Init(ctx); err != nil {
			return nil, err
		}
	}
	return &MPIComm{world: mpi.World()}, nil
}

// RecyclingCPU returns a CPU backend that shares a caching allocator with
// this communicator: buffers the worker frees come back as collective
// results. Only for one rank per process (see hostPool).
func (c *MPIComm) RecyclingCPU() *CPU {
	if c.pool == nil {
		c.pool = newHostPool(1 << 30)
	}
	return &CPU{BLAS: DefaultBLAS(), pool: c.pool}
}

func (c *MPIComm) Rank() int        { return c.world.Rank() }
func (c *MPIComm) Size() int        { return c.world.Size() }
func (c *MPIComm) BytesSent() int64 { return c.sent.Load() }

// NewGroup implements Comm with MPI_Comm_split: the group's first member
// names it (every group of one plan group has a different first member)
// and the position in members is the key, so MPI's rank order is the
// ring order.
func (c *MPIComm) NewGroup(ctx context.Context, id int, members []int) (Group, error) {
	idx := -1
	for i, m := range members {
		if m == c.Rank() {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("rank %d is not in group %v", c.Rank(), members)
	}
	sub, err := c.world.Split(ctx, members[0], idx)
	if err != nil {
		return nil, err
	}
	if sub.Size() != len(members) || sub.Rank() != idx {
		return nil, fmt.Errorf("MPI made group g%d of %d ranks with this rank at %d; the plan says %d ranks, at %d", id, sub.Size(), sub.Rank(), len(members), idx)
	}
	return &mpiGroup{c: sub, parent: c}, nil
}

// Send implements Comm: it starts an MPI_Isend and returns (the plan's
// sends are buffered: a ring shift where every rank sends first, or
// receives taken in another tag order than sent, must not deadlock).
// Started in program order, messages to one peer with one tag keep their
// order; Flush waits for them all.
func (c *MPIComm) Send(ctx context.Context, peer, tag int, b Buffer) error {
	t, err := host(b)
	if err != nil {
		return err
	}
	var req *mpi.Request
	switch d := t.Data.(type) {
	case []float32:
		req, err = mpi.Isend(ctx, c.world, d, peer, tag)
	case []float64:
		req, err = mpi.Isend(ctx, c.world, d, peer, tag)
	case []int32:
		req, err = mpi.Isend(ctx, c.world, d, peer, tag)
	case []int64:
		req, err = mpi.Isend(ctx, c.world, d, peer, tag)
	case []uint16:
		req, err = mpi.Isend(ctx, c.world, d, peer, tag)
	default:
		err = fmt.Errorf("mpi: cannot send %T", d)
	}
	if err != nil {
		return mpiErr(err)
	}
	c.mu.Lock()
	c.sends = append(c.sends, pendingSend{req: req, t: t, peer: peer, tag: tag})
	c.mu.Unlock()
	c.sent.Add(t.Bytes())
	return nil
}

// Flush waits for every started send and reports the first failure.
func (c *MPIComm) Flush(ctx context.Context) error {
	c.mu.Lock()
	sends := c.sends
	c.sends = nil
	c.mu.Unlock()
	var first error
	for _, s := range sends {
		if _, err := s.req.Wait(ctx); err != nil && first == nil {
			first = fmt.Errorf("sending %s%v to rank %d (tag %d): %w", s.t.DType, s.t.Shape, s.peer, s.tag, mpiErr(err))
		}
	}
	return first
}

// Recv implements Comm.
func (c *MPIComm) Recv(ctx context.Context, peer, tag int, dt ir.DType, shape []int) (Buffer, error) {
	t := c.pool.get(dt, shape)
	n, err := recvAny(ctx, c.world, t.Data, peer, tag)
	if err != nil {
		return nil, mpiErr(err)
	}
	if n != t.Numel() {
		return nil, fmt.Errorf("received %d elements from rank %d (tag %d), expected %s%v", n, peer, tag, dt, shape)
	}
	return t, nil
}

// mpiErr marks MPI timeouts as peer timeouts, which the interpreter
// reports with the collective and its source line.
func mpiErr(err error) error {
	var te *mpi.TimeoutError
	if err != nil && errors.As(err, &te) {
		return fmt.Errorf("MPI_%s %w", te.Op, ErrPeerTimeout)
	}
	return err
}

// mpiGroup is one plan group's MPI communicator.
type mpiGroup struct {
	c      *mpi.Comm
	parent *MPIComm
}

func (g *mpiGroup) Size() int  { return g.c.Size() }
func (g *mpiGroup) Index() int { return g.c.Rank() }

// count charges this rank the ring algorithm's bytes for moving n bytes.
func (g *mpiGroup) count(n int64) { g.parent.sent.Add(n) }

// AllReduce implements Group.
func (g *mpiGroup) AllReduce(ctx context.Context, x Buffer, op ReduceOp) (Buffer, error) {
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	g.count(AllReduceSent(t.Numel(), g.Size(), g.Index(), t.DType.Size()))
	w := widen(t) // half precision reduces in f32
	out := g.parent.pool.get(w.DType, w.Shape)
	if err := reduceAny(ctx, g.c, w.Data, out.Data, nil, op); err != nil {
		return nil, mpiErr(err)
	}
	return g.parent.narrowTo(out, t.DType), nil
}

// AllGather implements Group: every member's block gathered with
// MPI_Allgatherv straight into the result when the blocks are contiguous
// there (every dim before dim has length 1), else into a flat buffer from
// which each block is copied once to its place.
func (g *mpiGroup) AllGather(ctx context.Context, x Buffer, dim int, lens []int) (Buffer, error) {
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	counts, shapes := memberBlocks(t.Shape, dim, lens)
	// the ring forwards every block but the next member's
	g.count(AllGatherSent(counts, g.Index(), t.DType.Size()))
	outShape := append([]int(nil), t.Shape...)
	outShape[dim] = sum(lens)
	pool := g.parent.pool
	out := pool.get(t.DType, outShape)
	recv := out
	if !outerContiguous(outShape, dim) {
		recv = pool.get(t.DType, []int{sum(counts)})
	}
	if err := gatherAny(ctx, g.c, t.Data, recv.Data, counts); err != nil {
		return nil, mpiErr(err)
	}
	if recv != out {
		scatterBlocks(out, dim, recv, shapes)
		pool.put(recv)
	}
	return out, nil
}

// ReduceScatter implements Group: the chunks, in member order and packed
// (already so when every dim before dim has length 1), go through
// MPI_Reduce_scatter; this member keeps its chunk.
func (g *mpiGroup) ReduceScatter(ctx context.Context, x Buffer, dim int, lens []int, op ReduceOp) (Buffer, error) {
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	counts, shapes := memberBlocks(t.Shape, dim, lens)
	g.count(ReduceScatterSent(counts, g.Index(), t.DType.Size()))
	pool := g.parent.pool
	packed := t
	if !outerContiguous(t.Shape, dim) {
		packed = gatherBlocks(pool, t, dim, shapes)
	}
	wide := widen(packed) // half precision reduces in f32
	mine := pool.get(wide.DType, shapes[g.Index()])
	if err := reduceAny(ctx, g.c, wide.Data, mine.Data, counts, op); err != nil {
		return nil, mpiErr(err)
	}
	if packed != t {
		pool.put(packed)
	}
	return g.parent.narrowTo(mine, t.DType), nil
}

// AllToAll implements Group with MPI_Alltoallv over packed pieces.
func (g *mpiGroup) AllToAll(ctx context.Context, x Buffer, splitDim int, splitLens []int, catDim int, catLens []int) (Buffer, error) {
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	sendCounts, sendShapes := memberBlocks(t.Shape, splitDim, splitLens)
	pool := g.parent.pool
	send := t
	if !outerContiguous(t.Shape, splitDim) {
		send = gatherBlocks(pool, t, splitDim, sendShapes)
	}
	// what arrives from member j: its block with our length along splitDim
	mineShape := append([]int(nil), t.Shape...)
	mineShape[splitDim] = splitLens[g.Index()]
	if catDim == splitDim {
		catLens = make([]int, len(splitLens))
		for i := range catLens {
			catLens[i] = splitLens[g.Index()]
		}
	}
	recvCounts, recvShapes := memberBlocks(mineShape, catDim, catLens)
	g.count(ReduceScatterSent(sendCounts, g.Index(), t.DType.Size()))
	outShape := append([]int(nil), mineShape...)
	outShape[catDim] = sum(catLens)
	out := pool.get(t.DType, outShape)
	recv := out
	if !outerContiguous(outShape, catDim) {
		recv = pool.get(t.DType, []int{sum(recvCounts)})
	}
	if err := alltoallAny(ctx, g.c, send.Data, sendCounts, recv.Data, recvCounts); err != nil {
		return nil, mpiErr(err)
	}
	if recv != out {
		scatterBlocks(out, catDim, recv, recvShapes)
		pool.put(recv)
	}
	if send != t {
		pool.put(send)
	}
	return out, nil
}

// Broadcast implements Group.
func (g *mpiGroup) Broadcast(ctx context.Context, x Buffer, root int, dt ir.DType, shape []int) (Buffer, error) {
	var t *Tensor
	if g.Index() == root {
		src, err := host(x)
		if err != nil {
			return nil, err
		}
		t = src.Clone()
		g.count(BroadcastSent(t.Bytes(), g.Size(), root, root))
	} else {
		t = g.parent.pool.get(dt, shape)
		g.count(BroadcastSent(t.Bytes(), g.Size(), g.Index(), root))
	}
	if err := bcastAny(ctx, g.c, t.Data, root); err != nil {
		return nil, mpiErr(err)
	}
	return t, nil
}

// Reduce implements Group with MPI_Reduce: the root gets the sum, the
// others zeros. The bytes charged are those of the in-process binomial
// tree (every member but the root sends its block once), which MPI's own
// tree also moves.
func (g *mpiGroup) Reduce(ctx context.Context, x Buffer, root int) (Buffer, error) {
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	w := widen(t)
	if g.Index() != root {
		g.count(w.Bytes())
		if err := reduceRootAny(ctx, g.c, w.Data, nil, root); err != nil {
			return nil, mpiErr(err)
		}
		return NewTensor(t.DType, t.Shape), nil
	}
	out := g.parent.pool.get(w.DType, w.Shape)
	if err := reduceRootAny(ctx, g.c, w.Data, out.Data, root); err != nil {
		return nil, mpiErr(err)
	}
	return g.parent.narrowTo(out, t.DType), nil
}

// treeSends is how many copies member vr (counted from the root) sends in
// the binomial-tree broadcast of the in-process communicator: one to
// vr+m for every power of two m below vr's lowest set bit (all, for the
// root) that stays inside the group.
func treeSends(vr, p int) int {
	n := 0
	for m := 1; m < p && (vr == 0 || m < vr&-vr); m <<= 1 {
		if vr+m < p {
			n++
		}
	}
	return n
}

// memberBlocks gives each member's element count and block shape when a
// tensor of shape (this member's) is cut or joined along dim into lens.
func memberBlocks(shape []int, dim int, lens []int) ([]int, [][]int) {
	counts := make([]int, len(lens))
	shapes := make([][]int, len(lens))
	for i, l := range lens {
		s := append([]int(nil), shape...)
		s[dim] = l
		shapes[i], counts[i] = s, numel(s)
	}
	return counts, shapes
}

// outerContiguous reports whether the blocks of a tensor cut along dim
// lie one after another in memory: every dim before dim has length 1.
func outerContiguous(shape []int, dim int) bool {
	for _, l := range shape[:dim] {
		if l != 1 {
			return false
		}
	}
	return true
}

// gatherBlocks copies t's blocks along dim (of the given shapes, in order)
// end to end into one flat tensor: one copy per element.
func gatherBlocks(pool *hostPool, t *Tensor, dim int, shapes [][]int) *Tensor {
	out := pool.get(t.DType, []int{t.Numel()})
	off, at := make([]int, len(t.Shape)), 0
	for _, s := range shapes {
		n := numel(s)
		CopyBlock(flatView(out, at, s), make([]int, len(s)), t, off, s)
		off[dim] += s[dim]
		at += n
	}
	return out
}

// scatterBlocks copies consecutive blocks of a flat tensor (of the given
// shapes) to their places along dim in out: one copy per element.
func scatterBlocks(out *Tensor, dim int, flat *Tensor, shapes [][]int) {
	off, at := make([]int, len(out.Shape)), 0
	for _, s := range shapes {
		CopyBlock(out, off, flatView(flat, at, s), make([]int, len(s)), s)
		off[dim] += s[dim]
		at += numel(s)
	}
}

// flatView is elements [at, at+numel(shape)) of a flat tensor seen as a
// tensor of shape, sharing its storage.
func flatView(t *Tensor, at int, shape []int) *Tensor {
	n := numel(shape)
	var d any
	switch x := t.Data.(type) {
	case []float32:
		d = x[at : at+n]
	case []float64:
		d = x[at : at+n]
	case []int32:
		d = x[at : at+n]
	case []int64:
		d = x[at : at+n]
	case []uint16:
		d = x[at : at+n]
	}
	return &Tensor{DType: t.DType, Shape: shape, Data: d}
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// narrowTo rounds an f32 result back to a half type (or returns it); the
// f32 buffer goes back to the pool.
func (c *MPIComm) narrowTo(t *Tensor, dt ir.DType) *Tensor {
	if !isHalf(dt) {
		return t
	}
	h := narrow(t, dt)
	c.pool.put(t)
	return h
}
