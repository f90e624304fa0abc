package lower

import "github.com/meshrun/meshrun/ir"

// The bytes the blocks view says a device sends in a written collective
// are those of the runtime's algorithms (rt/comm.go), device by device:
// the busiest device's figure that explain's table gives hides that a
// broadcast's root sends and the other members do not, and a ring's
// uneven chunks.

// bytesSent is what device d sends in collective v, by the runtime's
// algorithms: rings for all_gather, reduce_scatter and all_reduce (one
// per axis of the group, as lowering spells them), binomial trees for
// broadcast and reduce, pairwise rounds for all_to_all, one message for
// a shift.
func (t *tracker) bytesSent(v *ir.Value, d int) int64 {
	size := int64(v.Type.DType.Size())
	L := int64(v.Args[0].Type.Numel())
	c := t.m.Coord(d)
	axes := v.Attrs.Axes
	p := func(i int) int64 { return int64(t.m.Axes[axes[i]].Size) }
	var elems int64
	switch v.Op {
	case "shift":
		elems = L
	case "all_to_all":
		elems = (p(0) - 1) * L / p(0)
	case "broadcast":
		vr := (int64(c[axes[0]]) - int64(v.Attrs.Root) + p(0)) % p(0)
		elems = L * treeSends(vr, p(0))
	case "reduce":
		if c[axes[0]] != v.Attrs.Root {
			elems = L
		}
		if v.Type.DType == ir.BF16 || v.Type.DType == ir.F16 {
			size = 4 // partial sums travel in f32
		}
	case "all_gather": // the last axis first, as lowering gathers
		cur := L
		for i := len(axes) - 1; i >= 0; i-- {
			elems += (p(i) - 1) * cur
			cur *= p(i)
		}
	case "reduce_scatter":
		cur := L
		for i := range axes {
			elems += (p(i) - 1) * cur / p(i)
			cur /= p(i)
		}
	case "all_reduce": // ring: every chunk but one's own, then every chunk but the next's
		for i, a := range axes {
			if n := p(i); n > 1 {
				r := int64(c[a])
				elems += ringAllReduceSends(L, n, r)
			}
		}
	}
	return elems * size
}

// treeSends is how many copies relative rank vr sends in a binomial
// broadcast over p: after receiving at its lowest set bit, one to each
// vr+m for the smaller powers of two m that stay in the group.
func treeSends(vr, p int64) int64 {
	top := int64(1)
	for top < p && vr&top == 0 {
		top <<= 1
	}
	var n int64
	for m := top >> 1; m > 0; m >>= 1 {
		if vr+m < p {
			n++
		}
	}
	return n
}

// chunk is the length of chunk i when n elements are cut into p balanced
// chunks (the first n mod p one longer).
func chunk(n, p, i int64) int64 {
	if i < n%p {
		return n/p + 1
	}
	return n / p
}
