package cuda

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
)

// ncclGroup is one plan group's NCCL communicator: rt.Group on device
// buffers. Collectives use NCCL's own where the blocks are even
// (ncclAllReduce, ncclAllGather, ncclReduceScatter, ncclBroadcast,
// ncclReduce); uneven splits are a group of broadcasts (all-gather: each
// member's block from its owner) or of reduces (reduce-scatter: each
// chunk to its owner), and all-to-all is a group of sends and receives,
// so no block is padded. A tensor cut along a dim that is not its
// outermost is packed into contiguous blocks first, and unpacked after,
// by box copies on the device. Half precision reduces in f32 (widened
// and rounded once by the backend's kernels), as the CPU does: NCCL
// would round after every step of its ring. Data that only moves travels
// as bytes.
type ncclGroup struct {
	c           *NCCLComm
	comm        uintptr
	size, index int
	dead        error // set when the communicator was aborted
}

func (g *ncclGroup) Size() int  { return g.size }
func (g *ncclGroup) Index() int { return g.index }

// NCCL's data types and reduction operators (nccl.h).
const (
	ncclUint8   = 1
	ncclInt32   = 2
	ncclInt64   = 4
	ncclFloat32 = 7
	ncclFloat64 = 8
	ncclSum     = 0
	ncclMax     = 2
)

// reducible is NCCL's type for a reduction in dt (halves are widened to
// f32 before they get here).
func reducible(dt ir.DType) (int64, error) {
	switch dt {
	case ir.F32:
		return ncclFloat32, nil
	case ir.F64:
		return ncclFloat64, nil
	case ir.I32:
		return ncclInt32, nil
	case ir.I64:
		return ncclInt64, nil
	}
	return 0, fmt.Errorf("cuda: NCCL cannot reduce %s", dt)
}

func redOp(op rt.ReduceOp) int64 {
	if op == rt.OpMax {
		return ncclMax
	}
	return ncclSum
}

// run issues ops on the stream and waits for them (see wait).
func (g *ncclGroup) run(ctx context.Context, what string, ops []ncOp) error {
	if g.dead != nil {
		return fmt.Errorf("NCCL %s: %w", what, g.dead)
	}
	d := g.c.be.dev
	if rc := ncOps(d.ctx, g.comm, d.stream, ops); rc != 0 {
		return fmt.Errorf("NCCL %s: %w", what, ncclStatus(ncCall(ops), rc))
	}
	return g.wait(ctx, what)
}

// ncCall names the NCCL function of a list of ops, for errors.
func ncCall(ops []ncOp) string {
	names := [...]string{"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclReduce", "ncclSend", "ncclRecv"}
	if len(ops) > 1 {
		return "ncclGroupEnd"
	}
	return names[ops[0].kind]
}

// abort stops the communicator's kernels and marks it dead.
func (g *ncclGroup) abort() {
	if g.dead == nil {
		ncAbort(g.c.be.dev.ctx, g.comm)
		g.dead = errors.New("the communicator was aborted after an earlier failure")
	}
}

func (g *ncclGroup) close() error {
	if g.dead != nil || g.comm == 0 {
		return nil
	}
	rc := ncDestroy(g.c.be.dev.ctx, g.comm)
	g.comm = 0
	if rc != 0 {
		return ncclStatus("ncclCommDestroy", rc)
	}
	return nil
}

func (g *ncclGroup) what(op string, dt ir.DType, shape []int) string {
	return fmt.Sprintf("%s of %s%v (member %d of %d)", op, dt, shape, g.index, g.size)
}

// input is x on the device (a host tensor, such as a received one, is
// uploaded into a temporary that done releases).
func (g *ncclGroup) input(x rt.Buffer) (*Buf, func(), error) {
	bufs, done, err := g.c.be.onDevice([]rt.Buffer{x})
	if err != nil {
		return nil, nil, err
	}
	return bufs[0], done, nil
}

// wide is x in a type NCCL reduces as the CPU does: a half buffer widened
// to f32 (a new buffer, which free releases), else x itself; t is NCCL's
// name for that type.
func (g *ncclGroup) wide(x *Buf) (w *Buf, t int64, free func(), err error) {
	w, free = x, func() {}
	if isHalf(x.dt) {
		if w, err = g.c.be.convert(x, ir.F32); err != nil {
			return nil, 0, nil, err
		}
		free = func() { g.c.be.Free(w) }
	}
	if t, err = reducible(w.dt); err != nil {
		free()
		return nil, 0, nil, err
	}
	return w, t, free, nil
}

// narrowTo rounds an f32 result to dt once (releasing it), or returns it.
func (g *ncclGroup) narrowTo(out *Buf, dt ir.DType) (rt.Buffer, error) {
	if !isHalf(dt) {
		return out, nil
	}
	defer g.c.be.Free(out)
	return buffer(g.c.be.convert(out, dt))
}

func at(p uint64, elems, esize int) int64 { return int64(p) + int64(elems*esize) }

func allEqual(xs []int) bool {
	for _, x := range xs {
		if x != xs[0] {
			return false
		}
	}
	return true
}

// AllReduce implements rt.Group with ncclAllReduce.
func (g *ncclGroup) AllReduce(ctx context.Context, x rt.Buffer, op rt.ReduceOp) (rt.Buffer, error) {
	in, done, err := g.input(x)
	if err != nil {
		return nil, err
	}
	defer done()
	n := count(in.shape)
	g.c.sent.Add(rt.AllReduceSent(n, g.size, g.index, in.dt.Size()))
	w, t, free, err := g.wide(in)
	if err != nil {
		return nil, err
	}
	defer free()
	out, err := g.c.be.newBuf(w.dt, w.shape)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		op := ncOp{kind: ncAllReduce, send: int64(w.ptr), recv: int64(out.ptr), count: int64(n), dt: t, op: redOp(op)}
		if err := g.run(ctx, g.what("all-reduce", in.dt, in.shape), []ncOp{op}); err != nil {
			g.c.be.Free(out)
			return nil, err
		}
	}
	return g.narrowTo(out, in.dt)
}

// blocks gives each member's element count and block shape when a tensor
// of shape is cut or joined along dim into lens.
func blocks(shape []int, dim int, lens []int) ([]int, [][]int) {
	counts := make([]int, len(lens))
	shapes := make([][]int, len(lens))
	for i, l := range lens {
		s := slices.Clone(shape)
		s[dim] = l
		shapes[i], counts[i] = s, count(s)
	}
	return counts, shapes
}

// contiguous reports whether blocks cut along dim lie end to end in
// memory: every dim before dim has length 1.
func contiguous(shape []int, dim int) bool {
	for _, l := range shape[:dim] {
		if l != 1 {
			return false
		}
	}
	return true
}

// pack copies x's blocks along dim (of shapes, in order) end to end into
// a new flat buffer.
func (g *ncclGroup) pack(x *Buf, dim int, shapes [][]int) (*Buf, error) {
	flat, err := g.c.be.newBuf(x.dt, []int{count(x.shape)})
	if err != nil {
		return nil, err
	}
	off, pos, es := make([]int, len(x.shape)), 0, x.dt.Size()
	for _, s := range shapes {
		src := uint64(at(x.ptr, offset(x.shape, off), es))
		if err := g.c.be.copyBox(x.dt, uint64(at(flat.ptr, pos, es)), denseStrides(s), src, denseStrides(x.shape), s); err != nil {
			g.c.be.Free(flat)
			return nil, err
		}
		off[dim] += s[dim]
		pos += count(s)
	}
	return flat, nil
}

// unpack copies flat's consecutive blocks (of shapes) to their places
// along dim in out.
func (g *ncclGroup) unpack(out *Buf, dim int, flat *Buf, shapes [][]int) error {
	off, pos, es := make([]int, len(out.shape)), 0, out.dt.Size()
	for _, s := range shapes {
		dst := uint64(at(out.ptr, offset(out.shape, off), es))
		if err := g.c.be.copyBox(out.dt, dst, denseStrides(out.shape), uint64(at(flat.ptr, pos, es)), denseStrides(s), s); err != nil {
			return err
		}
		off[dim] += s[dim]
		pos += count(s)
	}
	return nil
}
