package rt

import (
	"slices"
	"sync"
	"unsafe"

	"github.com/meshrun/meshrun/ir"
)

// hostPool is a caching allocator for host tensors, by dtype and element
// count (PyTorch's caching allocator in miniature). Fresh Go memory costs a
// page fault per page on first touch and zeroing; a collective's result
// that reuses a freed buffer of the same size costs neither, which is what
// lets an MPI collective run at the speed of the raw call.
//
// It is only safe where no other rank can hold a reference to a freed
// buffer: one rank per process (the MPI launcher). In process, the channel
// transport shares storage between ranks, so the local launcher does not
// recycle.
type hostPool struct {
	mu sync.Mutex
	// solo: one goroutine at a time uses the pool (a rank's arena: the
	// rank's one goroutine runs its kernels, frees their outputs and
	// takes its collectives' results), so mu is not taken; an
	// uncontended lock and unlock were a third of a small matmul's fixed
	// cost on its Launch and Free (issue 10, goal 5).
	solo bool
	// free holds freed tensors whole, header and Data, ready for reuse: a
	// kernel's output asked for in the shape it had last step gets the
	// very tensor back (reuse), so a step allocates no header either.
	// A list is held by pointer so that taking from it or adding to it
	// is one map lookup, no map assignment (two per Launch and Free of
	// a small matmul, issue 10 goal 5).
	free map[poolKey]*[]freed
	// lists caches free's entries, direct-mapped by key (listOf): a
	// list, once made, stays in free for the pool's life, so an entry
	// never goes stale, and a hit costs no hashing (free's lookups on
	// every kernel's output and every free were 2% of a Megatron MLP
	// mesh step)
	lists [128]listEntry
	// scratch holds kernels' working slices by key, each list a
	// *[][]float32 or *[][]float64 (the key's dtype): typed, so giving a
	// slice back boxes nothing (an f64 slice boxed as any was an
	// allocation per kernel that used one)
	scratch map[poolKey]any
	held    int64 // bytes in free and scratch
	limit   int64 // beyond this, freed buffers go to the collector
	// budget, when set, bounds heldTensors plus out, the bytes of the
	// tensors this pool has handed out (zeroed) and not had back: a
	// rank's arena keeps a freed buffer only while what the rank uses and
	// keeps stays within its budget (its peak in the plan; see
	// budgetRanks). Without it the free lists keep every size a step ever
	// freed on top of what is in use: 256 data-parallel ranks held 1.31x
	// the plan's total, 1.19x with it. Kernels' float64 scratch is outside
	// the plan and the budget.
	budget      int64
	out         int64
	heldTensors int64
	min         int // smaller buffers are not recycled
}

// freed is a tensor on a free list, with its storage's address: the
// check that a buffer is not already there reads the addresses in a row
// instead of following each tensor to its storage.
type freed struct {
	t  *Tensor
	at unsafe.Pointer
}

// poolKey is a free list's key: element count, dtype and whether it is
// a kernel's f64 working copy (kept apart: see budget), packed into one
// word: a struct key was hashed by the generic hasher, 3% of a mesh step
// of the tiny GPT (issue 10).
type poolKey uint64

func keyOf(dt ir.DType, n int, scratch bool) poolKey {
	k := uint64(n)<<9 | uint64(dt)<<1
	if scratch {
		k |= 1
	}
	return poolKey(k)
}

// listEntry is one entry of hostPool.lists.
type listEntry struct {
	k poolKey
	l *[]freed
}

// listOf is free's list for key k, nil if there is none yet. Under the
// pool's lock.
func (p *hostPool) listOf(k poolKey) *[]freed {
	e := &p.lists[uint64(k)*0x9E3779B97F4A7C15>>(64-7)] // 128 entries
	if e.l != nil && e.k == k {
		return e.l
	}
	l := p.free[k]
	if l != nil {
		*e = listEntry{k, l}
	}
	return l
}

// poolMin is the smallest buffer worth recycling (smaller ones are cheap
// to allocate and would crowd the lists).
const poolMin = 4096

// arenaLimit bounds the bytes a rank's arena keeps for reuse.
const arenaLimit = 1 << 30

func newHostPool(limit int64) *hostPool {
	return &hostPool{free: map[poolKey]*[]freed{}, scratch: map[poolKey]any{}, limit: limit, min: poolMin}
}

// get returns a tensor of shape whose elements are unspecified: the caller
// overwrites every one (a collective's result). A nil pool allocates.
func (p *hostPool) get(dt ir.DType, shape []int) *Tensor {
	if t := p.reuse(dt, shape); t != nil {
		return t
	}
	return NewTensor(dt, shape)
}

// reuse returns a freed tensor of dt and shape's element count, with
// unspecified elements, or nil: the tensor itself when its shape is shape
// (the same instruction's output, a step later), else its storage under a
// new header. Its home is unset.
func (p *hostPool) reuse(dt ir.DType, shape []int) *Tensor {
	return p.reuseN(dt, shape, numel(shape))
}

// reuseN is reuse for a shape of count elements that the caller counted.
func (p *hostPool) reuseN(dt ir.DType, shape []int, count int) *Tensor {
	t := p.take(dt, count, shape)
	if t == nil {
		return nil
	}
	if !slices.Equal(t.Shape, shape) {
		// a new header, never a write into t.Shape: a kernel may have
		// given its output a shape slice it shares (reshape)
		h := header(dt, shape)
		h.Data = t.Data
		return h
	}
	t.home = nil
	return t
}

// shapeScan is how many of a free list's last entries take looks through
// for one of the asked shape.
const shapeScan = 8

// take removes a freed tensor of n elements of dt, or returns nil,
// preferring among the list's last few entries one whose shape is shape
// (else the last one freed): a list
// mixes every shape of one element count ([8, 16, 32] and [8, 2, 16, 16],
// a scalar and [1]), and the last one freed is often another shape than
// the one asked for, whose header the caller must then make anew
// (hostPool.reuse): 2 of every 5 headers the tiny GPT's mesh step
// allocated (issue 10).
func (p *hostPool) take(dt ir.DType, n int, shape []int) *Tensor {
	if p == nil || n < p.min {
		return nil
	}
	k := keyOf(dt, n, false)
	p.lock() // unlocked by hand, not deferred: this is every kernel's output
	list := p.listOf(k)
	if list == nil || len(*list) == 0 {
		p.unlock()
		return nil
	}
	l := *list
	last := len(l) - 1
	for i := last; i >= max(0, last-shapeScan+1); i-- {
		if slices.Equal(l[i].t.Shape, shape) {
			l[i], l[last] = l[last], l[i]
			break
		}
	}
	t := l[last].t
	l[last] = freed{}
	*list = l[:last]
	size := int64(n * dt.Size())
	p.held -= size
	p.heldTensors -= size
	p.unlock()
	return t
}

// scalarDType is T's dtype.
func scalarDType[T float32 | float64]() ir.DType {
	var z T
	if _, ok := any(z).(float32); ok {
		return ir.F32
	}
	return ir.F64
}

// takeScratch removes a kernel's freed working slice of n elements of T
// (contents unspecified), or returns nil.
func takeScratch[T float32 | float64](p *hostPool, n int) []T {
	if p == nil || n < p.min {
		return nil
	}
	dt := scalarDType[T]()
	p.lock()
	defer p.unlock()
	list, _ := p.scratch[keyOf(dt, n, true)].(*[][]T)
	if list == nil || len(*list) == 0 {
		return nil
	}
	l := *list
	d := l[len(l)-1]
	l[len(l)-1] = nil
	*list = l[:len(l)-1]
	p.held -= int64(n * dt.Size())
	return d
}

// putScratch takes back a kernel's working slice s (from takeScratch, or
// made when there was none).
func putScratch[T float32 | float64](p *hostPool, s []T) {
	n := len(s)
	if p == nil || n < p.min {
		return
	}
	dt := scalarDType[T]()
	size := int64(n * dt.Size())
	k := keyOf(dt, n, true)
	p.lock()
	defer p.unlock()
	list, _ := p.scratch[k].(*[][]T)
	if list == nil {
		list = new([][]T)
		p.scratch[k] = list
	}
	for _, f := range *list {
		if unsafe.SliceData(f) == unsafe.SliceData(s) {
			return // already here: never hand one buffer out twice
		}
	}
	if p.held+size > p.limit {
		return
	}
	*list = append(*list, s)
	p.held += size
}

// zeroed returns a zero-filled tensor of shape, reusing a freed buffer of
// its size when there is one: a kernel's output. It remembers p as the
// tensor's home, so Free can tell a buffer this rank made (and may
// recycle) from one a peer shares. A nil pool allocates.
func (p *hostPool) zeroed(dt ir.DType, shape []int) *Tensor {
	if p == nil {
		return NewTensor(dt, shape)
	}
	t := p.reuse(dt, shape)
	if t != nil {
		clearData(t.Data) // a fresh buffer is zero already
	} else {
		t = NewTensor(dt, shape)
	}
	t.home = p
	p.handOut(t.Bytes())
	return t
}

// handOut counts n bytes of tensors handed out against the budget.
func (p *hostPool) handOut(n int64) {
	if p.budget > 0 {
		p.lock()
		p.out += n
		p.unlock()
	}
}

// f64 returns a zeroed float64 scratch slice of n elements, a kernel's
// working copy in float64: give it back with done once the kernel no
// longer reads it. A nil pool allocates.
func (p *hostPool) f64(n int) []float64 {
	if s := takeScratch[float64](p, n); s != nil {
		clear(s)
		return s
	}
	return make([]float64, n)
}

// float64s is t.Float64s in a scratch slice from p.
func (p *hostPool) float64s(t *Tensor) []float64 {
	if p == nil {
		return t.Float64s()
	}
	out := p.f64(t.Numel())
	storeInto(out, t)
	return out
}

// done takes back scratch slices from f64 and float64s.
func (p *hostPool) done(scratch ...[]float64) {
	for _, s := range scratch {
		if s != nil {
			putScratch(p, s)
		}
	}
}

// clearData zeroes a storage slice.
func clearData(d any) {
	switch x := d.(type) {
	case []float32:
		clear(x)
	case []float64:
		clear(x)
	case []int32:
		clear(x)
	case []int64:
		clear(x)
	case []uint16:
		clear(x)
	}
}

// put takes back a tensor nobody references any more, header and all;
// a view's storage is someone else's (the npy cache's) and is never
// taken.
func (p *hostPool) put(t *Tensor) {
	if t.view {
		return
	}
	p.keep(t)
}

// keep adds a freed tensor to its free list, within the limit and the
// budget.
func (p *hostPool) keep(t *Tensor) {
	n := t.Numel()
	if p == nil || n < p.min {
		return
	}
	size := int64(n * t.DType.Size())
	k := keyOf(t.DType, n, false)
	at := dataPtr(t.Data)
	p.lock() // unlocked by hand, not deferred: every Free comes here
	p.keepLocked(t, k, at, size)
	p.unlock()
}

// lock takes mu unless the pool is solo.
func (p *hostPool) lock() {
	if !p.solo {
		p.mu.Lock()
	}
}

// unlock releases what lock took.
func (p *hostPool) unlock() {
	if !p.solo {
		p.mu.Unlock()
	}
}

// keepLocked is keep's work under p.mu.
func (p *hostPool) keepLocked(t *Tensor, k poolKey, at unsafe.Pointer, size int64) {
	list := p.listOf(k)
	if list == nil {
		list = new([]freed)
		p.free[k] = list
	}
	for _, f := range *list {
		if f.at == at {
			return // already here: never hand one buffer out twice
		}
	}
	if p.budget > 0 {
		p.out -= size
	}
	if p.held+size > p.limit || p.budget > 0 && p.heldTensors+size+p.out > p.budget {
		return
	}
	*list = append(*list, freed{t, at})
	p.held += size
	p.heldTensors += size
}

// dataPtr is the address of a storage slice's first element.
func dataPtr(d any) unsafe.Pointer {
	switch x := d.(type) {
	case []float32:
		return unsafe.Pointer(unsafe.SliceData(x))
	case []float64:
		return unsafe.Pointer(unsafe.SliceData(x))
	case []int32:
		return unsafe.Pointer(unsafe.SliceData(x))
	case []int64:
		return unsafe.Pointer(unsafe.SliceData(x))
	case []uint16:
		return unsafe.Pointer(unsafe.SliceData(x))
	}
	return nil
}

// newArena is a rank's pool for its kernels' outputs. It recycles every
// size: a step allocates the same sizes every time, so even scalars find
// their buffer again (on the tiny GPT, recycling from 1 element instead
// of poolMin saves 0.4 MB and 400 allocations per step).
//
// budget, if positive, bounds what the arena keeps (hostPool.budget).
// Only its rank's goroutine may use it (solo: no lock).
func newArena(budget int64) *hostPool {
	p := newHostPool(arenaLimit)
	p.min = 1
	p.budget = budget
	p.solo = true
	return p
}
