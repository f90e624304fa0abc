package rt

// Recycling the results a group shares.
//
// A large all-reduce, all-gather or broadcast writes one result for its
// whole group (shared), which every member holds through its own tensor
// (view). No rank's arena may recycle it, since peers still read it, so
// it used to be fresh memory every call, zeroed by Go and freed by the
// collector: for the data-parallel MLP on two ranks that allocation was
// most of what kept the all-reduce at three times the copy-bandwidth
// ideal. Here the result counts its holders: each member's tensor of it
// is recorded in its rank's table (InProc.held); when the worker frees
// that tensor (Worker's drop) the count goes down, and when every member
// has let go the memory returns to the group's free list, where the next
// shared result of its dtype and size takes it. Every element of a shared
// result is written by the collective, so it needs no zeroing.
//
// A tensor that leaves its rank otherwise — sent to a peer, kept as an
// output or carried into the next step — is dropped from the table
// (forget, or at the end of the execution), so its count never reaches
// zero and the collector frees it as before.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrun/meshrun/ir"
)

// sharedResult is the memory of one shared result and how many members
// still hold it.
type sharedResult struct {
	refs atomic.Int32
	key  poolKey
	data any
	home *sharedFree
}

// sharedFree is a group's free list of shared results' memory.
type sharedFree struct {
	mu    sync.Mutex
	lists map[poolKey][]any
}

// sharedKeep is how many freed results of one dtype and size a group
// keeps: a step all-reduces the same sizes again and again.
const sharedKeep = 2

func (f *sharedFree) take(k poolKey) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.lists[k]
	if len(l) == 0 {
		return nil
	}
	d := l[len(l)-1]
	l[len(l)-1] = nil
	f.lists[k] = l[:len(l)-1]
	return d
}

func (f *sharedFree) put(k poolKey, d any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lists == nil {
		f.lists = map[poolKey][]any{}
	}
	if len(f.lists[k]) < sharedKeep {
		f.lists[k] = append(f.lists[k], d)
	}
}

// shared is, on the group's first member, the group's one result of a
// collective whose result every member holds alike (all-reduce,
// all-gather, broadcast): each member writes its part into it and gets a
// view of it (view), p times fewer bytes written than a copy per member.
// Its memory comes from the group's free list when a result of its size
// has been let go by every member, else it is fresh; never from a rank's
// arena. It is posted with the collective (posting.owner).
func (g *Ring) shared(dt ir.DType, shape []int) *Tensor {
	if g.Rank != 0 {
		return nil
	}
	g.begin()
	n := numel(shape)
	r := &sharedResult{key: keyOf(dt, n, false), home: &g.shm.s.free}
	r.refs.Store(int32(g.Size()))
	t := header(dt, shape)
	if d := r.home.take(r.key); d != nil {
		t.Data = d
	} else {
		t.Data = NewTensor(dt, shape).Data
	}
	r.data = t.Data
	g.posted().owner = r
	return t
}

// view is this member's tensor of the shared result out, with shape.
func (g *Ring) view(out *Tensor, shape []int) *Tensor {
	if out == nil || g.Rank == 0 {
		return out
	}
	v := header(out.DType, shape)
	v.Data = out.Data
	return v
}

// finishShared is finish for a shared result: out is the group's result
// and owner its count, both read after the first barrier (before the
// second, after which the first member may post its next collective in
// the same set). On success this member's view is recorded as a holder.
func (g *Ring) finishShared(ctx context.Context, start time.Time, out *Tensor, owner *sharedResult, shape []int, err error) (Buffer, error) {
	b, err := g.finish(ctx, start, g.view(out, shape), err)
	if err == nil && owner != nil && g.shm.held != nil {
		g.shm.held[b.(*Tensor)] = owner
	}
	return b, err
}

// Release says this rank is done with b: when b is its tensor of a shared
// result and every member has released theirs, the memory goes back to
// the group's free list. Any other buffer is left alone. The worker
// calls it as it frees a buffer; only the rank's own goroutine may.
func (c *InProc) Release(b Buffer) {
	t, ok := b.(*Tensor)
	if !ok || t.home != nil {
		return
	}
	if r, ok := c.held[t]; ok {
		delete(c.held, t)
		if r.refs.Add(-1) == 0 {
			r.home.put(r.key, r.data)
		}
	}
}

// forget stops counting b as a holder of a shared result: it leaves the
// rank (sent to a peer, which may read it after this rank is done).
func (c *InProc) forget(b Buffer) {
	if t, ok := b.(*Tensor); ok {
		delete(c.held, t)
	}
}

// forgetAll stops counting every tensor this rank still holds (at the
// end of an execution: outputs and carried state outlive it).
func (c *InProc) forgetAll() { clear(c.held) }
