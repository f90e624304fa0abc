package rt

// Collectives on a device that several ranks share.
//
// When the ranks of an in-process run share one device backend whose
// kernels can read every rank's buffers (logical ranks on one GPU), the
// shared-memory groups of comm_shm.go keep their protocol — each member
// posts its input and its result buffer, two barriers — but the data
// never leaves the device: between the barriers each member enqueues its
// part as device kernels (DeviceCollectives) that read the peers' posted
// buffers and write into the posted results, in the device's stream
// order. Nothing waits for the device: a member's later kernels, and the
// reuse of any buffer freed after the second barrier, come after those
// kernels in the same stream.
//
// The work is split as on the host: an all-reduce member reduces its
// balanced chunk of the flattened tensor and writes it into every
// member's result, a reduce-scatter member its own chunk, an all-gather
// member copies its block into every member's result, the root of a
// broadcast copies into every result, an all-to-all member gathers its
// pieces, and the root of a reduce sums the binomial tree. Reductions
// add in the ring's order (comm_shm.go), so results are bitwise the
// host path's (but for the payload of a NaN a device's sum makes); the
// bytes and ring steps reported are the ring's too.
// Every member gets a buffer of its own (the host path shares one
// all-reduce result per group; a device buffer has one owner).

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/meshrun/meshrun/ir"
)

// Rows are count rows of len elements: row i starts at Src + i·SrcStride
// in a source and at Dst + i·DstStride in a destination (elements, in
// the buffers' flat order).
type Rows struct {
	Count, Len     int
	Src, SrcStride int
	Dst, DstStride int
}

// DeviceCollectives is a device backend that runs the collectives of
// ranks sharing it. Each method enqueues work and returns; buffers are
// the backend's own. Its CopyIn copies the host tensor (a device upload
// cannot take the host's storage), so a caller's tensor is uploaded
// without a host copy first.
type DeviceCollectives interface {
	Backend
	// MaxMembers is the largest group it can serve; larger groups use
	// the host path.
	MaxMembers() int
	// Uninit is a buffer whose every element the caller will write.
	Uninit(dt ir.DType, shape []int) (Buffer, error)
	// ReduceRows writes into span's rows of every buffer of outs the
	// reduction of the members' rows of in, folded in member order
	// starting from member first (mod len(in)); a half-precision sum is
	// folded in f32 from member 0 and rounded once. Max keeps the
	// running value only where it is greater than the member's (maxInto).
	ReduceRows(outs, in []Buffer, first int, span Rows, op ReduceOp) error
	// CopyRows copies span's rows of x into every buffer of outs.
	CopyRows(outs []Buffer, x Buffer, span Rows) error
	// CopyBlock copies the box count of x at xOff into out at outOff.
	CopyBlock(out Buffer, outOff []int, x Buffer, xOff, count []int) error
	// TreeReduce writes into out the sum of in in the binomial tree's
	// order of Ring.Reduce rooted at member root (treeSum); half
	// precision summed in f32, rounded once.
	TreeReduce(out Buffer, in []Buffer, root int) error
}

// onDevice says whether this group runs its collectives on a device.
func (g *Ring) onDevice() bool { return g.shm != nil && g.shm.dev != nil }

// devInput is x as a buffer of the device: a host tensor (a value that
// came from the host tier) is uploaded, and drop frees that copy.
func (g *Ring) devInput(x Buffer) (b Buffer, drop func(), err error) {
	t, ok := x.(*Tensor)
	if !ok {
		return x, func() {}, nil
	}
	d := g.shm.dev
	if b, err = d.CopyIn(t); err != nil {
		return nil, nil, err
	}
	return b, func() { d.Free(b) }, nil
}

// devPrepare makes this member's buffers for a collective: x on the
// device (devInput) and a result of dt and shape (zeroed when zero). A
// failure is not returned at once but as own, for devEnter: the member
// still meets its peers, posting no result, and every member then fails
// alike (devOutsPosted) instead of waiting for it until the timeout.
func (g *Ring) devPrepare(x Buffer, dt ir.DType, shape []int, zero bool) (in, out Buffer, drop func(), own error) {
	drop = func() {}
	if x != nil {
		var d func()
		if in, d, own = g.devInput(x); own != nil {
			return nil, nil, drop, own
		}
		drop = d
	}
	out, own = g.devResult(dt, shape, zero)
	return in, out, drop, own
}

// devChecked is check's verdict on the posted buffers, once every member
// has posted a result (and so an input: devPrepare).
func (g *Ring) devChecked(check func() error) error {
	if err := g.devOutsPosted(); err != nil {
		return err
	}
	return check()
}

// devMeet posts x and out as this member's buffers for collective c and
// waits for every member (meet's protocol on the device postings).
func (g *Ring) devMeet(ctx context.Context, c call, x, out Buffer) error {
	g.begin()
	post := g.posted()
	post.din[g.Rank], post.dout[g.Rank], post.sig[g.Rank], post.ddev[g.Rank] = x, out, c, g.shm.dev
	if err := g.shm.s.bar.waitWith(ctx, g.shm.timeout, &g.shm.alarm, g.shm.park); err != nil {
		return err
	}
	for m, d := range post.ddev {
		if d != g.shm.dev {
			// members on different devices (or one on none): NewGroup
			// puts such a group on the host path, so only a world
			// whose devices changed after its groups were made gets
			// here; no kernel could read them all
			return fmt.Errorf("%s: member %d's buffers are on another device than member %d's", c.kind, m, g.Rank)
		}
	}
	return g.agree(c)
}

// devEnter meets the peers for collective c. A meeting that fails ends
// the collective there for every member alike (as meet's callers do: no
// second barrier); a failure of this member's own before it (own: its
// result could not be allocated) ends it at the second barrier, since the
// peers go on with their parts. done says whether it ended.
func (g *Ring) devEnter(ctx context.Context, start time.Time, c call, x, out Buffer, own error) (res Buffer, done bool, err error) {
	if err := g.devMeet(ctx, c, x, out); err != nil {
		if out != nil {
			g.shm.dev.Free(out)
		}
		return nil, true, err
	}
	if own != nil {
		res, err = g.devFinish(ctx, start, out, own)
		return res, true, err
	}
	return nil, false, nil
}

// devFinish waits at the second barrier, after which this member's
// kernels are enqueued and nobody enqueues reads of its buffers; it
// reports the ring's steps and returns out, or frees it on failure.
func (g *Ring) devFinish(ctx context.Context, start time.Time, out Buffer, err error) (Buffer, error) {
	// this member's failure is posted before the barrier, so that every
	// member fails when one did its part wrong (a launch that failed):
	// none returns a result the group did not finish
	post := g.posted()
	post.derr[g.Rank] = err
	perr := g.shm.s.bar.waitWith(ctx, g.shm.timeout, &g.shm.alarm, g.shm.park)
	if perr == nil {
		// (after a failed wait the peers may still be reading the
		// postings; this member's next collective overwrites them)
		for m, e := range post.derr {
			if e != nil && err == nil {
				err = fmt.Errorf("member %d failed: %w", m, e)
			}
		}
		post.din[g.Rank], post.dout[g.Rank] = nil, nil
	}
	if err == nil {
		err = perr
	}
	if err != nil {
		g.shm.steps = g.shm.steps[:g.shm.counted] // this collective's only
		if out != nil && perr == nil {
			g.shm.dev.Free(out)
		}
		// else this member left the second barrier (its context ended, or
		// a peer took too long) while a peer may not have issued its part
		// yet: that kernel would write into out's memory after the
		// allocator had handed it to someone else, so out is left to the
		// backend's teardown
		return nil, err
	}
	g.account(start)
	return out, nil
}

// devResult is a buffer for this member's result, or an error after which
// the member still meets its peers (so they fail alike, not wait).
func (g *Ring) devResult(dt ir.DType, shape []int, zero bool) (Buffer, error) {
	if zero {
		return g.shm.dev.Alloc(dt, shape)
	}
	return g.shm.dev.Uninit(dt, shape)
}

func (g *Ring) devAllReduce(ctx context.Context, x Buffer, op ReduceOp) (Buffer, error) {
	start := g.began()
	dt, shape, p := x.Elem(), x.Dims(), g.Size()
	n := numel(shape)
	x, out, drop, err := g.devPrepare(x, dt, shape, false)
	defer drop()
	if r, done, err := g.devEnter(ctx, start, call{kind: "all_reduce", arg: int(op)}, x, out, err); done {
		return r, err
	}
	post := g.posted()
	err = g.devChecked(func() error {
		return inputsAgree(post.din, g.Rank, "all_reduce", func(s []int) bool { return numel(s) == n })
	})
	if err == nil {
		lens := balanced(n, p)
		lo := sumInts(lens[:g.Rank])
		if lens[g.Rank] > 0 {
			err = g.shm.dev.ReduceRows(post.dout, post.din, g.Rank+1, Rows{Count: 1, Len: lens[g.Rank], Src: lo, Dst: lo}, op)
		}
		chunk := func(i int) int64 { return int64(lens[i] * dt.Size()) }
		g.reduceScatterSteps(chunk, isHalf(dt) && op == OpSum)
		g.allGatherSteps(chunk)
	}
	return g.devFinish(ctx, start, out, err)
}

func (g *Ring) devReduceScatter(ctx context.Context, x Buffer, dim int, lens []int, op ReduceOp) (Buffer, error) {
	start := g.began()
	if err := g.checkLens(x.Dims(), dim, lens); err != nil {
		return nil, err
	}
	dt, in := x.Elem(), x.Dims()
	shape := slices.Clone(in)
	shape[dim] = lens[g.Rank]
	x, out, drop, err := g.devPrepare(x, dt, shape, false)
	defer drop()
	if r, done, err := g.devEnter(ctx, start, call{kind: "reduce_scatter", arg: dim<<1 | int(op)}, x, out, err); done {
		return r, err
	}
	post := g.posted()
	err = g.devChecked(func() error {
		return inputsAgree(post.din, g.Rank, "reduce_scatter", func(s []int) bool { return sameShape(s, in) })
	})
	if err == nil {
		outer, inner := around(in, dim)
		mine := lens[g.Rank] * inner
		span := Rows{Count: outer, Len: mine, Src: sumInts(lens[:g.Rank]) * inner, SrcStride: in[dim] * inner, DstStride: mine}
		if mine > 0 && outer > 0 {
			err = g.shm.dev.ReduceRows([]Buffer{out}, post.din, g.Rank+1, span, op)
		}
		sz := int64(outer * inner * dt.Size())
		g.reduceScatterSteps(func(i int) int64 { return int64(lens[i]) * sz }, isHalf(dt) && op == OpSum)
	}
	return g.devFinish(ctx, start, out, err)
}

func (g *Ring) devAllGather(ctx context.Context, x Buffer, dim int, lens []int) (Buffer, error) {
	start := g.began()
	in := x.Dims()
	if dim < 0 || dim >= len(in) || len(lens) != g.Size() {
		return nil, fmt.Errorf("all_gather: dim %d and %d lengths for a %d-dim block in a group of %d", dim, len(lens), len(in), g.Size())
	}
	dt := x.Elem()
	shape := slices.Clone(in)
	shape[dim] = sumInts(lens)
	x, out, drop, err := g.devPrepare(x, dt, shape, false)
	defer drop()
	if r, done, err := g.devEnter(ctx, start, call{kind: "all_gather", arg: dim}, x, out, err); done {
		return r, err
	}
	post := g.posted()
	err = g.devChecked(func() error { return blocksAgree(post.din, g.Rank, dim, lens) })
	if err == nil {
		outer, inner := around(shape, dim)
		mine := lens[g.Rank] * inner
		span := Rows{Count: outer, Len: mine, SrcStride: mine, Dst: sumInts(lens[:g.Rank]) * inner, DstStride: shape[dim] * inner}
		if mine > 0 && outer > 0 {
			err = g.shm.dev.CopyRows(post.dout, x, span)
		}
		sz := int64(outer * inner * dt.Size())
		g.allGatherSteps(func(i int) int64 { return int64(lens[i]) * sz })
	}
	return g.devFinish(ctx, start, out, err)
}

// devOutsPosted checks that every member posted a result buffer: a
// member that could not allocate one still meets its peers, and then
// every member fails alike (also where no member writes into a peer's
// result: a peer that went on would wait for it at the next collective).
func (g *Ring) devOutsPosted() error {
	for m, o := range g.posted().dout {
		if o == nil {
			return fmt.Errorf("member %d has no buffer for the result", m)
		}
	}
	return nil
}

func (g *Ring) devAllToAll(ctx context.Context, x Buffer, splitDim int, lens []int, catDim int, catLens []int) (Buffer, error) {
	start := g.began()
	p, in := g.Size(), x.Dims()
	if err := g.checkLens(in, splitDim, lens); err != nil {
		return nil, fmt.Errorf("all_to_all: %v", err)
	}
	if catDim < 0 || catDim >= len(in) || len(catLens) != p {
		return nil, fmt.Errorf("all_to_all: cat dim %d, %d and %d lengths for a %d-dim block in a group of %d", catDim, len(lens), len(catLens), len(in), p)
	}
	dt := x.Elem()
	pieceLen := func(m int) int { // member m's piece's length along catDim
		if catDim == splitDim {
			return lens[g.Rank]
		}
		return catLens[m]
	}
	shape := slices.Clone(in)
	shape[splitDim] = lens[g.Rank]
	shape[catDim] = 0
	for m := range p {
		shape[catDim] += pieceLen(m)
	}
	x, out, drop, err := g.devPrepare(x, dt, shape, false)
	defer drop()
	if r, done, err := g.devEnter(ctx, start, call{kind: "all_to_all", arg: splitDim<<8 | catDim}, x, out, err); done {
		return r, err
	}
	post := g.posted()
	err = g.devChecked(func() error { return piecesAgree(post.din, g.Rank, splitDim, catDim, pieceLen) })
	soff, doff := make([]int, len(shape)), make([]int, len(shape))
	soff[splitDim] = sumInts(lens[:g.Rank])
	for m := 0; err == nil && m < p; m++ {
		count := slices.Clone(post.din[m].Dims())
		count[splitDim] = lens[g.Rank]
		if numel(count) > 0 {
			err = g.shm.dev.CopyBlock(out, doff, post.din[m], soff, count)
		}
		doff[catDim] += pieceLen(m)
	}
	if err == nil {
		// the pairwise exchange sends every piece but this member's own
		outer, inner := around(in, splitDim)
		g.sendBytes(int64((in[splitDim]-lens[g.Rank])*outer*inner) * int64(dt.Size()))
	}
	return g.devFinish(ctx, start, out, err)
}

func (g *Ring) devBroadcast(ctx context.Context, x Buffer, root int, dt ir.DType, shape []int) (Buffer, error) {
	start := g.began()
	p := g.Size()
	if root < 0 || root >= p {
		return nil, fmt.Errorf("broadcast: root %d in a group of %d", root, p)
	}
	if g.Rank != root {
		x = nil
	}
	x, out, drop, err := g.devPrepare(x, dt, shape, false)
	defer drop()
	if r, done, err := g.devEnter(ctx, start, call{kind: "broadcast", arg: root}, x, out, err); done {
		return r, err
	}
	post := g.posted()
	r := post.din[root]
	switch {
	case r == nil:
		err = fmt.Errorf("broadcast: the root has no tensor")
	case r.Elem() != dt || !sameShape(r.Dims(), shape):
		err = fmt.Errorf("broadcast: got %s%v from the root, expected %s%v", r.Elem(), r.Dims(), dt, shape)
	default:
		err = g.devOutsPosted()
	}
	if err == nil {
		if n := numel(shape); g.Rank == root && n > 0 {
			err = g.shm.dev.CopyRows(post.dout, r, Rows{Count: 1, Len: n})
		}
		g.sendBytes(int64(treeChildren(mod(g.Rank-root, p), p)) * r.Bytes())
	}
	return g.devFinish(ctx, start, out, err)
}

// devReduce: the root sums the binomial tree into its result; the others
// return zeros (as Ring.Reduce).
func (g *Ring) devReduce(ctx context.Context, x Buffer, root int) (Buffer, error) {
	start := g.began()
	p := g.Size()
	if root < 0 || root >= p {
		return nil, fmt.Errorf("reduce: root %d in a group of %d", root, p)
	}
	dt, in := x.Elem(), x.Dims()
	x, out, drop, err := g.devPrepare(x, dt, in, g.Rank != root)
	defer drop()
	if r, done, err := g.devEnter(ctx, start, call{kind: "reduce", arg: root}, x, out, err); done {
		return r, err
	}
	post := g.posted()
	err = g.devChecked(func() error {
		return inputsAgree(post.din, g.Rank, "reduce", func(s []int) bool { return sameShape(s, in) })
	})
	if err == nil && g.Rank == root && numel(in) > 0 {
		err = g.shm.dev.TreeReduce(out, post.din, root)
	}
	if err == nil && g.Rank != root {
		g.sendBytes(int64(numel(in) * wideDType(dt).Size()))
	}
	return g.devFinish(ctx, start, out, err)
}

// sameDevice says whether every member's backend is one device's.
func (w *shmWorld) sameDevice(members []int) bool {
	for _, m := range members {
		if w.devs[m] != w.devs[members[0]] {
			return false
		}
	}
	return true
}

// sendOnDevice sends b to peer as a device copy made now, in stream
// order after b's producer: the sender may free b after Flush (or at once:
// the copy is enqueued), and the receiver owns the copy. A host buffer is
// uploaded. The bytes are counted as the transport counts its own.
func (c *InProc) sendOnDevice(ctx context.Context, peer, tag int, b Buffer) error {
	var x Buffer
	var err error
	if t, ok := b.(*Tensor); ok {
		x, err = c.dev.CopyIn(t)
	} else {
		x, err = c.dev.Uninit(b.Elem(), b.Dims())
		if err == nil && numel(b.Dims()) > 0 {
			if err = c.dev.CopyRows([]Buffer{x}, b, Rows{Count: 1, Len: numel(b.Dims())}); err != nil {
				c.dev.Free(x)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("send to rank %d: %w", peer, err)
	}
	select {
	case c.mailbox(c.rank, peer, tag) <- x:
		c.T.sent[c.rank].Add(x.Bytes())
		return nil
	case <-ctx.Done():
		c.dev.Free(x)
		return fmt.Errorf("send to rank %d: %w", peer, ctxErr(ctx))
	}
}

// recvOnDevice takes the device copy peer sent.
func (c *InProc) recvOnDevice(ctx context.Context, peer, tag int, dt ir.DType, shape []int) (Buffer, error) {
	select {
	case x := <-c.mailbox(peer, c.rank, tag):
		if x.Elem() != dt || !sameShape(x.Dims(), shape) {
			c.dev.Free(x)
			return nil, fmt.Errorf("received %s%v from rank %d (tag %d), expected %s%v", x.Elem(), x.Dims(), peer, tag, dt, shape)
		}
		return x, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for rank %d: %w", peer, ctxErr(ctx))
	}
}

// mailbox is the channel of messages from one rank to another with a
// tag, made on first use and as deep as the transport's.
func (c *InProc) mailbox(from, to, tag int) chan Buffer {
	k := [3]int{from, to, tag}
	if ch, ok := c.shared.mail.Load(k); ok {
		return ch.(chan Buffer)
	}
	ch, _ := c.shared.mail.LoadOrStore(k, make(chan Buffer, 64))
	return ch.(chan Buffer)
}

func sumInts(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
