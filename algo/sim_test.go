package algo_test

// A simulation harness: every rank a goroutine, the runtime's own ring
// collectives (rt.Ring) over one rt.ChanTransport, real f64 blocks. The
// tests run an algorithm's data movement on it, check the numbers it
// computes against the single-device product (so the movement simulated
// is the algorithm), and compare the bytes the transport counted per rank
// with package algo's figures.

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

type world struct {
	t  *testing.T
	m  *mesh.Mesh
	tr *rt.ChanTransport
}

func newWorld(t *testing.T, m *mesh.Mesh) *world {
	return &world{t: t, m: m, tr: rt.NewChanTransport(m.Size())}
}

// run runs f on every rank at once and returns the bytes each rank sent
// while doing it.
func (w *world) run(f func(ctx context.Context, r int) error) []int64 {
	w.t.Helper()
	n := w.m.Size()
	before := make([]int64, n)
	for r := range n {
		before[r] = w.tr.BytesSent(r)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			errs[r] = f(ctx, r)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(w.t, err, "rank %d", r)
	}
	out := make([]int64, n)
	for r := range n {
		out[r] = w.tr.BytesSent(r) - before[r]
	}
	return out
}

// group is rank r's ring over the given mesh axes; tag keeps groups of
// different axes on different channels.
func (w *world) group(r int, axes ...int) *rt.Ring {
	members := w.m.Group(r, axes...)
	idx := 0
	for i, d := range members {
		if d == r {
			idx = i
		}
	}
	tag := -100
	for _, a := range axes {
		tag = tag*10 - a
	}
	return &rt.Ring{T: w.tr, Devices: members, Rank: idx, Tag: tag}
}

// reduceTo sums x over the group onto member root: every other member
// sends its partial straight to the root (a flat tree: each non-root
// sends once, as in any tree reduce). The root gets the sum, others nil.
func reduceTo(ctx context.Context, g *rt.Ring, root int, x *rt.Tensor) (*rt.Tensor, error) {
	const tag = 7
	if g.Rank != root {
		return nil, g.T.Send(ctx, g.Devices[g.Rank], g.Devices[root], tag, x)
	}
	acc := x.Clone()
	for i, d := range g.Devices {
		if i == root {
			continue
		}
		got, err := g.T.Recv(ctx, g.Devices[root], d, tag)
		if err != nil {
			return nil, err
		}
		addInto(acc, got)
	}
	return acc, nil
}

func bcast(ctx context.Context, g *rt.Ring, root int, x *rt.Tensor, shape ...int) (*rt.Tensor, error) {
	var in rt.Buffer
	if g.Rank == root {
		in = x
	}
	b, err := g.Broadcast(ctx, in, root, ir.F64, shape)
	if err != nil {
		return nil, err
	}
	return b.(*rt.Tensor), nil
}

// random is an [r, c] matrix of values in [-1, 1).
func random(rng *rand.Rand, r, c int) *rt.Tensor {
	d := make([]float64, r*c)
	for i := range d {
		d[i] = 2*rng.Float64() - 1
	}
	return rt.FromSlice([]int{r, c}, d)
}

func f64(t *rt.Tensor) []float64 { return t.Data.([]float64) }

// matmul is the plain triple loop; ta and tb transpose a and b.
func matmul(a, b *rt.Tensor, ta, tb bool) *rt.Tensor {
	ar, ac := a.Shape[0], a.Shape[1]
	br, bc := b.Shape[0], b.Shape[1]
	at := func(i, k int) float64 { return f64(a)[i*ac+k] }
	bt := func(k, j int) float64 { return f64(b)[k*bc+j] }
	m, k, n := ar, ac, bc
	if ta {
		m, k = ac, ar
		at = func(i, kk int) float64 { return f64(a)[kk*ac+i] }
	}
	if tb {
		n = br
		bt = func(kk, j int) float64 { return f64(b)[j*bc+kk] }
	}
	_ = k
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for kk := range k {
				s += at(i, kk) * bt(kk, j)
			}
			out[i*n+j] = s
		}
	}
	return rt.FromSlice([]int{m, n}, out)
}

func addInto(dst, src *rt.Tensor) {
	for i, v := range f64(src) {
		f64(dst)[i] += v
	}
}

// box is rows [r0, r0+nr) and columns [c0, c0+nc) of x.
func box(x *rt.Tensor, r0, nr, c0, nc int) *rt.Tensor {
	return rt.Extract(x, []int{r0, c0}, []int{nr, nc})
}

func near(t *testing.T, want, got *rt.Tensor, what string) {
	t.Helper()
	require.Equal(t, want.Shape, got.Shape, what)
	for i, v := range f64(want) {
		require.InDelta(t, v, f64(got)[i], 1e-9, "%s element %d", what, i)
	}
}
