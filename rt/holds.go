package rt

import (
	"math/bits"
	"unsafe"
)

// holds counts the slots (and sends in flight) holding each buffer: a
// buffer goes back to its backend when the last one lets go. Most
// buffers have one holder; a group-of-one collective's result is its
// argument (two slots), a send holds its buffer until Flush, and a fed
// buffer may come back as two sources.
//
// A map keyed by the Buffer interface hashed and compared every key
// through its dynamic type, 7-9% of a Megatron MLP mesh step; a map keyed
// by *Tensor still cost a hash and a group probe per hold and per free,
// about 6% of that step at GOMAXPROCS=1 (two per instruction). The CPU's
// buffers are now counted in tensorCounts, an open-addressing table of
// the pointers themselves (about half that); any other backend's in a
// map.
type holds struct {
	tensors tensorCounts
	other   map[Buffer]int32
}

func newHolds() holds {
	return holds{other: map[Buffer]int32{}}
}

func (h *holds) add(b Buffer) {
	if t, ok := b.(*Tensor); ok {
		h.tensors.add(t)
		return
	}
	h.other[b]++
}

// drop gives up one hold on b and says whether none is left.
func (h *holds) drop(b Buffer) bool {
	if t, ok := b.(*Tensor); ok {
		return h.tensors.drop(t)
	}
	n := h.other[b] - 1
	if n != 0 {
		h.other[b] = n
		return false
	}
	delete(h.other, b)
	return true
}

// count is how many holds b has.
func (h *holds) count(b Buffer) int32 {
	if t, ok := b.(*Tensor); ok {
		return h.tensors.count(t)
	}
	return h.other[b]
}

func (h *holds) clear() {
	h.tensors.clear()
	clear(h.other)
}

// tensorCounts is a count per *Tensor (ptrTable).
type tensorCounts struct{ ptrTable[Tensor, int32] }

func (c *tensorCounts) add(t *Tensor) { c.e[c.entry(t)].v++ }

// drop counts one hold of t less and says whether none is left (t's
// entry is then gone). Like the map it replaced, a drop of a tensor not
// held leaves it at -1 and frees nothing.
func (c *tensorCounts) drop(t *Tensor) bool {
	i := c.entry(t)
	c.e[i].v--
	if c.e[i].v != 0 {
		return false
	}
	c.remove(i)
	return true
}

func (c *tensorCounts) count(t *Tensor) int32 {
	v, _ := c.get(t)
	return v
}

// ptrTable maps pointers to values: a table of a power-of-two size, at
// most half full, each key in the first free entry from its hash on
// (linear probing), removed by shifting the entries after it back (no
// tombstones, so a lookup never walks past a run of live entries). It
// hashes the address alone (a Go map keyed by a pointer hashes it
// through the runtime's hasher and probes a group of control bytes): a
// rank's tables hold a few hundred keys, so one probe usually finds its
// entry. The table holds its keys, so no address in it is reused for
// another object while it is there.
type ptrTable[K, V any] struct {
	e     []ptrEntry[K, V]
	used  int
	shift uint // 64 - log2(len(e))
}

type ptrEntry[K, V any] struct {
	k *K
	v V
}

// home is k's first entry to look at: Fibonacci hashing of its address
// (the top bits of the product, which every address bit reaches).
func (c *ptrTable[K, V]) home(k *K) int {
	return int(uint64(uintptr(unsafe.Pointer(k))) * 0x9E3779B97F4A7C15 >> c.shift)
}

// find is k's entry, or the free entry where it would go.
func (c *ptrTable[K, V]) find(k *K) int {
	mask := len(c.e) - 1
	i := c.home(k)
	for c.e[i].k != k && c.e[i].k != nil {
		i = (i + 1) & mask
	}
	return i
}

// get is k's value, and whether k has one.
func (c *ptrTable[K, V]) get(k *K) (V, bool) {
	if len(c.e) == 0 {
		var zero V
		return zero, false
	}
	e := &c.e[c.find(k)]
	return e.v, e.k != nil // a free entry's value is the zero value
}

// entry is k's entry, made (with the zero value) if k has none.
func (c *ptrTable[K, V]) entry(k *K) int {
	if 2*(c.used+1) > len(c.e) {
		c.grow()
	}
	i := c.find(k)
	if c.e[i].k == nil {
		c.e[i].k = k
		c.used++
	}
	return i
}

// remove empties entry i, moving back each later entry of its run whose
// home is not in (i, j] cyclically, so that every entry stays reachable
// from its home without a gap (Knuth's algorithm R).
func (c *ptrTable[K, V]) remove(i int) {
	mask := len(c.e) - 1
	for j := (i + 1) & mask; c.e[j].k != nil; j = (j + 1) & mask {
		h := c.home(c.e[j].k)
		if i <= j && i < h && h <= j || i > j && (i < h || h <= j) {
			continue // reachable from its home without passing i
		}
		c.e[i] = c.e[j]
		i = j
	}
	c.e[i] = ptrEntry[K, V]{}
	c.used--
}

// grow doubles the table (64 entries at first) and puts every entry
// back.
func (c *ptrTable[K, V]) grow() {
	old := c.e
	n := max(64, 2*len(old))
	c.e = make([]ptrEntry[K, V], n)
	c.shift = uint(64 - bits.Len(uint(n-1)))
	c.used = 0
	for _, e := range old {
		if e.k != nil {
			c.e[c.find(e.k)] = e
			c.used++
		}
	}
}

func (c *ptrTable[K, V]) clear() {
	clear(c.e)
	c.used = 0
}
