package rt_test

// A reference for the collectives that shares no code with the runtime: the
// expected results come from naive index loops over flat float64 data, not
// from rt's accumulate, SplitDim or ConcatDim, so a bug there cannot hide in
// both the implementation and its check. The file is an external test
// package for the same reason: it sees only rt's exported API.
//
// checkCollectives drives any implementation through memberFunc; ringMember
// is the adapter for rt.Ring. When the collective interface changes shape,
// only the adapter needs rewriting.

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
)

// dense is a tensor as the reference sees it: a shape and its elements in
// row-major order. A nil data means "no tensor" (non-roots of a broadcast).
type dense struct {
	shape []int
	data  []float64
}

type collective int

const (
	allGather collective = iota
	reduceScatter
	allReduce
	allToAll
	broadcast
)

var collectiveNames = []string{"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "broadcast"}

// call is one member's part in a collective that every member of group
// makes at the same time.
type call struct {
	kind   collective
	group  []int // global device ids, in rank order
	rank   int   // this member's index in group
	in     dense // this member's input
	dim    int   // all_gather, reduce_scatter: the dim; all_to_all: the dim cut into lens
	catDim int   // all_to_all: the dim the received pieces are joined along
	lens   []int // lengths along dim, one per member
	// catLens are the members' input lengths along catDim (all_to_all).
	catLens []int
	max     bool // reduce with max instead of sum
	root    int  // broadcast: the rank that holds the value
}

// memberFunc runs one member's call and returns what that member gets. All
// calls of one collective (and of the other groups running at the same
// time) go to the same memberFunc, from one goroutine per member.
type memberFunc func(ctx context.Context, c call) (dense, error)

// ringMember adapts the in-process communicator's groups (rt.Ring over a
// channel transport) of n devices.
func ringMember(n int) memberFunc {
	comms := rt.NewInProc(n)
	return func(ctx context.Context, c call) (dense, error) {
		g, err := comms[c.group[c.rank]].NewGroup(ctx, c.group[0], c.group)
		if err != nil {
			return dense{}, err
		}
		op := rt.OpSum
		if c.max {
			op = rt.OpMax
		}
		var in *rt.Tensor
		var arg rt.Buffer
		if c.in.data != nil {
			in = rt.FromSlice(slices.Clone(c.in.shape), slices.Clone(c.in.data))
			arg = in
		}
		var out rt.Buffer
		switch c.kind {
		case allGather:
			out, err = g.AllGather(ctx, arg, c.dim, c.lens)
		case reduceScatter:
			out, err = g.ReduceScatter(ctx, arg, c.dim, c.lens, op)
		case allReduce:
			out, err = g.AllReduce(ctx, arg, op)
		case allToAll:
			out, err = g.AllToAll(ctx, arg, c.dim, c.lens, c.catDim, c.catLens)
		case broadcast:
			out, err = g.Broadcast(ctx, arg, c.root, ir.F64, c.in.shape)
		}
		if err != nil {
			return dense{}, err
		}
		// Tensors are immutable once produced (rt.ChanTransport shares
		// them between devices): the input must come back untouched.
		if in != nil && !slices.Equal(in.Float64s(), c.in.data) {
			return dense{}, fmt.Errorf("the collective modified its input")
		}
		t := out.(*rt.Tensor)
		return dense{shape: t.Shape, data: t.Float64s()}, nil
	}
}

func TestRingCollectivesMatchReference(t *testing.T) {
	checkCollectives(t, ringMember)
}

// The reference itself, on values worked out by hand: two members holding
// [[1 2] [3 4]] and [[5 6] [7 8]].
func TestCollectiveReferenceByHand(t *testing.T) {
	a := dense{shape: []int{2, 2}, data: []float64{1, 2, 3, 4}}
	b := dense{shape: []int{2, 2}, data: []float64{5, 6, 7, 8}}
	g := []int{0, 1}
	both := func(c call) []call {
		c.group, c.lens = g, []int{1, 1}
		c0, c1 := c, c
		c0.rank, c0.in = 0, a
		c1.rank, c1.in = 1, b
		return []call{c0, c1}
	}
	for _, tc := range []struct {
		c    call
		want [2]dense
	}{
		{call{kind: allGather, dim: 1}, [2]dense{
			{[]int{2, 4}, []float64{1, 2, 5, 6, 3, 4, 7, 8}}, {[]int{2, 4}, []float64{1, 2, 5, 6, 3, 4, 7, 8}}}},
		{call{kind: reduceScatter, dim: 0}, [2]dense{
			{[]int{1, 2}, []float64{6, 8}}, {[]int{1, 2}, []float64{10, 12}}}},
		{call{kind: reduceScatter, dim: 1, max: true}, [2]dense{
			{[]int{2, 1}, []float64{5, 7}}, {[]int{2, 1}, []float64{6, 8}}}},
		{call{kind: allToAll, dim: 1, catDim: 0}, [2]dense{
			{[]int{4, 1}, []float64{1, 3, 5, 7}}, {[]int{4, 1}, []float64{2, 4, 6, 8}}}},
		{call{kind: broadcast, root: 1}, [2]dense{b, b}},
	} {
		got := reference(both(tc.c))
		for r := range got {
			if !slices.Equal(got[r].shape, tc.want[r].shape) || !slices.Equal(got[r].data, tc.want[r].data) {
				t.Errorf("%s rank %d: got %v %v, want %v %v", collectiveNames[tc.c.kind], r, got[r].shape, got[r].data, tc.want[r].shape, tc.want[r].data)
			}
		}
	}
}

// checkCollectives runs every collective on groups of 1 to 8 members of a
// 10-device world: in device order, and as random non-contiguous groups in
// random rank order, several disjoint groups at once (as the groups along
// one mesh axis run). Lengths are uneven and may be zero; data are small
// integers, positive and negative, so sums are exact in any order and max
// differs from sum and from zero.
func checkCollectives(t *testing.T, newWorld func(devices int) memberFunc) {
	const world = 10
	rng := rand.New(rand.NewSource(1))
	for p := 1; p <= 8; p++ {
		for trial := 0; trial < 3; trial++ {
			groups := [][]int{seq(p)}
			if trial > 0 {
				perm := rng.Perm(world)
				groups = nil
				for len(perm) >= p {
					groups = append(groups, perm[:p])
					perm = perm[p:]
				}
			}
			for dim := 0; dim < 3; dim++ {
				checkOne(t, newWorld(world), rng, groups, call{kind: allGather, dim: dim})
				for _, mx := range []bool{false, true} {
					checkOne(t, newWorld(world), rng, groups, call{kind: reduceScatter, dim: dim, max: mx})
				}
			}
			for _, mx := range []bool{false, true} {
				checkOne(t, newWorld(world), rng, groups, call{kind: allReduce, max: mx})
			}
			for _, sc := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {2, 1}, {1, 2}} {
				checkOne(t, newWorld(world), rng, groups, call{kind: allToAll, dim: sc[0], catDim: sc[1]})
			}
			for root := 0; root < p; root++ {
				checkOne(t, newWorld(world), rng, groups, call{kind: broadcast, root: root})
			}
		}
	}
}

// checkOne makes inputs for every member of every group, runs the
// collective c.kind on all of them at once and compares each member's
// result with the reference.
func checkOne(t *testing.T, run memberFunc, rng *rand.Rand, groups [][]int, c call) {
	t.Helper()
	p := len(groups[0])
	calls := make([][]call, len(groups))
	for gi, g := range groups {
		// Shapes are rank 3 so the cut dim has elements before and after
		// it; lens are uneven, zeros allowed, at least one element in all.
		base := []int{1 + rng.Intn(3), 1 + rng.Intn(3), 1 + rng.Intn(3)}
		lens := make([]int, p)
		for sum(lens) == 0 {
			for i := range lens {
				lens[i] = rng.Intn(4)
			}
		}
		calls[gi] = make([]call, p)
		for r := range g {
			m := c
			m.group, m.rank, m.lens = g, r, lens
			shape := slices.Clone(base)
			switch c.kind {
			case allGather:
				shape[c.dim] = lens[r]
			case reduceScatter:
				shape[c.dim] = sum(lens)
			case allToAll:
				// every member cuts the same lengths along dim; along
				// catDim each holds its own length
				if c.catDim != c.dim {
					shape[c.catDim] = 1 + rng.Intn(3)
				}
				shape[c.dim] = sum(lens)
			}
			if c.kind != broadcast || r == c.root {
				m.in = randDense(rng, shape)
			}
			calls[gi][r] = m
		}
		if c.kind == allToAll {
			cat := make([]int, p)
			for r := range cat {
				cat[r] = calls[gi][r].in.shape[c.catDim]
			}
			for r := range calls[gi] {
				calls[gi][r].catLens = cat
			}
		}
		if c.kind == broadcast {
			// the members that are not the root still know the shape
			for r := range calls[gi] {
				calls[gi][r].in.shape = slices.Clone(calls[gi][c.root].in.shape)
			}
		}
	}

	got := make([][]dense, len(groups))
	errs := make([][]error, len(groups))
	var wg sync.WaitGroup
	for gi := range groups {
		got[gi] = make([]dense, p)
		errs[gi] = make([]error, p)
		for r := range groups[gi] {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// a lost or misrouted message is a timeout, not a hang
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				got[gi][r], errs[gi][r] = run(ctx, calls[gi][r])
			}()
		}
	}
	wg.Wait()

	for gi, g := range groups {
		want := reference(calls[gi])
		for r := range g {
			c := calls[gi][r]
			what := fmt.Sprintf("%s dim=%d catDim=%d max=%v root=%d lens=%v groups=%v: rank %d (device %d)",
				collectiveNames[c.kind], c.dim, c.catDim, c.max, c.root, c.lens, groups, r, g[r])
			if errs[gi][r] != nil {
				t.Fatalf("%s: %v", what, errs[gi][r])
			}
			if !slices.Equal(got[gi][r].shape, want[r].shape) || !slices.Equal(got[gi][r].data, want[r].data) {
				t.Fatalf("%s:\n got  %v %v\n want %v %v", what, got[gi][r].shape, got[gi][r].data, want[r].shape, want[r].data)
			}
		}
	}
}

// reference computes what every member of one group gets from calls.
func reference(calls []call) []dense {
	c := calls[0]
	p := len(calls)
	out := make([]dense, p)
	ins := make([]dense, p)
	for r := range calls {
		ins[r] = calls[r].in
	}
	switch c.kind {
	case allGather:
		all := concat(ins, c.dim)
		for r := range out {
			out[r] = all
		}
	case reduceScatter:
		red := reduce(ins, c.max)
		for r := range out {
			out[r] = slice(red, c.dim, sum(c.lens[:r]), c.lens[r])
		}
	case allReduce:
		red := reduce(ins, c.max)
		for r := range out {
			out[r] = red
		}
	case allToAll:
		for r := range out {
			pieces := make([]dense, p)
			for m := range ins {
				pieces[m] = slice(ins[m], c.dim, sum(c.lens[:r]), c.lens[r])
			}
			out[r] = concat(pieces, c.catDim)
		}
	case broadcast:
		for r := range out {
			out[r] = ins[c.root]
		}
	}
	return out
}

// concat joins ts along dim: element idx of the result comes from the
// tensor whose range along dim holds idx[dim].
func concat(ts []dense, dim int) dense {
	shape := slices.Clone(ts[0].shape)
	shape[dim] = 0
	for _, t := range ts {
		shape[dim] += t.shape[dim]
	}
	out := dense{shape: shape, data: make([]float64, numel(shape))}
	idx := make([]int, len(shape))
	for i := range out.data {
		unravel(shape, i, idx)
		k, at := 0, idx[dim]
		for at >= ts[k].shape[dim] {
			at -= ts[k].shape[dim]
			k++
		}
		src := slices.Clone(idx)
		src[dim] = at
		out.data[i] = ts[k].data[ravel(ts[k].shape, src)]
	}
	return out
}

// slice is t[..., off:off+n, ...] along dim.
func slice(t dense, dim, off, n int) dense {
	shape := slices.Clone(t.shape)
	shape[dim] = n
	out := dense{shape: shape, data: make([]float64, numel(shape))}
	idx := make([]int, len(shape))
	for i := range out.data {
		unravel(shape, i, idx)
		idx[dim] += off
		out.data[i] = t.data[ravel(t.shape, idx)]
	}
	return out
}

// reduce adds (or takes the max of) ts elementwise.
func reduce(ts []dense, max bool) dense {
	out := dense{shape: ts[0].shape, data: slices.Clone(ts[0].data)}
	for _, t := range ts[1:] {
		for i, v := range t.data {
			if !max {
				out.data[i] += v
			} else if v > out.data[i] {
				out.data[i] = v
			}
		}
	}
	return out
}

func unravel(shape []int, flat int, idx []int) {
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d] = flat % shape[d]
		flat /= shape[d]
	}
}

func ravel(shape, idx []int) int {
	flat := 0
	for d := range shape {
		flat = flat*shape[d] + idx[d]
	}
	return flat
}

func numel(shape []int) int {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return n
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func randDense(rng *rand.Rand, shape []int) dense {
	d := dense{shape: shape, data: make([]float64, numel(shape))}
	for i := range d.data {
		d.data[i] = float64(rng.Intn(100) - 50)
	}
	return d
}
