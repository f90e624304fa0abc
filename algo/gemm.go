package algo

import (
	"fmt"

	"github.com/meshrun/meshrun/mesh"
)

// Kind names a parallel GEMM algorithm.
type Kind string

const (
	OneDColumn Kind = "1D column"
	OneDRow    Kind = "1D row"
	TwoD       Kind = "2D SUMMA"
	TwoHalfD   Kind = "2.5D Tesseract"
	ThreeD     Kind = "3D"
)

// Layout is an algorithm with its mesh sizes: 1D over Q devices, 2D on
// Q×Q, 2.5D on Q×Q×D, 3D on Q×Q×Q.
type Layout struct {
	Kind Kind
	Q, D int
}

// Devices is the device count of the layout.
func (l Layout) Devices() int {
	switch l.Kind {
	case OneDColumn, OneDRow:
		return l.Q
	case TwoD:
		return l.Q * l.Q
	case TwoHalfD:
		return l.Q * l.Q * l.D
	}
	return l.Q * l.Q * l.Q
}

// Mesh is the layout's mesh. Its axis names are what --link names: tp
// (1D); row and col (2D, and 2.5D after depth); x, y, z (3D, par.linear_3d's
// a, b and w: X is gathered over x, Y reduce-scattered over y and W
// gathered over z; see threeD).
func (l Layout) Mesh() *mesh.Mesh {
	q := l.Q
	switch l.Kind {
	case OneDColumn, OneDRow:
		return mesh.New("tp", mesh.Axis{Name: "tp", Size: q})
	case TwoD:
		return mesh.New("2d", mesh.Axis{Name: "row", Size: q}, mesh.Axis{Name: "col", Size: q})
	case TwoHalfD:
		return mesh.New("2p5d", mesh.Axis{Name: "depth", Size: l.D}, mesh.Axis{Name: "row", Size: q}, mesh.Axis{Name: "col", Size: q})
	}
	return mesh.New("3d", mesh.Axis{Name: "x", Size: q}, mesh.Axis{Name: "y", Size: q}, mesh.Axis{Name: "z", Size: q})
}

func (l Layout) String() string {
	switch l.Kind {
	case OneDColumn, OneDRow:
		return fmt.Sprintf("%s p=%d", l.Kind, l.Q)
	case TwoD:
		return fmt.Sprintf("%s %d×%d", l.Kind, l.Q, l.Q)
	case TwoHalfD:
		if l.Q == 1 {
			return fmt.Sprintf("%s 1×1×%d (DP)", l.Kind, l.D)
		}
		return fmt.Sprintf("%s %d×%d×%d", l.Kind, l.Q, l.Q, l.D)
	}
	return fmt.Sprintf("%s %d×%d×%d", l.Kind, l.Q, l.Q, l.Q)
}

// AxisNames lists every axis name some layout's mesh uses.
var AxisNames = []string{"tp", "row", "col", "depth", "x", "y", "z"}

// Layouts lists every layout that fits p devices exactly: 1D column and
// row; 2D when p is a square (q ≥ 2); 2.5D for every q²·d = p with d ≥ 2
// (d = 1 is 2D; q = 1 is plain data parallelism over depth); 3D when p is
// a cube (q ≥ 2).
func Layouts(p int) []Layout {
	out := []Layout{{Kind: OneDColumn, Q: p}, {Kind: OneDRow, Q: p}}
	if q := iroot(p, 2); q >= 2 {
		out = append(out, Layout{Kind: TwoD, Q: q})
	}
	for q := 1; q*q*2 <= p; q++ {
		if p%(q*q) == 0 {
			out = append(out, Layout{Kind: TwoHalfD, Q: q, D: p / (q * q)})
		}
	}
	if q := iroot(p, 3); q >= 2 {
		out = append(out, Layout{Kind: ThreeD, Q: q})
	}
	return out
}

// iroot is the integer r with r^k = p, or 0.
func iroot(p, k int) int {
	for r := 1; ; r++ {
		v := 1
		for range k {
			v *= r
		}
		if v == p {
			return r
		}
		if v > p {
			return 0
		}
	}
}

// GEMM is Y[M,N] = X[M,K]·W[K,N] with Elem bytes per element.
//
// Padded models the algorithms as stdlib/par.mesh's padded local
// functions run them when a size does not divide: inside the function
// every device's block is the largest block of the balanced split (⌈n/p⌉,
// a nested split ⌈⌈n/p⌉/p'⌉), zero-filled, so every block that moves has
// that size and every rank sends the same; the operands are still held
// balanced (Inputs, Weights, Outputs). Without it every block is its
// balanced size (what ring collectives over uneven blocks send). 1D is
// the same either way: its collectives move whole [m,k] or [m,n] tensors.
type GEMM struct {
	M, K, N, Elem int
	Padded        bool
}

// part is the length of block r of n cut into p balanced blocks, as it
// moves: the largest block when padded.
func (g GEMM) part(n, p, r int) int {
	if g.Padded {
		return (n + p - 1) / p
	}
	return split(n, p, r)
}

// Cost is rank's share of the layer on layout l, forward and backward.
func (g GEMM) Cost(l Layout, links Links, rank int) *Cost { return g.cost(l, l.Mesh(), links, rank) }

func (g GEMM) cost(l Layout, m *mesh.Mesh, links Links, rank int) *Cost {
	c := &Cost{Algorithm: l.String(), Mesh: m, Rank: rank}
	co := m.Coord(rank)
	switch l.Kind {
	case OneDColumn:
		g.oneDColumn(c, l.Q, co[0], links)
	case OneDRow:
		g.oneDRow(c, l.Q, co[0], links)
	case TwoD:
		g.twoD(c, l.Q, 1, 0, co[0], co[1], links)
	case TwoHalfD:
		g.twoD(c, l.Q, l.D, co[0], co[1], co[2], links)
	case ThreeD:
		g.threeD(c, l.Q, co[0], co[1], co[2], links)
	}
	return c
}

// Costs is every rank's Cost.
func (g GEMM) Costs(l Layout, links Links) []*Cost {
	out := make([]*Cost, l.Devices())
	m := l.Mesh() // one mesh for all: the ranks share it
	for r := range out {
		out[r] = g.cost(l, m, links, r)
	}
	return out
}

func (g GEMM) bytes(rows, cols int) int64 { return int64(rows * cols * g.Elem) }

// oneDColumn: X whole, W and Y split by columns; dX is a partial sum.
func (g GEMM) oneDColumn(c *Cost, p, r int, l Links) {
	nc := split(g.N, p, r)
	c.Inputs, c.Weights, c.Outputs = g.bytes(g.M, g.K), g.bytes(g.K, nc), g.bytes(g.M, nc)
	ar := newComm(Backward, "all_reduce", "tp", "all-reduce the partial dX = dY_r·W_rᵀ", "2(p−1)/p·mk", l)
	ar.allReduce(g.M*g.K, g.Elem, p, r)
	c.Comms = []Comm{ar.Comm}
}

// oneDRow: X split by columns, W by rows; Y is a partial sum.
func (g GEMM) oneDRow(c *Cost, p, r int, l Links) {
	kr := split(g.K, p, r)
	c.Inputs, c.Weights, c.Outputs = g.bytes(g.M, kr), g.bytes(kr, g.N), g.bytes(g.M, g.N)
	ar := newComm(Forward, "all_reduce", "tp", "all-reduce the partial Y = X_r·W_r", "2(p−1)/p·mn", l)
	ar.allReduce(g.M*g.N, g.Elem, p, r)
	c.Comms = []Comm{ar.Comm}
}

// twoD is SUMMA on rank (i,j) of depth layer dk of d (d = 1: 2D). The
// layer's rows of X and Y are m cut over depth then over row, so X_it is
// [mr, k_t] and W_tj [k_t, n_j]. The backward is autodiff's (stdlib's
// par.summa): the transposes of the forward's broadcasts are reduces, of
// dX_it = dY_ij·W_tjᵀ to (i,t) along the row and of dW_tj = X_itᵀ·dY_ij to
// (t,j) along the column, and the X_it and W_tj they multiply are the
// forward's broadcast blocks, kept (a whole row block of X and column
// block of W per device, (mk+kn)/q). A backward that keeps no broadcast
// buffers (Optimus) broadcasts them again and sends twice as much.
func (g GEMM) twoD(c *Cost, q, d, dk, i, j int, l Links) {
	c.Inputs = g.bytes(split(split(g.M, d, dk), q, i), split(g.K, q, j))
	c.Weights = g.bytes(split(g.K, q, i), split(g.N, q, j))
	c.Outputs = g.bytes(split(split(g.M, d, dk), q, i), split(g.N, q, j))
	// the blocks that move
	mr := g.part(g.part(g.M, d, dk), q, i)
	kc := func(t int) int { return g.part(g.K, q, t) }
	nj := g.part(g.N, q, j)
	mk, kn := "mk", "kn"
	if d > 1 {
		mk = "mk/d"
	}
	bx := newComm(Forward, "broadcast", "col", "broadcast X_it along row i, t = 0..q−1", "(q−1)·"+mk+"/q²", l)
	bw := newComm(Forward, "broadcast", "row", "broadcast W_tj along column j", "(q−1)·"+kn+"/q²", l)
	rdx := newComm(Backward, "reduce", "col", "dX: reduce dY_ij·W_tjᵀ to (i,t) along row i", "(q−1)·"+mk+"/q²", l)
	rdw := newComm(Backward, "reduce", "row", "dW: reduce X_itᵀ·dY_ij to (t,j) along column j", "(q−1)·"+kn+"/q²", l)
	var maxX, maxW int64
	for t := range q {
		x, w := g.bytes(mr, kc(t)), g.bytes(kc(t), nj)
		maxX, maxW = max(maxX, x), max(maxW, w)
		bx.broadcast(x, q, mod(j-t, q))
		bw.broadcast(w, q, mod(i-t, q))
		rdx.reduce(x, q, j == t)
		rdw.reduce(w, q, i == t)
	}
	c.Workspace = maxX + maxW
	c.Comms = []Comm{bx.Comm, bw.Comm, rdx.Comm, rdw.Comm}
	if d > 1 {
		ar := newComm(Backward, "all_reduce", "depth", "all-reduce dW_ij over depth", "2(d−1)/d·kn/q²", l)
		ar.allReduce(kc(i)*nj, g.Elem, d, dk)
		c.Comms = append(c.Comms, ar.Comm)
	}
}

// threeD is rank (a,b,c) of q×q×q, the layout of stdlib's par.linear_3d
// called with a=x, b=y, w=z: k is cut into q blocks along y; X's rows are
// cut along x and each block again along z, W's rows along y then z, and
// the columns of W and Y along x. The rank all-gathers X over x (its
// outer row axis: the rows it gets are sub-block c of every x block, a
// strided set R_c), W over z (k block b whole, n block a), multiplies —
// a partial, over y, of Y's rows R_c and n block a — and reduce-scatters
// it over y, keeping the rows of R_c in y block b: sub-block c of Y's row
// block b. So Y comes out laid out as X with x and y swapped, and the next
// layer runs with the roles of x and y exchanged.
func (g GEMM) threeD(c *Cost, q, a, b, cc int, l Links) {
	held := func(n, outer, cols int) int64 { return g.bytes(split(split(n, q, outer), q, cc), cols) }
	c.Inputs = held(g.M, a, split(g.K, q, b))
	c.Weights = held(g.K, b, split(g.N, q, a))
	c.Outputs = held(g.M, b, split(g.N, q, a))
	// the blocks that move
	rows := func(n, outer int) int { return g.part(g.part(n, q, outer), q, cc) } // sub-block cc of block outer
	kb, na := g.part(g.K, q, b), g.part(g.N, q, a)
	xb := make([]int64, q) // the X blocks gathered over x, Y's pieces over y
	var rc int
	for i := range q {
		xb[i] = g.bytes(rows(g.M, i), kb)
		rc += rows(g.M, i)
	}
	yb := make([]int64, q)
	for i := range q {
		yb[i] = g.bytes(rows(g.M, i), na)
	}
	wb := make([]int64, q) // W's sub-blocks of k block b, gathered over z
	for i := range q {
		wb[i] = g.bytes(g.part(kb, q, i), na)
	}
	c.Workspace = g.bytes(rc, kb) + g.bytes(kb, na) + g.bytes(rc, na)
	agx := newComm(Forward, "all_gather", "x", "all-gather X over x (its outer row axis)", "(q−1)/q·mk/q²", l)
	agx.allGather(xb, a)
	agw := newComm(Forward, "all_gather", "z", "all-gather W over z", "(q−1)/q·kn/q²", l)
	agw.allGather(wb, cc)
	rsy := newComm(Forward, "reduce_scatter", "y", "reduce-scatter the partial Y over y", "(q−1)/q·mn/q²", l)
	rsy.reduceScatter(yb, b)
	agd := newComm(Backward, "all_gather", "y", "all-gather dY over y", "(q−1)/q·mn/q²", l)
	agd.allGather(yb, b)
	rsx := newComm(Backward, "reduce_scatter", "x", "reduce-scatter dX = dY·Wᵀ over x", "(q−1)/q·mk/q²", l)
	rsx.reduceScatter(xb, a)
	rsw := newComm(Backward, "reduce_scatter", "z", "reduce-scatter dW = Xᵀ·dY over z", "(q−1)/q·kn/q²", l)
	rsw.reduceScatter(wb, cc)
	c.Comms = []Comm{agx.Comm, agw.Comm, rsy.Comm, agd.Comm, rsx.Comm, rsw.Comm}
}

// Formulas are an algorithm's per-rank figures written symbolically, in
// elements (times e bytes), for sizes its mesh divides evenly. α, β and γ
// are per message, per element sent and per element reduced.
type Formulas struct {
	Memory string    `json:"memory"`
	Sent   [2]string `json:"sent"`
	Msgs   [2]string `json:"messages"`
	Time   [2]string `json:"time"`
}

// FormulasOf gives the symbolic figures of a kind, forward then backward.
func FormulasOf(k Kind) Formulas {
	switch k {
	case OneDColumn:
		return Formulas{Memory: "mk + (kn+mn)/p",
			Sent: [2]string{"0", "2(p−1)/p·mk"}, Msgs: [2]string{"0", "2(p−1)"},
			Time: [2]string{"0", "2(p−1)α + (p−1)/p·mk·(2β+γ)"}}
	case OneDRow:
		return Formulas{Memory: "(mk+kn)/p + mn",
			Sent: [2]string{"2(p−1)/p·mn", "0"}, Msgs: [2]string{"2(p−1)", "0"},
			Time: [2]string{"2(p−1)α + (p−1)/p·mn·(2β+γ)", "0"}}
	case TwoD:
		return Formulas{Memory: "(mk+kn+mn)/q²",
			Sent: [2]string{"(q−1)(mk+kn)/q²", "(q−1)(mk+kn)/q²"}, Msgs: [2]string{"2(q−1)", "2(q−1)"},
			Time: [2]string{"q⌈lg q⌉(2α + (mk+kn)/q²·β)", "q⌈lg q⌉(2α + (mk+kn)/q²·(β+γ))"}}
	case TwoHalfD:
		return Formulas{Memory: "(mk+mn)/(dq²) + kn/q²",
			Sent: [2]string{"(q−1)(mk/d+kn)/q²", "(q−1)(mk/d+kn)/q² + 2(d−1)/d·kn/q²"},
			Msgs: [2]string{"2(q−1)", "2(q−1) + 2(d−1)"},
			Time: [2]string{"q⌈lg q⌉(2α + (mk/d+kn)/q²·β)",
				"q⌈lg q⌉(2α + (mk/d+kn)/q²·(β+γ)) + 2(d−1)α + (d−1)/d·kn/q²·(2β+γ)"}}
	}
	return Formulas{Memory: "(mk+kn+mn)/q³",
		Sent: [2]string{"(q−1)/q·(mk+kn+mn)/q²", "(q−1)/q·(mk+kn+mn)/q²"},
		Msgs: [2]string{"3(q−1)", "3(q−1)"},
		Time: [2]string{"3(q−1)α + (q−1)/q·((mk+kn+mn)β + mn·γ)/q²", "3(q−1)α + (q−1)/q·((mk+kn+mn)β + (mk+kn)γ)/q²"}}
}

// MegatronMLP is rank r's share of Megatron's 1D MLP on p ranks: X[m,h]
// times W1[h,f] split by columns (no communication), then times W2[f,h]
// split by rows, whose partial output is all-reduced — one all-reduce of
// [m,h] forward, and one backward (the column layer's partial dX). The
// hidden activation [m, f/p] is its workspace.
func MegatronMLP(m, h, f, elem, p int, links Links, r int) *Cost {
	col := GEMM{M: m, K: h, N: f, Elem: elem}.Cost(Layout{Kind: OneDColumn, Q: p}, links, r)
	row := GEMM{M: m, K: f, N: h, Elem: elem}.Cost(Layout{Kind: OneDRow, Q: p}, links, r)
	return &Cost{
		Algorithm: fmt.Sprintf("Megatron MLP p=%d", p), Mesh: col.Mesh, Rank: r,
		Inputs: col.Inputs, Weights: col.Weights + row.Weights, Outputs: row.Outputs,
		Workspace: col.Outputs,
		Comms:     append(append([]Comm{}, row.Comms...), col.Comms...),
	}
}
