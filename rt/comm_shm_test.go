package rt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/meshrun/meshrun/ir"
	"github.com/stretchr/testify/require"
)

// The shared-memory collectives are checked against the message-passing
// Ring, the algorithm they simulate: the same inputs through both must
// give the same results bit for bit (the reductions add in the ring's
// order), the same bytes sent per rank and the same ring steps. Inputs
// are random non-integers of mixed magnitudes, so that a change in the
// summation order shows in the low bits.

// step is one ring step as OnStep sees it, without its times.
type step struct {
	phase string
	k     int
	bytes int64
}

// world runs one collective on p members, through shared memory
// (NewInProc) or by message passing (Ring over a ChanTransport).
type world struct {
	p      int
	shm    bool
	groups []*Ring
	tr     *ChanTransport
}

func newWorld(t *testing.T, p int, shm bool) *world {
	w := &world{p: p, shm: shm, groups: make([]*Ring, p)}
	members := make([]int, p)
	for i := range members {
		members[i] = (i*3 + 1) % p // not in device order
		if p%3 == 0 {
			members[i] = p - 1 - i
		}
	}
	if shm {
		comms := NewInProc(p)
		w.tr = comms[0].T
		for i, m := range members {
			g, err := comms[m].NewGroup(context.Background(), 7, members)
			require.NoError(t, err)
			w.groups[i] = g.(*Ring)
		}
	} else {
		w.tr = NewChanTransport(p)
		for i := range members {
			w.groups[i] = &Ring{T: w.tr, Devices: members, Rank: i, Tag: -1}
		}
	}
	return w
}

// run calls f on every member at once and returns each member's result,
// bytes sent and ring steps.
func (w *world) run(t *testing.T, f func(ctx context.Context, g *Ring) (Buffer, error)) ([]*Tensor, []int64, [][]step) {
	t.Helper()
	out, errs := make([]*Tensor, w.p), make([]error, w.p)
	steps, sent := make([][]step, w.p), make([]int64, w.p)
	for i, g := range w.groups {
		sent[i] = w.tr.BytesSent(g.me())
		g.OnStep = func(phase string, k int, b int64, start, end time.Time) {
			require.False(t, end.Before(start))
			steps[i] = append(steps[i], step{phase, k, b})
		}
	}
	var wg sync.WaitGroup
	for i, g := range w.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			b, err := f(ctx, g)
			if err == nil && b != nil {
				out[i] = b.(*Tensor)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, g := range w.groups {
		require.NoError(t, errs[i], "member %d", i)
		sent[i] = w.tr.BytesSent(g.me()) - sent[i]
	}
	return out, sent, steps
}

// randomOf is a tensor of dt with values of mixed sign and magnitude; with
// special, some are NaN, ±0 or ±Inf (for maxima).
func randomOf(r *rand.Rand, dt ir.DType, shape []int, special bool) *Tensor {
	f := NewTensor(ir.F64, shape).Data.([]float64)
	for i := range f {
		f[i] = r.NormFloat64() * math.Pow(10, float64(r.Intn(7)-3))
		if special && r.Intn(8) == 0 {
			f[i] = []float64{math.NaN(), 0, math.Copysign(0, -1), math.Inf(1), math.Inf(-1)}[r.Intn(5)]
		}
	}
	t := NewTensor(dt, shape)
	switch d := t.Data.(type) {
	case []int32:
		for i, v := range f {
			d[i] = int32(v * 1e3)
		}
	case []int64:
		for i, v := range f {
			d[i] = int64(v * 1e9)
		}
	default:
		storeFloat64s(t, f)
	}
	return t
}

// smallLimits are the one-barrier thresholds the shared-memory side runs
// with: never (every collective meets twice), always, and the default.
var smallLimits = []int64{-1, 1 << 62, shmSmallBytes}

// withSmall sets the one-barrier threshold of the world's group.
func (w *world) withSmall(limit int64) *world {
	w.groups[0].shm.s.small = limit
	return w
}

// sameBothWays runs f through shared memory (with the one-barrier
// algorithms never, always and by default) and by message passing on the
// same inputs and requires identical results, bytes and steps.
func sameBothWays(t *testing.T, p int, what string, f func(ctx context.Context, g *Ring) (Buffer, error)) {
	t.Helper()
	b, bsent, bsteps := newWorld(t, p, false).run(t, f)
	for _, limit := range smallLimits {
		a, asent, asteps := newWorld(t, p, true).withSmall(limit).run(t, f)
		for i := range p {
			w := fmt.Sprintf("%s (one-barrier limit %d) member %d", what, limit, i)
			require.Equal(t, b[i].DType, a[i].DType, w)
			require.Equal(t, b[i].Shape, a[i].Shape, w)
			require.Equal(t, b[i].Bits(), a[i].Bits(), w)
			require.Equal(t, bsent[i], asent[i], "%s: bytes sent", w)
			require.Equal(t, bsteps[i], asteps[i], "%s: ring steps", w)
		}
	}
}

// cut is random lengths along a dim of n for p members (some may be 0).
func cut(r *rand.Rand, n, p int) []int {
	lens := make([]int, p)
	for range n {
		lens[r.Intn(p)]++
	}
	return lens
}

var shmDTypes = []ir.DType{ir.F32, ir.F64, ir.I32, ir.I64, ir.BF16, ir.F16}

func TestSharedMemoryReductionsMatchRing(t *testing.T) {
	r := rand.New(rand.NewSource(11))
	for _, p := range []int{1, 2, 3, 5, 8} {
		for _, dt := range shmDTypes {
			for _, op := range []ReduceOp{OpSum, OpMax} {
				special := op == OpMax && !isHalf(dt)
				for _, n := range []int{1, 7, 2*tile + 13} {
					xs := make([]*Tensor, p)
					for i := range xs {
						xs[i] = randomOf(r, dt, []int{n}, special)
					}
					what := fmt.Sprintf("all_reduce p=%d %s op=%d n=%d", p, dt, op, n)
					sameBothWays(t, p, what, func(ctx context.Context, g *Ring) (Buffer, error) {
						return g.AllReduce(ctx, xs[g.Rank], op)
					})
				}
				shape := []int{4, 6, 5}
				for dim := range shape {
					lens := cut(r, shape[dim], p)
					xs := make([]*Tensor, p)
					for i := range xs {
						xs[i] = randomOf(r, dt, shape, special)
					}
					what := fmt.Sprintf("reduce_scatter p=%d %s op=%d dim=%d lens=%v", p, dt, op, dim, lens)
					sameBothWays(t, p, what, func(ctx context.Context, g *Ring) (Buffer, error) {
						return g.ReduceScatter(ctx, xs[g.Rank], dim, lens, op)
					})
				}
			}
		}
	}
}

func TestSharedMemoryMovesMatchRing(t *testing.T) {
	r := rand.New(rand.NewSource(12))
	for _, p := range []int{1, 2, 3, 4, 7} {
		for _, dt := range shmDTypes {
			shape := []int{3, 5, 4}
			for dim := range shape {
				lens := cut(r, 9, p)
				xs := make([]*Tensor, p)
				for i := range xs {
					s := slices.Clone(shape)
					s[dim] = lens[i]
					xs[i] = randomOf(r, dt, s, false)
				}
				what := fmt.Sprintf("all_gather p=%d %s dim=%d lens=%v", p, dt, dim, lens)
				sameBothWays(t, p, what, func(ctx context.Context, g *Ring) (Buffer, error) {
					return g.AllGather(ctx, xs[g.Rank], dim, lens)
				})
			}
			for _, dims := range [][2]int{{0, 0}, {1, 0}, {0, 2}, {2, 1}} {
				split, cat := dims[0], dims[1]
				lens := cut(r, 6, p)
				catLens := cut(r, 8, p)
				xs := make([]*Tensor, p)
				for i := range xs {
					s := slices.Clone(shape)
					s[split] = 6
					if cat != split {
						s[cat] = catLens[i]
					}
					xs[i] = randomOf(r, dt, s, false)
				}
				what := fmt.Sprintf("all_to_all p=%d %s split=%d cat=%d", p, dt, split, cat)
				sameBothWays(t, p, what, func(ctx context.Context, g *Ring) (Buffer, error) {
					return g.AllToAll(ctx, xs[g.Rank], split, lens, cat, catLens)
				})
			}
			for root := range p {
				x := randomOf(r, dt, shape, false)
				what := fmt.Sprintf("broadcast p=%d %s root=%d", p, dt, root)
				sameBothWays(t, p, what, func(ctx context.Context, g *Ring) (Buffer, error) {
					var in Buffer
					if g.Rank == root {
						in = x
					}
					return g.Broadcast(ctx, in, root, dt, shape)
				})
			}
		}
	}
}

// Many collectives in a row on the same groups, each member's results
// drawn from and freed to its arena as the local launcher does: a member
// that races ahead to the next collective must not disturb a slow one
// still reading this one's buffers (with the one-barrier algorithms, a
// member that has left posts the next collective while its peers still
// read this one's postings). sameBothWays runs it with every collective
// meeting twice, once, and mixed.
func TestSharedMemoryBackToBack(t *testing.T) {
	const p, rounds = 4, 200
	r := rand.New(rand.NewSource(13))
	xs := make([][]*Tensor, rounds)
	for k := range xs {
		xs[k] = make([]*Tensor, p)
		for i := range p {
			xs[k][i] = randomOf(r, ir.F32, []int{8, 2*tile/8 + 3}, false)
		}
	}
	seq := func(ctx context.Context, g *Ring) (Buffer, error) {
		be := &CPU{arena: newArena(0)}
		if g.shm != nil {
			g.shm.pool = be.arena // as DrawResultsFrom
		}
		acc := NewTensor(ir.F32, []int{1})
		for k := range rounds {
			var out Buffer
			var err error
			switch k % 3 {
			case 0:
				out, err = g.AllReduce(ctx, xs[k][g.Rank], OpSum)
			case 1:
				out, err = g.ReduceScatter(ctx, xs[k][g.Rank], 0, []int{2, 2, 2, 2}, OpSum)
			case 2:
				out, err = g.AllGather(ctx, Extract(xs[k][g.Rank], []int{0, 0}, []int{2, 5}), 0, []int{2, 2, 2, 2})
			}
			if err != nil {
				return nil, err
			}
			o := out.(*Tensor)
			acc.Data.([]float32)[0] += o.Data.([]float32)[k%o.Numel()]
			// the worker frees the result after its last use, and the
			// next kernel may get its buffer back and write all of it;
			// a shared result goes back to the group once every member
			// has let go, and the next one of its size overwrites it
			if g.shm != nil {
				(&InProc{held: g.shm.held}).Release(o)
			}
			be.Free(o)
			reuse, _ := be.Alloc(o.DType, o.Shape)
			for i := range reuse.(*Tensor).Data.([]float32) {
				reuse.(*Tensor).Data.([]float32)[i] = float32(k)
			}
		}
		return acc, nil
	}
	sameBothWays(t, p, "back to back", seq)
}

// A member that never comes makes the others time out rather than wait
// forever, and the group works again afterwards: timed by the context's
// deadline, or by the group's own timeout (SetTimeout, as the worker sets
// it) under a context without one; each with one and two barriers.
func TestSharedMemoryTimesOutAndRecovers(t *testing.T) {
	for _, own := range []bool{false, true} {
		for _, limit := range []int64{-1, shmSmallBytes} {
			w := newWorld(t, 3, true).withSmall(limit)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					if own {
						ctx = context.Background()
						require.True(t, w.groups[i].SetTimeout(50*time.Millisecond))
					}
					defer cancel()
					_, errs[i] = w.groups[i].AllReduce(ctx, NewTensor(ir.F32, []int{4}), OpSum)
				}()
			}
			wg.Wait()
			for _, err := range errs {
				require.True(t, errors.Is(err, ErrPeerTimeout), "own timeout %v: %v", own, err)
			}
			x := FromSlice([]int{2}, []float32{1, 2})
			out, _, _ := w.run(t, func(ctx context.Context, g *Ring) (Buffer, error) { return g.AllReduce(ctx, x, OpSum) })
			for _, o := range out {
				require.Equal(t, []float32{3, 6}, o.Data)
			}
		}
	}
}

// Mismatched inputs are an error on every member, not a crash or a hang.
func TestSharedMemoryRejectsMismatchedInputs(t *testing.T) {
	w := newWorld(t, 2, true)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, errs[i] = w.groups[i].AllGather(ctx, NewTensor(ir.F32, []int{2, 1 + i}), 0, []int{2, 2})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.ErrorContains(t, err, "all_gather: block")
	}
	// one member in an all-gather, the other in an all-reduce
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			x := NewTensor(ir.F32, []int{2, 2})
			if i == 0 {
				_, errs[i] = w.groups[i].AllGather(ctx, x, 0, []int{2, 2})
			} else {
				_, errs[i] = w.groups[i].AllReduce(ctx, x, OpSum)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.ErrorContains(t, err, "collectives out of step")
	}
	// and the group still works
	x := FromSlice([]int{1}, []float32{2})
	out, _, _ := w.run(t, func(ctx context.Context, g *Ring) (Buffer, error) { return g.AllReduce(ctx, x, OpSum) })
	require.Equal(t, []float32{4}, out[1].Data)
}

// Reduce to a root: bitwise the message-passing tree's sums (its
// summation order; half precision in f32, rounded once on the root;
// integers exactly, here with values beyond float64's 2^53), every dtype.
func TestSharedMemoryReduceMatchesTree(t *testing.T) {
	r := rand.New(rand.NewSource(14))
	for _, p := range []int{1, 2, 3, 5, 6, 8, 13} {
		for _, dt := range shmDTypes {
			for root := range p {
				xs := make([]*Tensor, p)
				for i := range xs {
					xs[i] = randomOf(r, dt, []int{3, reduceTile/3 + 5}, false)
					if d, ok := xs[i].Data.([]int64); ok {
						for k := range d {
							d[k] += 1<<60 + int64(r.Intn(1<<20))
						}
					}
				}
				f := func(ctx context.Context, g *Ring) (Buffer, error) { return g.Reduce(ctx, xs[g.Rank], root) }
				sameBothWays(t, p, fmt.Sprintf("reduce p=%d %s root=%d", p, dt, root), f)
			}
		}
	}
}

// The message-passing Ring's reduce itself (the reference above) against
// sums worked out here: the root's result has the input's dtype (half
// precision rounded once from the f32 sum) and integer sums are exact.
func TestRingReduceDTypes(t *testing.T) {
	bf := func(f float32) uint16 { return F32ToBF16(f) }
	cases := []struct {
		xs   [3]*Tensor
		want *Tensor
	}{
		{[3]*Tensor{FromSlice([]int{2}, []int64{1 << 60, 3}), FromSlice([]int{2}, []int64{1, 5}), FromSlice([]int{2}, []int64{1, -1})},
			FromSlice([]int{2}, []int64{1<<60 + 2, 7})},
	}
	halves := [3]*Tensor{NewTensor(ir.BF16, []int{1}), NewTensor(ir.BF16, []int{1}), NewTensor(ir.BF16, []int{1})}
	for i, v := range []float32{1, 1.0 / 256, 1.0 / 256} { // bf16 has 8 significant bits
		halves[i].Data.([]uint16)[0] = bf(v)
	}
	wantHalf := NewTensor(ir.BF16, []int{1})
	wantHalf.Data.([]uint16)[0] = bf(1 + 2.0/256) // each pair rounded apart would give 1
	cases = append(cases, struct {
		xs   [3]*Tensor
		want *Tensor
	}{halves, wantHalf})
	for _, c := range cases {
		out, _, _ := newWorld(t, 3, false).run(t, func(ctx context.Context, g *Ring) (Buffer, error) { return g.Reduce(ctx, c.xs[g.Rank], 0) })
		require.Equal(t, c.want.DType, out[0].DType)
		require.Equal(t, c.want.Data, out[0].Data)
		for _, o := range out[1:] {
			require.Equal(t, c.want.DType, o.DType)
		}
	}
}

// A member's own results (reduce-scatter here, and a small all-reduce)
// come from the arena of the backend the communicator draws from, so a
// result the worker frees is handed out again by the next collective of
// its size; a group's shared result (a large all-reduce) never is, since
// peers hold it.
func TestSharedMemoryResultsFromTheArena(t *testing.T) {
	comms := NewInProc(2)
	bes := []*CPU{{arena: newArena(0)}, {arena: newArena(0)}}
	w := &world{p: 2, shm: true, tr: comms[0].T, groups: make([]*Ring, 2)}
	for r, c := range comms {
		c.DrawResultsFrom(bes[r])
		g, err := c.NewGroup(context.Background(), 0, []int{0, 1})
		require.NoError(t, err)
		w.groups[r] = g.(*Ring)
	}
	x := FromSlice([]int{4, 3}, make([]float32, 12))
	scatter := func(ctx context.Context, g *Ring) (Buffer, error) {
		return g.ReduceScatter(ctx, x, 0, []int{2, 2}, OpSum)
	}
	first, _, _ := w.run(t, scatter)
	for r, o := range first {
		bes[r].Free(o)
	}
	again, _, _ := w.run(t, scatter)
	for r := range again {
		require.Equal(t, dataPtr(first[r].Data), dataPtr(again[r].Data), "member %d: its freed result is reused", r)
	}
	reduce := func(ctx context.Context, g *Ring) (Buffer, error) { return g.AllReduce(ctx, x, OpSum) }
	own, _, _ := w.run(t, reduce) // 48 bytes: the one-barrier path
	require.NotEqual(t, dataPtr(own[0].Data), dataPtr(own[1].Data), "a result per member")
	for r, o := range own {
		require.NotNil(t, o.home, "member %d", r)
		bes[r].Free(o)
	}
	ownAgain, _, _ := w.run(t, reduce)
	for r := range ownAgain {
		require.Equal(t, dataPtr(own[r].Data), dataPtr(ownAgain[r].Data), "member %d: its freed result is reused", r)
	}
	w.withSmall(-1)
	shared, _, _ := w.run(t, reduce)
	require.Equal(t, dataPtr(shared[0].Data), dataPtr(shared[1].Data), "one result for the group")
	for r, o := range shared {
		require.Nil(t, o.home, "member %d: no arena may recycle a shared result", r)
		bes[r].Free(o)
	}
	next, _, _ := w.run(t, reduce)
	require.NotEqual(t, dataPtr(shared[0].Data), dataPtr(next[0].Data))
	// released by one member only, it is still the other's
	comms[0].Release(next[0])
	again, _, _ = w.run(t, reduce)
	require.NotEqual(t, dataPtr(next[0].Data), dataPtr(again[0].Data), "member 1 still holds it")
	// released by both, the group's next result of its size reuses it
	comms[1].Release(next[1])
	comms[0].Release(again[0])
	comms[1].Release(again[1])
	y, want := NewTensor(ir.F32, []int{4, 3}), make([]float32, 12)
	for i := range want {
		y.Data.([]float32)[i], want[i] = float32(i+1), float32(2*(i+1))
	}
	last, _, _ := w.run(t, func(ctx context.Context, g *Ring) (Buffer, error) { return g.AllReduce(ctx, y, OpSum) })
	require.Contains(t, []unsafe.Pointer{dataPtr(next[0].Data), dataPtr(again[0].Data)}, dataPtr(last[0].Data))
	for r := range last {
		require.Equal(t, want, last[r].Data, "member %d: every element written", r)
	}
}

// A member leaving a barrier reads the barrier's generation at once to
// pick the postings of its next collective (meet), so the generation must
// count the completed barrier before any sleeping member wakes: every
// member, woken by the channel, by spinning or by polling (hot), sees it
// already counted.
func TestBarrierCountsBeforeWaking(t *testing.T) {
	for _, mode := range []struct{ spin, hot bool }{{false, false}, {true, false}, {true, true}} {
		spin := mode.spin
		const n, rounds = 3, 3000
		b := &barrier{n: n, spin: spin, hot: hotFlag(mode.hot)}
		errs := make(chan error, n)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := range rounds {
					if err := b.wait(ctx, 0); err != nil {
						errs <- err
						return
					}
					if g := b.gen.Load(); g < uint64(k+1) {
						errs <- fmt.Errorf("%+v: left barrier %d and read generation %d", mode, k+1, g)
						cancel() // the others stop waiting for this member
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
}
