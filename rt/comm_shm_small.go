package rt

// One-barrier shared-memory collectives for small tensors.
//
// The algorithms of comm_shm.go meet twice: once when every input is
// posted, once when every member has done its part, since until then a
// member may still read a peer's input and write the group's shared
// result. For the small tensors of tensor-parallel steps (a few KiB:
// activations of one micro-batch, norms, losses) the second meeting costs
// more than the work: with more ranks than cores a member that reaches a
// barrier waits until every peer has been scheduled, twice per
// collective. Here each member instead copies its input into a staging
// buffer of its own in the group's table (reused from call to call), the
// members meet once, and each member computes its whole result into
// memory of its own (its rank's arena): an all-reduce member reduces
// every chunk, in the ring's order for that chunk, so the result is
// bitwise the ring's on every member; an all-gather member copies every
// block. Nobody reads a peer's own buffers, so a member may free or
// reuse its input at once, and it leaves without waiting for the others:
// what it read stays put because the table has two sets of postings used
// in turn (shmShared.post), and a member can overwrite a set only after
// every peer has passed the next barrier.
//
// The reported bytes and ring steps are the ring's, as for the large
// path. Small means a member's input times the group's size within
// shmSmallBytes: the redundant reduction reads p times the input on each
// member, which at this size costs less than a barrier.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/meshrun/meshrun/ir"
)

// shmSmallBytes bounds a one-barrier collective's bytes times the group
// size (see the file comment): 64 KiB, so that an f32 all-reduce of up to
// 8K values on two members, or 2K on eight, reads what fits in the first
// two levels of cache.
const shmSmallBytes = 64 << 10

// isSmall says whether a collective of bytes per member takes the
// one-barrier path. Every member computes it from what they agree on
// (the result's or the input's declared size), so all take the same path.
func (g *Ring) isSmall(bytes int64) bool {
	return bytes*int64(g.Size()) <= g.shm.s.small
}

// stage copies t into this member's staging buffer of the collective it
// is about to meet in, and returns the tensor to post.
func (g *Ring) stage(t *Tensor) *Tensor {
	if t == nil {
		return nil
	}
	st := g.staged(t.DType, t.Numel())
	st.Shape = append(st.Shape[:0], t.Shape...)
	copyData(st, t)
	return st
}

// staged is this member's staging tensor of the collective it is about to
// meet in, n elements of dt (its storage kept from call to call; the
// caller sets the shape and fills it).
func (g *Ring) staged(dt ir.DType, n int) *Tensor {
	g.begin() // as meet will find it
	st := &g.posted().stage[g.Rank]
	if *st == nil {
		*st = &staging{}
	}
	s := *st
	if s.back == nil || s.dt != dt || lenOf(s.back) < n {
		s.back, s.dt, s.views = NewTensor(dt, []int{n}).Data, dt, map[int]any{}
	}
	v, ok := s.views[n]
	if !ok {
		v = prefix(s.back, n)
		s.views[n] = v
	}
	s.t.DType, s.t.Data = dt, v
	return &s.t
}

// staging is a member's staging buffer: back, and the prefixes of it
// that collectives of each length posted, kept so that posting one does
// not box a new slice header for the collector every call.
type staging struct {
	t     Tensor
	dt    ir.DType
	back  any
	views map[int]any
}

// lenOf is a storage slice's length.
func lenOf(d any) int {
	switch x := d.(type) {
	case []float32:
		return len(x)
	case []float64:
		return len(x)
	case []int32:
		return len(x)
	case []int64:
		return len(x)
	case []uint16:
		return len(x)
	}
	return 0
}

// prefix is the first n elements of a storage slice.
func prefix(d any, n int) any {
	switch x := d.(type) {
	case []float32:
		return x[:n]
	case []float64:
		return x[:n]
	case []int32:
		return x[:n]
	case []int64:
		return x[:n]
	case []uint16:
		return x[:n]
	}
	return nil
}

// reduceEveryChunk reduces elements [off, off+n) of every member's posted
// input into out (n elements), each of the ring's balanced chunks in that
// chunk's ring order, so that out is bitwise the ring all-reduce's of those
// elements; it appends that all-reduce's ring steps and returns the bytes
// they send.
func (g *Ring) reduceEveryChunk(out *Tensor, off, n int, op ReduceOp) (int64, error) {
	lens := balanced(n, g.Size())
	lo := 0
	for c, l := range lens {
		span := rows{count: 1, len: l, src: off + lo, dst: lo}
		if err := g.reduceRowsFrom(out, span, op, c+1); err != nil {
			return 0, err
		}
		lo += l
	}
	before := len(g.shm.steps)
	sz := int64(out.DType.Size())
	chunk := func(i int) int64 { return int64(lens[i]) * sz }
	g.reduceScatterSteps(chunk, isHalf(out.DType) && op == OpSum)
	g.allGatherSteps(chunk)
	var sent int64
	for _, s := range g.shm.steps[before:] {
		sent += s.bytes
	}
	return sent, nil
}

// done reports a one-barrier collective's ring steps and returns out.
func (g *Ring) done(start time.Time, out *Tensor) (Buffer, error) {
	g.account(start)
	return out, nil
}

// smallAllReduce: every member reduces every chunk into its own result.
func (g *Ring) smallAllReduce(ctx context.Context, t *Tensor, op ReduceOp) (Buffer, error) {
	start := g.began()
	n := t.Numel()
	if err := g.meet(ctx, call{kind: "all_reduce", arg: int(op), small: true}, g.stage(t), nil); err != nil {
		return nil, err
	}
	if err := g.sameInputs("all_reduce", func(shape []int) bool { return numel(shape) == n }); err != nil {
		return nil, err
	}
	out := g.result(t.DType, t.Shape)
	if _, err := g.reduceEveryChunk(out, 0, n, op); err != nil {
		return nil, err
	}
	return g.done(start, out)
}

// smallReduceScatter: each member reduces its own chunk of the staged
// inputs.
func (g *Ring) smallReduceScatter(ctx context.Context, t *Tensor, dim int, lens []int, op ReduceOp) (Buffer, error) {
	start := g.began()
	if err := g.meet(ctx, call{kind: "reduce_scatter", arg: dim<<1 | int(op), small: true}, g.stage(t), nil); err != nil {
		return nil, err
	}
	if err := g.sameInputs("reduce_scatter", func(shape []int) bool { return sameShape(shape, t.Shape) }); err != nil {
		return nil, err
	}
	shape := slices.Clone(t.Shape)
	shape[dim] = lens[g.Rank]
	out := g.result(t.DType, shape)
	outer, inner := around(t.Shape, dim)
	lo := 0
	for _, l := range lens[:g.Rank] {
		lo += l
	}
	span := rows{count: outer, len: lens[g.Rank] * inner, src: lo * inner, srcStride: t.Shape[dim] * inner, dstStride: lens[g.Rank] * inner}
	if err := g.reduceRows(out, span, op); err != nil {
		return nil, err
	}
	sz := int64(outer * inner * t.DType.Size())
	g.reduceScatterSteps(func(i int) int64 { return int64(lens[i]) * sz }, isHalf(t.DType) && op == OpSum)
	return g.done(start, out)
}

// smallAllGather: every member copies every staged block into its own
// result.
func (g *Ring) smallAllGather(ctx context.Context, t *Tensor, dim int, lens []int, shape []int) (Buffer, error) {
	start := g.began()
	if err := g.meet(ctx, call{kind: "all_gather", arg: dim, small: true}, g.stage(t), nil); err != nil {
		return nil, err
	}
	if err := g.checkBlocks(dim, lens); err != nil {
		return nil, err
	}
	out := g.result(t.DType, shape)
	outer, inner := around(shape, dim)
	at := 0
	for m, x := range g.posted().in {
		copyRows(out, x, rows{count: outer, len: lens[m] * inner, srcStride: lens[m] * inner, dst: at * inner, dstStride: shape[dim] * inner})
		at += lens[m]
	}
	sz := int64(outer * inner * t.DType.Size())
	g.allGatherSteps(func(i int) int64 { return int64(lens[i]) * sz })
	return g.done(start, out)
}

// smallBroadcast: the root stages its tensor, every member copies it.
func (g *Ring) smallBroadcast(ctx context.Context, t *Tensor, root int, dt ir.DType, shape []int) (Buffer, error) {
	start := g.began()
	p := g.Size()
	if g.Rank != root {
		t = nil
	}
	if err := g.meet(ctx, call{kind: "broadcast", arg: root, small: true}, g.stage(t), nil); err != nil {
		return nil, err
	}
	x := g.posted().in[root]
	if x == nil {
		return nil, fmt.Errorf("broadcast: the root has no tensor")
	}
	if x.DType != dt || !sameShape(x.Shape, shape) {
		return nil, fmt.Errorf("broadcast: got %s%v from the root, expected %s%v", x.DType, x.Shape, dt, shape)
	}
	out := g.result(dt, shape)
	copyRows(out, x, rows{count: 1, len: x.Numel()})
	g.sendBytes(int64(treeChildren(mod(g.Rank-root, p), p)) * x.Bytes())
	return g.done(start, out)
}
