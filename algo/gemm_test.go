package algo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/meshrun/meshrun/algo"
	"github.com/meshrun/meshrun/mesh"
	"github.com/meshrun/meshrun/rt"
	"github.com/stretchr/testify/require"
)

// problem holds the global operands of Y = X·W and a random dY, and the
// single-device results the simulations are checked against.
type problem struct {
	m, k, n        int
	x, w, dy       *rt.Tensor
	y, dx, dw      *rt.Tensor
	fwd, bwd       [][]int64 // bytes per rank measured: per run
	wantFwd, wantB []int64
}

func newProblem(m, k, n int) *problem {
	rng := rand.New(rand.NewPCG(uint64(m*100+k*10+n), 1))
	p := &problem{m: m, k: k, n: n, x: random(rng, m, k), w: random(rng, k, n), dy: random(rng, m, n)}
	p.y = matmul(p.x, p.w, false, false)
	p.dx = matmul(p.dy, p.w, false, true)
	p.dw = matmul(p.x, p.dy, true, false)
	return p
}

// span is block r of n cut p ways, inside [off, off+n).
func span(off, n, p, r int) (int, int) {
	o, l := mesh.Split(n, p, r)
	return off + o, l
}

// checkBytes compares what the transport counted with algo's figures.
func checkBytes(t *testing.T, g algo.GEMM, l algo.Layout, fwd, bwd []int64) {
	t.Helper()
	for r, c := range g.Costs(l, nil) {
		require.Equal(t, fwd[r], c.Sent(algo.Forward), "%s rank %d forward bytes", l, r)
		require.Equal(t, bwd[r], c.Sent(algo.Backward), "%s rank %d backward bytes", l, r)
	}
}

// summa runs 2D (d = 1) or 2.5D SUMMA on mesh [depth=d, row=q, col=q]:
// forward, then the backward's dX and dW, each checked block by block.
// The backward is autodiff's: it reduces with the X_it and W_tj blocks
// the forward's broadcasts brought, kept.
func summa(t *testing.T, pr *problem, q, d int) {
	m := mesh.New("2p5d", mesh.Axis{Name: "depth", Size: d}, mesh.Axis{Name: "row", Size: q}, mesh.Axis{Name: "col", Size: q})
	w := newWorld(t, m)
	rows := func(dk, i int) (int, int) {
		o, l := span(0, pr.m, d, dk)
		return span(o, l, q, i)
	}
	kc := func(t int) (int, int) { return span(0, pr.k, q, t) }
	nc := func(j int) (int, int) { return span(0, pr.n, q, j) }
	kept := make([][][2]*rt.Tensor, m.Size()) // per rank, per step: X_it and W_tj
	fwd := w.run(func(ctx context.Context, r int) error {
		co := m.Coord(r)
		dk, i, j := co[0], co[1], co[2]
		r0, nr := rows(dk, i)
		n0, nn := nc(j)
		rowG, colG := w.group(r, 2), w.group(r, 1)
		k0, kn := kc(j)
		myX := box(pr.x, r0, nr, k0, kn)
		k0, kn = kc(i)
		myW := box(pr.w, k0, kn, n0, nn)
		acc := rt.NewTensor(myX.DType, []int{nr, nn})
		for s := range q {
			_, ks := kc(s)
			xs, err := bcast(ctx, rowG, s, myX, nr, ks)
			if err != nil {
				return err
			}
			ws, err := bcast(ctx, colG, s, myW, ks, nn)
			if err != nil {
				return err
			}
			kept[r] = append(kept[r], [2]*rt.Tensor{xs, ws})
			addInto(acc, matmul(xs, ws, false, false))
		}
		near(t, box(pr.y, r0, nr, n0, nn), acc, fmt.Sprintf("Y block of rank %d", r))
		return nil
	})
	bwd := w.run(func(ctx context.Context, r int) error {
		co := m.Coord(r)
		dk, i, j := co[0], co[1], co[2]
		r0, nr := rows(dk, i)
		n0, nn := nc(j)
		rowG, colG := w.group(r, 2), w.group(r, 1)
		myDY := box(pr.dy, r0, nr, n0, nn)
		var dx, dw *rt.Tensor
		for s := range q {
			xs, ws := kept[r][s][0], kept[r][s][1]
			if got, err := reduceTo(ctx, rowG, s, matmul(myDY, ws, false, true)); err != nil {
				return err
			} else if got != nil {
				dx = got
			}
			if got, err := reduceTo(ctx, colG, s, matmul(xs, myDY, true, false)); err != nil {
				return err
			} else if got != nil {
				dw = got
			}
		}
		if d > 1 {
			b, err := w.group(r, 0).AllReduce(ctx, dw, rt.OpSum)
			if err != nil {
				return err
			}
			dw = b.(*rt.Tensor)
		}
		k0, kn := kc(j)
		near(t, box(pr.dx, r0, nr, k0, kn), dx, fmt.Sprintf("dX block of rank %d", r))
		k0, kn = kc(i)
		near(t, box(pr.dw, k0, kn, n0, nn), dw, fmt.Sprintf("dW block of rank %d", r))
		return nil
	})
	l := algo.Layout{Kind: algo.TwoHalfD, Q: q, D: d}
	if d == 1 {
		l = algo.Layout{Kind: algo.TwoD, Q: q}
	}
	checkBytes(t, algo.GEMM{M: pr.m, K: pr.k, N: pr.n, Elem: 8}, l, fwd, bwd)
}

func TestSUMMABytesEqualTheRuntimes(t *testing.T) {
	for _, c := range []struct{ q, d, m, k, n int }{
		{2, 1, 8, 8, 8}, {3, 1, 9, 6, 12}, {3, 1, 7, 5, 8}, {4, 1, 9, 7, 10},
		{2, 2, 8, 4, 6}, {2, 2, 9, 5, 7}, {3, 2, 13, 7, 5}, {1, 4, 10, 3, 4},
	} {
		t.Run(fmt.Sprintf("q%d_d%d_%dx%dx%d", c.q, c.d, c.m, c.k, c.n), func(t *testing.T) {
			summa(t, newProblem(c.m, c.k, c.n), c.q, c.d)
		})
	}
}

// threeD runs the 3D algorithm on mesh [x=q, y=q, z=q] as par.linear_3d
// does (a=x, b=y, w=z): rank (a,b,c) holds sub-block c of X's row block a
// (k block b), sub-block c of W's row block b (n block a) and sub-block c
// of Y's row block b (n block a); it gathers X over x, W over z and
// reduce-scatters the product over y. The rows gathered over x are R_c,
// sub-block c of every row block: a strided set, the one the reduce-
// scatter over y cuts back into sub-block c of each row block.
func threeD(t *testing.T, pr *problem, q int) {
	m := mesh.New("3d", mesh.Axis{Name: "x", Size: q}, mesh.Axis{Name: "y", Size: q}, mesh.Axis{Name: "z", Size: q})
	w := newWorld(t, m)
	// sub is sub-block c of block i of n; subs every i's length
	sub := func(n, i, c int) (int, int) {
		o, l := span(0, n, q, i)
		return span(o, l, q, c)
	}
	subs := func(n, c int) []int {
		out := make([]int, q)
		for i := range out {
			_, out[i] = sub(n, i, c)
		}
		return out
	}
	lens := func(n int) []int {
		out := make([]int, q)
		for i := range out {
			_, out[i] = mesh.Split(n, q, i)
		}
		return out
	}
	// strided is the rows R_c of x, columns [c0, c0+nc)
	strided := func(x *rt.Tensor, c, c0, nc int) *rt.Tensor {
		var parts []*rt.Tensor
		for i := range q {
			r0, nr := sub(x.Shape[0], i, c)
			parts = append(parts, box(x, r0, nr, c0, nc))
		}
		return rt.ConcatDim(parts, 0)
	}
	type blocks struct{ kb0, kb, na0, na int }
	at := func(r int) (int, int, int, blocks) {
		co := m.Coord(r)
		a, b, c := co[0], co[1], co[2]
		var bl blocks
		bl.kb0, bl.kb = span(0, pr.k, q, b)
		bl.na0, bl.na = span(0, pr.n, q, a)
		return a, b, c, bl
	}
	saved := make([][2]*rt.Tensor, m.Size()) // X̂ and Ŵ, kept for the backward
	fwd := w.run(func(ctx context.Context, r int) error {
		a, b, c, bl := at(r)
		x0, xl := sub(pr.m, a, c)
		w0, wl := span(bl.kb0, bl.kb, q, c)
		xh, err := w.group(r, 0).AllGather(ctx, box(pr.x, x0, xl, bl.kb0, bl.kb), 0, subs(pr.m, c))
		if err != nil {
			return err
		}
		near(t, strided(pr.x, c, bl.kb0, bl.kb), xh.(*rt.Tensor), fmt.Sprintf("X rows R_c of rank %d", r))
		wh, err := w.group(r, 2).AllGather(ctx, box(pr.w, w0, wl, bl.na0, bl.na), 0, lens(bl.kb))
		if err != nil {
			return err
		}
		saved[r] = [2]*rt.Tensor{xh.(*rt.Tensor), wh.(*rt.Tensor)}
		y, err := w.group(r, 1).ReduceScatter(ctx, matmul(xh.(*rt.Tensor), wh.(*rt.Tensor), false, false), 0, subs(pr.m, c), rt.OpSum)
		if err != nil {
			return err
		}
		y0, yl := sub(pr.m, b, c)
		near(t, box(pr.y, y0, yl, bl.na0, bl.na), y.(*rt.Tensor), fmt.Sprintf("Y block of rank %d", r))
		return nil
	})
	bwd := w.run(func(ctx context.Context, r int) error {
		a, b, c, bl := at(r)
		y0, yl := sub(pr.m, b, c)
		dyh, err := w.group(r, 1).AllGather(ctx, box(pr.dy, y0, yl, bl.na0, bl.na), 0, subs(pr.m, c))
		if err != nil {
			return err
		}
		dx, err := w.group(r, 0).ReduceScatter(ctx, matmul(dyh.(*rt.Tensor), saved[r][1], false, true), 0, subs(pr.m, c), rt.OpSum)
		if err != nil {
			return err
		}
		dw, err := w.group(r, 2).ReduceScatter(ctx, matmul(saved[r][0], dyh.(*rt.Tensor), true, false), 0, lens(bl.kb), rt.OpSum)
		if err != nil {
			return err
		}
		x0, xl := sub(pr.m, a, c)
		w0, wl := span(bl.kb0, bl.kb, q, c)
		near(t, box(pr.dx, x0, xl, bl.kb0, bl.kb), dx.(*rt.Tensor), fmt.Sprintf("dX block of rank %d", r))
		near(t, box(pr.dw, w0, wl, bl.na0, bl.na), dw.(*rt.Tensor), fmt.Sprintf("dW block of rank %d", r))
		return nil
	})
	g := algo.GEMM{M: pr.m, K: pr.k, N: pr.n, Elem: 8}
	l := algo.Layout{Kind: algo.ThreeD, Q: q}
	checkBytes(t, g, l, fwd, bwd)
	for r := range m.Size() { // the blocks the simulation used are the ones algo says each rank holds
		a, b, c, bl := at(r)
		x0, xl := sub(pr.m, a, c)
		w0, wl := span(bl.kb0, bl.kb, q, c)
		y0, yl := sub(pr.m, b, c)
		require.Equal(t, algo.Rect{R0: x0, NR: xl, C0: bl.kb0, NC: bl.kb}, g.Held(l, algo.X, r), "X of rank %d", r)
		require.Equal(t, algo.Rect{R0: w0, NR: wl, C0: bl.na0, NC: bl.na}, g.Held(l, algo.W, r), "W of rank %d", r)
		require.Equal(t, algo.Rect{R0: y0, NR: yl, C0: bl.na0, NC: bl.na}, g.Held(l, algo.Y, r), "Y of rank %d", r)
	}
}

func TestThreeDBytesEqualTheRuntimes(t *testing.T) {
	for _, c := range []struct{ q, m, k, n int }{{2, 8, 8, 8}, {2, 7, 9, 5}, {3, 9, 9, 9}, {3, 20, 10, 11}} {
		t.Run(fmt.Sprintf("q%d_%dx%dx%d", c.q, c.m, c.k, c.n), func(t *testing.T) {
			threeD(t, newProblem(c.m, c.k, c.n), c.q)
		})
	}
}

// oneD runs Megatron's column (or row) layer on p ranks.
func oneD(t *testing.T, pr *problem, p int, column bool) {
	m := mesh.New("tp", mesh.Axis{Name: "tp", Size: p})
	w := newWorld(t, m)
	fwd := w.run(func(ctx context.Context, r int) error {
		if column {
			n0, nn := span(0, pr.n, p, r)
			near(t, box(pr.y, 0, pr.m, n0, nn), matmul(pr.x, box(pr.w, 0, pr.k, n0, nn), false, false), "Y columns")
			return nil
		}
		k0, kn := span(0, pr.k, p, r)
		y, err := w.group(r, 0).AllReduce(ctx, matmul(box(pr.x, 0, pr.m, k0, kn), box(pr.w, k0, kn, 0, pr.n), false, false), rt.OpSum)
		if err != nil {
			return err
		}
		near(t, pr.y, y.(*rt.Tensor), "Y")
		return nil
	})
	bwd := w.run(func(ctx context.Context, r int) error {
		if column {
			n0, nn := span(0, pr.n, p, r)
			dx, err := w.group(r, 0).AllReduce(ctx, matmul(box(pr.dy, 0, pr.m, n0, nn), box(pr.w, 0, pr.k, n0, nn), false, true), rt.OpSum)
			if err != nil {
				return err
			}
			near(t, pr.dx, dx.(*rt.Tensor), "dX")
			near(t, box(pr.dw, 0, pr.k, n0, nn), matmul(pr.x, box(pr.dy, 0, pr.m, n0, nn), true, false), "dW columns")
			return nil
		}
		k0, kn := span(0, pr.k, p, r)
		near(t, box(pr.dx, 0, pr.m, k0, kn), matmul(pr.dy, box(pr.w, k0, kn, 0, pr.n), false, true), "dX columns")
		near(t, box(pr.dw, k0, kn, 0, pr.n), matmul(box(pr.x, 0, pr.m, k0, kn), pr.dy, true, false), "dW rows")
		return nil
	})
	kind := algo.OneDRow
	if column {
		kind = algo.OneDColumn
	}
	checkBytes(t, algo.GEMM{M: pr.m, K: pr.k, N: pr.n, Elem: 8}, algo.Layout{Kind: kind, Q: p}, fwd, bwd)
}

func TestOneDBytesEqualTheRuntimes(t *testing.T) {
	for _, p := range []int{1, 2, 3, 4, 5} {
		for _, column := range []bool{true, false} {
			t.Run(fmt.Sprintf("p%d_column=%v", p, column), func(t *testing.T) {
				oneD(t, newProblem(7, 6, 9), p, column)
			})
		}
	}
}

// Megatron's MLP: the column layer's output is the row layer's input
// (no communication between them); one all-reduce each way.
func TestMegatronMLP(t *testing.T) {
	const m, h, f, p = 6, 4, 10, 4
	pr := newProblem(m, h, f)
	w := newWorld(t, mesh.New("tp", mesh.Axis{Name: "tp", Size: p}))
	rng := rand.New(rand.NewPCG(3, 4))
	w2 := random(rng, f, h)
	want := matmul(pr.y, w2, false, false)
	fwd := w.run(func(ctx context.Context, r int) error {
		f0, fl := span(0, f, p, r)
		hid := matmul(pr.x, box(pr.w, 0, h, f0, fl), false, false) // [m, f/p], no communication
		y, err := w.group(r, 0).AllReduce(ctx, matmul(hid, box(w2, f0, fl, 0, h), false, false), rt.OpSum)
		if err != nil {
			return err
		}
		near(t, want, y.(*rt.Tensor), "MLP output")
		return nil
	})
	for r := range p {
		c := algo.MegatronMLP(m, h, f, 8, p, nil, r)
		require.Equal(t, fwd[r], c.Sent(algo.Forward), "rank %d", r)
		require.Equal(t, 1, len(filterPass(c.Comms, algo.Forward)))
		require.Equal(t, 1, len(filterPass(c.Comms, algo.Backward)))
		// the backward all-reduce is of dX [m, h], the same size
		require.Equal(t, c.Sent(algo.Forward), c.Sent(algo.Backward))
		_, fl := span(0, f, p, r)
		require.Equal(t, int64((h*fl+fl*h)*8), c.Weights)
	}
}

func filterPass(cs []algo.Comm, p algo.Pass) []algo.Comm {
	var out []algo.Comm
	for _, c := range cs {
		if c.Pass == p {
			out = append(out, c)
		}
	}
	return out
}
