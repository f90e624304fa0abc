package rt

// Buckets at run time (plan/bucket.go): the first member of a bucket runs
// every member's collective in one launch, and the later members take
// their results from it; each member still holds its result and frees
// its slots at its own instruction, and its event carries the bytes its
// part sent, so the byte counts read as if the members had run one by one
// (the time does not: the first member's event spans the launch, and the
// later members' take none).
//
// On the in-process launcher a run of members whose inputs are small
// together is one staged collective (comm_shm_small.go): each member
// copies every part into its staging buffer, the group meets once, and
// each member reduces every part, chunk by chunk in the ring's order, so
// that every result is bitwise the one the part's own all-reduce gives.
// Elsewhere (message passing, device collectives, a part too big for the
// staged path) the parts run one after another, and so do the members of
// a bucket of reduce-scatters or all-gathers everywhere: the cost model
// prices those buckets as one launch (DeepSpeed's buckets, NCCL's grouped
// calls), which no launcher here runs. A launch that fails is reported at
// its member's instruction, naming the bucket's first (partError).

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// bucketFactor scales the one-barrier path's bound (shmShared.small,
// shmSmallBytes by default) to a staged bucket's: that bound is what one
// collective's redundant reduction is worth against one barrier; a bucket
// saves a barrier per part, so it may read more. A ring whose one-barrier
// path is off stages no bucket.
const bucketFactor = 8

// shmBucketBytes is a staged bucket's bound at the default threshold.
const shmBucketBytes = bucketFactor * shmSmallBytes

// launched is the bucket a rank is in: its members' arguments, results
// and the bytes each part sent, handed to the later members in order
// (the slices are kept from one bucket to the next).
type launched struct {
	args []Buffer
	outs []Buffer
	sent []int64
	next int
}

// inBucket says whether instruction i runs as a member of a bucket: not
// under a simulated clock or a device stopwatch, which time each
// collective on its own, and not in a group of one (the identity).
func (x *execution) inBucket(i int, b *plan.Bound) bool {
	prog := x.w.Prog.Prog
	in := &prog.Instrs[i]
	if in.Kind != plan.Collective || x.clk != nil || x.w.watch != nil || len(b.Members) < 2 {
		return false
	}
	return in.Joins || (i+1 < len(prog.Instrs) && prog.Instrs[i+1].Joins)
}

// bucketStep runs member i of a bucket: the first launches them all; a
// later one takes its result. It returns the bytes the member's part sent.
func (x *execution) bucketStep(ctx context.Context, i int) (out Buffer, sent int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	// a member has one result: none of the further results (more) of the
	// instruction dispatched before it, which step would check and hold
	x.more = nil
	prog := x.w.Prog.Prog
	in := &prog.Instrs[i]
	l := &x.w.bucket
	if in.Joins {
		if l.next >= len(l.outs) {
			return nil, 0, fmt.Errorf("internal error: %s joins a bucket that launched %d all-reduces", in.Name(), len(l.outs))
		}
		out, sent := l.outs[l.next], l.sent[l.next]
		l.outs[l.next] = nil
		l.next++
		return out, sent, nil
	}
	n := prog.BucketAt(i)
	l.args, l.outs, l.sent, l.next = l.args[:0], grown(l.outs, n), grown(l.sent, n), 1
	for k := range n {
		l.args = append(l.args, x.slots[prog.Instrs[i+k].Args[0]])
	}
	timeout := x.w.Timeout
	if x.w.selfTimed[in.Group] {
		timeout = 0 // the group times its own waits out, as dispatch knows
	}
	if in.Step.Kind == sbp.AllReduce {
		err = allReduceBucket(ctx, x.w.Groups[in.Group], l.args, reduceOp(in.Step), timeout, x.w.Comm, l.outs, l.sent)
	} else {
		err = x.eachCollective(ctx, i, timeout)
	}
	if pe, ok := err.(*partError); ok {
		pe.of = n
	}
	clear(l.args)
	if err != nil {
		clear(l.outs)
		return nil, 0, err
	}
	return l.outs[0], l.sent[0], nil
}

// eachCollective runs the reduce-scatters or all-gathers of the bucket at
// instruction i one after another, into the worker's bucket (launched):
// they have no staged path, and one launch of them would be one ring over
// their blocks side by side, which no transport here runs.
func (x *execution) eachCollective(ctx context.Context, i int, timeout time.Duration) error {
	w, l := x.w, &x.w.bucket
	for k, arg := range l.args {
		in, b := &w.Prog.Prog.Instrs[i+k], &w.Prog.Instrs[i+k]
		lctx, cancel := withDeadline(ctx, timeout)
		before := w.Comm.BytesSent()
		out, err := collectiveStep(lctx, w.Groups[in.Group], in, b, arg)
		cancel()
		if err != nil {
			return &partError{part: k, err: err}
		}
		l.outs[k], l.sent[k] = out, w.Comm.BytesSent()-before
	}
	return nil
}

// grown is xs at length n, zeroed, reusing its array when it is long
// enough.
func grown[T any](xs []T, n int) []T {
	if cap(xs) < n {
		return make([]T, n)
	}
	xs = xs[:n]
	clear(xs)
	return xs
}

// sentCounter counts the bytes a rank has sent (Comm's BytesSent).
type sentCounter interface{ BytesSent() int64 }

// allReduceBucket all-reduces every buffer of xs over g into outs (sent:
// each part's bytes): a shared-memory ring stages runs of small parts
// together; any other part or group runs its own all-reduce. Each launch
// waits for its peers at most timeout (0: as long as ctx lets it), as a
// collective on its own does.
func allReduceBucket(ctx context.Context, g Group, xs []Buffer, op ReduceOp, timeout time.Duration, c sentCounter, outs []Buffer, sent []int64) error {
	ring, _ := g.(*Ring)
	for k := 0; k < len(xs); {
		lctx, cancel := withDeadline(ctx, timeout)
		var err error
		n := 0
		if ring != nil {
			n = ring.stagedRun(xs[k:])
		}
		if n > 1 {
			err = ring.stagedAllReduce(lctx, xs[k:k+n], op, outs[k:k+n], sent[k:k+n])
		} else {
			n = 1
			before := c.BytesSent()
			outs[k], err = g.AllReduce(lctx, xs[k], op)
			sent[k] = c.BytesSent() - before
		}
		cancel()
		if err != nil {
			return &partError{part: k, err: err}
		}
		k += n
	}
	return nil
}

// partError is a bucket's failure at the launch of part (its first part,
// for a staged run of several) of its of members: the rank reports it at
// that member's instruction (execution.step), so that the fault names the
// collective and the source line whose launch failed, not the bucket's
// first member's.
type partError struct {
	part, of int
	err      error
}

func (e *partError) Error() string { return e.err.Error() }
func (e *partError) Unwrap() error { return e.err }

// withDeadline is ctx with a deadline timeout from now (none when timeout is
// not positive).
func withDeadline(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, timeout)
}

// stagedRun is how many of xs, from the first, one staged all-reduce
// takes: host tensors of one dtype on a shared-memory ring whose bytes
// times the group's size stay within bucketFactor times its one-barrier
// bound (shmBucketBytes by default). Every member counts
// from the same declared sizes, so all take the same runs.
func (g *Ring) stagedRun(xs []Buffer) int {
	if g.shm == nil || g.onDevice() {
		return 0
	}
	var total int64
	for k, b := range xs {
		t, ok := b.(*Tensor)
		if !ok || t.DType != xs[0].(*Tensor).DType {
			return k
		}
		total += t.Bytes()
		if small := g.shm.s.small; small < math.MaxInt64/bucketFactor && total*int64(g.Size()) > bucketFactor*small {
			return k
		}
	}
	return len(xs)
}

// stagedAllReduce all-reduces the tensors of xs (stagedRun's run) in one
// meeting: each member stages them back to back, and reduces each part's
// chunks in the ring's order for that part, into outs.
func (g *Ring) stagedAllReduce(ctx context.Context, xs []Buffer, op ReduceOp, outs []Buffer, sent []int64) error {
	start := g.began()
	total := 0
	for _, b := range xs {
		total += b.(*Tensor).Numel()
	}
	if err := g.meet(ctx, call{kind: "all_reduce bucket", arg: int(op), small: true}, g.stageAll(xs, total), nil); err != nil {
		return err
	}
	if err := g.sameInputs("all_reduce bucket", func(shape []int) bool { return numel(shape) == total }); err != nil {
		return err
	}
	off := 0
	for k, b := range xs {
		t := b.(*Tensor)
		out := g.result(t.DType, t.Shape)
		var err error
		if sent[k], err = g.reduceEveryChunk(out, off, t.Numel(), op); err != nil {
			return err
		}
		outs[k] = out
		off += t.Numel()
	}
	_, err := g.done(start, nil)
	return err
}

// stageAll copies the tensors of xs, back to back, into this member's
// staging buffer (stage, for several tensors), and returns the flat
// tensor of total elements to post.
func (g *Ring) stageAll(xs []Buffer, total int) *Tensor {
	st := g.staged(xs[0].(*Tensor).DType, total)
	st.Shape = append(st.Shape[:0], total)
	off := 0
	for _, b := range xs {
		t := b.(*Tensor)
		copyRows(st, t, rows{count: 1, len: t.Numel(), dst: off})
		off += t.Numel()
	}
	return st
}
