package cuda

import (
	"context"
	"slices"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
)

// AllGather implements rt.Group: ncclAllGather for even blocks, else one
// ncclBroadcast per member from its owner, into a flat buffer that is
// the result itself when the blocks are contiguous there.
func (g *ncclGroup) AllGather(ctx context.Context, x rt.Buffer, dim int, lens []int) (rt.Buffer, error) {
	in, done, err := g.input(x)
	if err != nil {
		return nil, err
	}
	defer done()
	counts, shapes := blocks(in.shape, dim, lens)
	es := in.dt.Size()
	g.c.sent.Add(rt.AllGatherSent(counts, g.index, es))
	outShape := slices.Clone(in.shape)
	outShape[dim] = sum(lens)
	out, flat, drop, err := g.staged(in.dt, outShape, dim, sum(counts))
	if err != nil {
		return nil, err
	}
	defer drop()
	if sum(counts) > 0 {
		err = g.run(ctx, g.what("all-gather", in.dt, in.shape), gatherOps(in, flat, counts, g.index))
	}
	if err == nil && flat != out {
		err = g.unpack(out, dim, flat, shapes)
	}
	if err != nil {
		g.c.be.Free(out)
		return nil, err
	}
	return out, nil
}

// gatherOps gathers every member's block of counts (this one's is in)
// into flat, in member order: one ncclAllGather when the blocks are even,
// else one ncclBroadcast per non-empty block from its owner. As bytes.
func gatherOps(in, flat *Buf, counts []int, me int) []ncOp {
	es := in.dt.Size()
	if allEqual(counts) {
		return []ncOp{{kind: ncAllGather, send: int64(in.ptr), recv: int64(flat.ptr), count: int64(counts[0] * es), dt: ncclUint8}}
	}
	var ops []ncOp
	pos := 0
	for j, n := range counts {
		dst := at(flat.ptr, pos, es)
		src := dst // ignored except at the root
		if j == me {
			src = int64(in.ptr)
		}
		if n > 0 {
			ops = append(ops, ncOp{kind: ncBroadcast, send: src, recv: dst, count: int64(n * es), dt: ncclUint8, peer: int64(j)})
		}
		pos += n
	}
	return ops
}

// scatterOps reduces w's chunks of counts, in member order, each onto its
// owner (this one's into mine): one ncclReduceScatter when they are even,
// else one ncclReduce per non-empty chunk. red carries the type and
// operator.
func scatterOps(w, mine *Buf, counts []int, me int, red ncOp) []ncOp {
	if allEqual(counts) {
		return []ncOp{{kind: ncReduceScatter, send: int64(w.ptr), recv: int64(mine.ptr), count: int64(counts[0]), dt: red.dt, op: red.op}}
	}
	var ops []ncOp
	pos, es := 0, w.dt.Size()
	for j, n := range counts {
		src := at(w.ptr, pos, es)
		dst := src // significant at the root only
		if j == me {
			dst = int64(mine.ptr)
		}
		if n > 0 {
			ops = append(ops, ncOp{kind: ncReduce, send: src, recv: dst, count: int64(n), dt: red.dt, op: red.op, peer: int64(j)})
		}
		pos += n
	}
	return ops
}

// ReduceScatter implements rt.Group: ncclReduceScatter for even chunks,
// else one ncclReduce per chunk onto its owner.
func (g *ncclGroup) ReduceScatter(ctx context.Context, x rt.Buffer, dim int, lens []int, op rt.ReduceOp) (rt.Buffer, error) {
	in, done, err := g.input(x)
	if err != nil {
		return nil, err
	}
	defer done()
	counts, shapes := blocks(in.shape, dim, lens)
	g.c.sent.Add(rt.ReduceScatterSent(counts, g.index, in.dt.Size()))
	packed := in
	if !contiguous(in.shape, dim) {
		if packed, err = g.pack(in, dim, shapes); err != nil {
			return nil, err
		}
		defer g.c.be.Free(packed)
	}
	w, t, free, err := g.wide(packed)
	if err != nil {
		return nil, err
	}
	defer free()
	mine, err := g.c.be.newBuf(w.dt, shapes[g.index])
	if err != nil {
		return nil, err
	}
	if sum(counts) > 0 {
		ops := scatterOps(w, mine, counts, g.index, ncOp{dt: t, op: redOp(op)})
		if err := g.run(ctx, g.what("reduce-scatter", in.dt, in.shape), ops); err != nil {
			g.c.be.Free(mine)
			return nil, err
		}
	}
	return g.narrowTo(mine, in.dt)
}

// AllToAll implements rt.Group with a group of ncclSend/ncclRecv pairs,
// one per member (this one included), over packed pieces.
func (g *ncclGroup) AllToAll(ctx context.Context, x rt.Buffer, splitDim int, splitLens []int, catDim int, catLens []int) (rt.Buffer, error) {
	in, done, err := g.input(x)
	if err != nil {
		return nil, err
	}
	defer done()
	sendCounts, sendShapes := blocks(in.shape, splitDim, splitLens)
	send := in
	if !contiguous(in.shape, splitDim) {
		if send, err = g.pack(in, splitDim, sendShapes); err != nil {
			return nil, err
		}
		defer g.c.be.Free(send)
	}
	// what arrives from member j: its piece, with this member's length
	// along splitDim
	mineShape := slices.Clone(in.shape)
	mineShape[splitDim] = splitLens[g.index]
	if catDim == splitDim {
		catLens = make([]int, len(splitLens))
		for i := range catLens {
			catLens[i] = splitLens[g.index]
		}
	}
	recvCounts, recvShapes := blocks(mineShape, catDim, catLens)
	es := in.dt.Size()
	g.c.sent.Add(rt.ReduceScatterSent(sendCounts, g.index, es))
	outShape := slices.Clone(mineShape)
	outShape[catDim] = sum(catLens)
	out, recv, drop, err := g.staged(in.dt, outShape, catDim, sum(recvCounts))
	if err != nil {
		return nil, err
	}
	defer drop()
	ops := pairs(send, recv, sendCounts, recvCounts, es)
	if len(ops) > 0 {
		err = g.run(ctx, g.what("all-to-all", in.dt, in.shape), ops)
	}
	if err == nil && recv != out {
		err = g.unpack(out, catDim, recv, recvShapes)
	}
	if err != nil {
		g.c.be.Free(out)
		return nil, err
	}
	return out, nil
}

// pairs sends member j its piece of send and receives member j's piece
// into recv, both packed in member order, as bytes; empty pieces are
// skipped (the peer skips the matching call).
func pairs(send, recv *Buf, sendCounts, recvCounts []int, es int) []ncOp {
	var ops []ncOp
	sp, rp := 0, 0
	for j := range sendCounts {
		if n := sendCounts[j]; n > 0 {
			ops = append(ops, ncOp{kind: ncSend, send: at(send.ptr, sp, es), count: int64(n * es), dt: ncclUint8, peer: int64(j)})
		}
		if n := recvCounts[j]; n > 0 {
			ops = append(ops, ncOp{kind: ncRecv, recv: at(recv.ptr, rp, es), count: int64(n * es), dt: ncclUint8, peer: int64(j)})
		}
		sp += sendCounts[j]
		rp += recvCounts[j]
	}
	return ops
}

// Broadcast implements rt.Group with ncclBroadcast, as bytes.
func (g *ncclGroup) Broadcast(ctx context.Context, x rt.Buffer, root int, dt ir.DType, shape []int) (rt.Buffer, error) {
	out, err := g.c.be.newBuf(dt, shape)
	if err != nil {
		return nil, err
	}
	src := int64(out.ptr)
	if g.index == root {
		in, done, err := g.input(x)
		if err != nil {
			g.c.be.Free(out)
			return nil, err
		}
		defer done()
		src = int64(in.ptr)
	}
	g.c.sent.Add(rt.BroadcastSent(out.bytes, g.size, g.index, root))
	if out.bytes > 0 {
		op := ncOp{kind: ncBroadcast, send: src, recv: int64(out.ptr), count: out.bytes, dt: ncclUint8, peer: int64(root)}
		if err := g.run(ctx, g.what("broadcast", dt, shape), []ncOp{op}); err != nil {
			g.c.be.Free(out)
			return nil, err
		}
	}
	return out, nil
}

// Reduce implements rt.Group with ncclReduce: the sum at root, zeros
// elsewhere.
func (g *ncclGroup) Reduce(ctx context.Context, x rt.Buffer, root int) (rt.Buffer, error) {
	in, done, err := g.input(x)
	if err != nil {
		return nil, err
	}
	defer done()
	w, t, free, err := g.wide(in)
	if err != nil {
		return nil, err
	}
	defer free()
	dst := w // significant at the root only
	if g.index == root {
		if dst, err = g.c.be.newBuf(w.dt, w.shape); err != nil {
			return nil, err
		}
	} else {
		g.c.sent.Add(w.bytes)
	}
	if n := count(w.shape); n > 0 {
		op := ncOp{kind: ncReduce, send: int64(w.ptr), recv: int64(dst.ptr), count: int64(n), dt: t, op: ncclSum, peer: int64(root)}
		err = g.run(ctx, g.what("reduce", in.dt, in.shape), []ncOp{op})
	}
	if g.index != root {
		if err != nil {
			return nil, err
		}
		return g.c.be.Alloc(in.dt, in.shape)
	}
	if err != nil {
		g.c.be.Free(dst)
		return nil, err
	}
	return g.narrowTo(dst, in.dt)
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// staged allocates a result of shape and the buffer NCCL fills: the
// result itself when its blocks along dim are contiguous, else a flat
// staging buffer of n elements (unpacked into the result after), which
// drop frees.
func (g *ncclGroup) staged(dt ir.DType, shape []int, dim, n int) (out, fill *Buf, drop func(), err error) {
	if out, err = g.c.be.newBuf(dt, shape); err != nil {
		return nil, nil, nil, err
	}
	if contiguous(shape, dim) {
		return out, out, func() {}, nil
	}
	if fill, err = g.c.be.newBuf(dt, []int{n}); err != nil {
		g.c.be.Free(out)
		return nil, nil, nil, err
	}
	return out, fill, func() { g.c.be.Free(fill) }, nil
}
