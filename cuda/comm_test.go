package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
)

// The collectives of logical ranks sharing the GPU (rt/comm_dev.go and
// comm.cu) against the host's shared-memory collectives, which are
// bitwise the message-passing ring (rt's own tests): the same inputs
// through both must give the same results bit for bit, the same bytes
// sent per rank, and the device's results must be device buffers (the
// data never went through the host). Every dtype, sum and max, groups of
// 1 to 8 members in a shuffled ring order, uneven lengths, and for max
// NaNs, infinities and signed zeros.

// commWorld is p ranks' groups over one in-process world, on be's device
// when be is not nil.
type commWorld struct {
	be     *Backend
	comms  []*rt.InProc
	groups []rt.Group // per member, in ring order
}

func newCommWorld(t testing.TB, be *Backend, p int) *commWorld {
	w := &commWorld{be: be, comms: rt.NewInProc(p), groups: make([]rt.Group, p)}
	members := rand.New(rand.NewSource(int64(p))).Perm(p)
	for _, c := range w.comms {
		if be != nil {
			c.DrawResultsFrom(be)
		}
	}
	for i, m := range members {
		g, err := w.comms[m].NewGroup(context.Background(), 3, members)
		require.NoError(t, err)
		w.groups[i] = g
	}
	return w
}

// run calls f on every member at once, member i with input ins[i] (moved
// to the device first on a device world), and returns the results on the
// host, and each member's bytes sent.
func (w *commWorld) run(t *testing.T, ins []*rt.Tensor, f func(ctx context.Context, i int, g rt.Group, x rt.Buffer) (rt.Buffer, error)) ([]*rt.Tensor, []int64) {
	t.Helper()
	p := len(w.groups)
	outs, errs, sent := make([]*rt.Tensor, p), make([]error, p), make([]int64, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, g := range w.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me := w.comms[memberRank(g, i, w)]
			before := me.BytesSent()
			var x rt.Buffer
			if ins[i] != nil {
				x = ins[i].Clone()
				if w.be != nil {
					if x, errs[i] = w.be.CopyIn(ins[i]); errs[i] != nil {
						return
					}
					defer w.be.Free(x)
				}
			}
			r, err := f(ctx, i, g, x)
			if errs[i] = err; err != nil {
				return
			}
			sent[i] = me.BytesSent() - before
			if w.be != nil {
				if _, ok := r.(*Buf); !ok {
					errs[i] = fmt.Errorf("member %d's result is a %T, not a device buffer", i, r)
					return
				}
				outs[i], errs[i] = w.be.CopyOut(r)
				w.be.Free(r)
				return
			}
			outs[i] = r.(*rt.Tensor)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "member %d", i)
	}
	return outs, sent
}

// memberRank is the world rank of the group's member i.
func memberRank(g rt.Group, i int, w *commWorld) int {
	return g.(*rt.Ring).Devices[i]
}

// randomTensor fills a tensor of dt with mixed magnitudes (non-integers,
// so that the order of a sum shows in the low bits); special adds NaNs,
// infinities and signed zeros for max.
func randomTensor(rng *rand.Rand, dt ir.DType, shape []int, special bool) *rt.Tensor {
	t := rt.NewTensor(dt, shape)
	val := func() float64 {
		if special && rng.Intn(6) == 0 {
			return []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, math.Copysign(0, -1)}[rng.Intn(5)]
		}
		return rng.NormFloat64() * math.Pow(10, float64(rng.Intn(5)-2))
	}
	switch d := t.Data.(type) {
	case []float32:
		for i := range d {
			d[i] = float32(val())
		}
	case []float64:
		for i := range d {
			d[i] = val()
		}
	case []int32:
		for i := range d {
			d[i] = int32(rng.Intn(2001) - 1000)
		}
	case []int64:
		for i := range d {
			d[i] = int64(rng.Intn(2001) - 1000)
		}
	case []uint16:
		to := rt.F32ToBF16
		if dt == ir.F16 {
			to = rt.F32ToF16
		}
		for i := range d {
			d[i] = to(float32(val()))
		}
	}
	return t
}

// bitsEqual says whether two tensors are the same bit for bit.
func bitsEqual(t *testing.T, got, want *rt.Tensor, what string) {
	t.Helper()
	require.Equal(t, want.DType, got.DType, what)
	require.Equal(t, want.Shape, got.Shape, what)
	a, b := got.Bits(), want.Bits()
	for i := range b {
		if a[i] != b[i] {
			require.Failf(t, "not bitwise the host's", "%s: element %d of %d: %#x, host %#x", what, i, len(b), a[i], b[i])
		}
	}
}

// collectiveCase is one collective: each member's input, and the call.
type collectiveCase struct {
	name string
	ins  func(rng *rand.Rand, p int) []*rt.Tensor
	call func(ctx context.Context, i int, g rt.Group, x rt.Buffer) (rt.Buffer, error)
}

func collectiveCases(dt ir.DType, op rt.ReduceOp) []collectiveCase {
	special := op == rt.OpMax && dt != ir.I32 && dt != ir.I64
	lens := func(p int) []int { // uneven, one of them empty when p > 2
		l := make([]int, p)
		for i := range l {
			l[i] = (i*5 + 3) % 4
		}
		return l
	}
	same := func(shape func(p int) []int) func(*rand.Rand, int) []*rt.Tensor {
		return func(rng *rand.Rand, p int) []*rt.Tensor {
			ins := make([]*rt.Tensor, p)
			for i := range ins {
				ins[i] = randomTensor(rng, dt, shape(p), special)
			}
			return ins
		}
	}
	cases := []collectiveCase{
		{"all_reduce", same(func(int) []int { return []int{5, 7} }),
			func(ctx context.Context, _ int, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
				return g.AllReduce(ctx, x, op)
			}},
		{"reduce_scatter", same(func(p int) []int { return []int{3, sumOf(lens(p)), 2} }),
			func(ctx context.Context, _ int, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
				return g.ReduceScatter(ctx, x, 1, lens(g.Size()), op)
			}},
	}
	if op == rt.OpMax {
		return cases
	}
	return append(cases,
		collectiveCase{"all_gather", func(rng *rand.Rand, p int) []*rt.Tensor {
			ins := make([]*rt.Tensor, p)
			for i := range ins {
				ins[i] = randomTensor(rng, dt, []int{2, lens(p)[i], 3}, false)
			}
			return ins
		}, func(ctx context.Context, _ int, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
			return g.AllGather(ctx, x, 1, lens(g.Size()))
		}},
		collectiveCase{"all_to_all", func(rng *rand.Rand, p int) []*rt.Tensor {
			ins := make([]*rt.Tensor, p)
			for i := range ins {
				ins[i] = randomTensor(rng, dt, []int{sumOf(lens(p)), i%3 + 1, 2}, false)
			}
			return ins
		}, func(ctx context.Context, _ int, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
			cat := make([]int, g.Size())
			for i := range cat {
				cat[i] = i%3 + 1
			}
			return g.AllToAll(ctx, x, 0, lens(g.Size()), 1, cat)
		}},
		collectiveCase{"broadcast", func(rng *rand.Rand, p int) []*rt.Tensor {
			ins := make([]*rt.Tensor, p)
			ins[p-1] = randomTensor(rng, dt, []int{4, 5}, false)
			return ins
		}, func(ctx context.Context, _ int, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
			return g.Broadcast(ctx, x, g.Size()-1, dt, []int{4, 5})
		}},
		collectiveCase{"reduce", same(func(int) []int { return []int{6, 3} }),
			func(ctx context.Context, _ int, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
				return g.Reduce(ctx, x, g.Size()/2)
			}},
	)
}

func sumOf(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

func TestBackendCollectivesOnDevice(t *testing.T) {
	be := newTestBackend(t)
	for _, dt := range []ir.DType{ir.F32, ir.F64, ir.I32, ir.I64, ir.BF16, ir.F16} {
		for _, op := range []rt.ReduceOp{rt.OpSum, rt.OpMax} {
			for _, c := range collectiveCases(dt, op) {
				for _, p := range []int{1, 2, 3, 4, 5, 8} {
					what := fmt.Sprintf("%s %s op %d on %d members", c.name, dt, op, p)
					ins := c.ins(rand.New(rand.NewSource(int64(p*31+int(dt)))), p)
					want, wantSent := newCommWorld(t, nil, p).run(t, ins, c.call)
					got, gotSent := newCommWorld(t, be, p).run(t, ins, c.call)
					for i := range want {
						bitsEqual(t, got[i], want[i], fmt.Sprintf("%s, member %d", what, i))
					}
					require.Equal(t, wantSent, gotSent, "%s: bytes sent are the ring's", what)
				}
			}
		}
	}
}

// A group larger than a launch's table of pointers runs on the host, with
// the same results.
func TestBackendCollectivesBeyondMaxMembers(t *testing.T) {
	be := newTestBackend(t)
	p := MaxMembers + 1
	ins := make([]*rt.Tensor, p)
	rng := rand.New(rand.NewSource(1))
	for i := range ins {
		ins[i] = randomTensor(rng, ir.F32, []int{70}, false)
	}
	call := func(ctx context.Context, _ int, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
		return g.AllReduce(ctx, x, rt.OpSum)
	}
	want, _ := newCommWorld(t, nil, p).run(t, ins, call)
	w := newCommWorld(t, be, p)
	w.be = nil // its results are host tensors: run takes them as they are
	got, _ := w.run(t, ins, func(ctx context.Context, i int, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
		d, err := be.CopyIn(x.(*rt.Tensor))
		if err != nil {
			return nil, err
		}
		defer be.Free(d)
		return g.AllReduce(ctx, d, rt.OpSum)
	})
	for i := range want {
		bitsEqual(t, got[i], want[i], fmt.Sprintf("member %d of %d", i, p))
	}
}

// Members that disagree fail alike, and a member that never comes makes
// the others time out: neither hangs.
func TestBackendCollectivesFailTogether(t *testing.T) {
	be := newTestBackend(t)
	w := newCommWorld(t, be, 3)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, g := range w.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 4
			if i == 2 {
				n = 5
			}
			x, err := be.Alloc(ir.F32, []int{n})
			require.NoError(t, err)
			defer be.Free(x)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, errs[i] = g.AllReduce(ctx, x, rt.OpSum)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.ErrorContains(t, err, "all_reduce: member", "member %d", i)
	}

	// a launcher that gave one member the device and the other none: the
	// group is not on one device, so it runs through host copies
	comms := rt.NewInProc(2)
	comms[0].DrawResultsFrom(be)
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := c.NewGroup(context.Background(), 0, []int{0, 1})
			require.NoError(t, err)
			var x rt.Buffer = rt.NewTensor(ir.F32, []int{4})
			if i == 0 {
				d, err := be.Alloc(ir.F32, []int{4})
				require.NoError(t, err)
				defer be.Free(d)
				x = d
			}
			r, err := g.AllReduce(context.Background(), x, rt.OpSum)
			if errs[i] = err; err == nil {
				_, onHost := r.(*rt.Tensor)
				require.True(t, onHost, "member %d's result is a %T", i, r)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	x, err := be.Alloc(ir.F32, []int{8})
	require.NoError(t, err)
	defer be.Free(x)
	_, err = w.groups[0].AllReduce(ctx, x, rt.OpSum) // members 1 and 2 never come
	require.ErrorIs(t, err, rt.ErrPeerTimeout)
}
