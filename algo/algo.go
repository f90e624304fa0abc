// Package algo gives the closed-form costs of meshrun's hand-written
// parallel algorithms: for a problem size, a device count and a layout it
// returns, per rank, the bytes of inputs, weights and outputs the rank
// holds, the bytes and messages it sends in each collective of the
// forward and of the backward, and the time those collectives take on an
// alpha-beta-gamma link model (mesh.Link, one per mesh axis, as
// `--link AXIS=ALPHA_US:GBPS` builds it for the rest of meshrun).
//
// The algorithms and their formulas, from the papers: Megatron-LM
// (Shoeybi et al. 2019) for 1D; SUMMA (van de Geijn and Watts 1997) and
// Optimus (Xu et al. 2021) for 2D; Tesseract (Wang et al. 2021) for 2.5D;
// Agarwal et al. 1995 and Bian et al. 2021 for 3D; ring attention (Li et
// al. 2021, Liu et al. 2023); DeepSpeed-Ulysses (Jacobs et al. 2023);
// GShard (Lepikhin et al. 2020) for expert capacity; the collectives'
// costs after Thakur, Rabenseifner and Gropp 2005. The project's notes
// (shared/notes/algorithms.md) collect them. Sizes are in elements;
// bytes are elements × the dtype's size e. Y[m,n] = X[m,k]·W[k,n].
//
//	1D column (Megatron)  X whole, W and Y split by columns over p:
//	                      forward nothing; backward dX is partial: all-reduce mk,
//	                      2(p−1)/p·mk sent per rank.
//	1D row (Megatron)     X split by columns, W by rows, Y partial: forward
//	                      all-reduce mn, 2(p−1)/p·mn; backward nothing. A
//	                      Megatron MLP is a column layer then a row layer: one
//	                      all-reduce forward, one backward.
//	2D SUMMA (q×q)        rank (i,j) holds X_ij, W_ij, Y_ij; for t = 0..q−1
//	                      broadcast X_it along row i and W_tj along column j,
//	                      Y_ij += X_it·W_tj. Forward (q−1)(mk+kn)/q² per rank.
//	                      Backward (autodiff's, as stdlib's par.summa runs it):
//	                      reduce dY_ij·W_tjᵀ to (i,t) along the row (dX_it) and
//	                      X_itᵀ·dY_ij to (t,j) along the column (dW_tj), with
//	                      the forward's broadcast blocks kept: (q−1)(mk+kn)/q².
//	                      (The notes' backward broadcasts X_it and W_tj again,
//	                      keeping no buffers: twice that.)
//	2.5D Tesseract (q×q×d) X split into d·q row blocks × q column blocks, W as
//	                      in 2D and replicated over depth; each depth layer
//	                      runs SUMMA on its m/d rows; backward adds the
//	                      all-reduce of dW over depth, 2(d−1)/d·kn/q².
//	3D (q×q×q)            stdlib's par.linear_3d on [x, y, z] (a=x, b=y, w=z):
//	                      rank (a,b,c) holds sub-block c of X's row block a
//	                      (columns: k block b), sub-block c of W's row block b
//	                      and of Y's row block b (columns: n block a), 1/q³ of
//	                      each. Forward all-gather X over x (the rows of
//	                      sub-block c of every row block, a strided set), W
//	                      over z, local product, reduce-scatter over y —
//	                      (q−1)/q·(mk+kn+mn)/q²; backward all-gather dY over y,
//	                      reduce-scatter dX over x and dW over z — the same
//	                      again. Y is laid out as X with x and y swapped: the
//	                      next layer exchanges their roles.
//	ring attention (N)    Q, K, V split by sequence; K and V blocks travel N−1
//	                      hops forward (2(N−1)·B·L/N·H); backward (autodiff's,
//	                      as par.ring_attention runs it) dK and dV travel the
//	                      N−1 hops back, the forward's K and V blocks kept: the
//	                      same bytes. (A backward that keeps none sends K and V
//	                      round again and the gradients N hops: 4N−2 blocks.)
//	                      Causal load balance (ZigzagRows): rank r holds
//	                      chunks r and 2N−1−r of 2N; the same schedule.
//	Ulysses (P)           all-to-all Q, K, V from sequence to head shards,
//	                      attention, all-to-all O back: 4·(P−1)/P·B·L·H/P
//	                      forward, the same backward.
//	MoE (P)               experts split over P ranks; a fixed-capacity buffer
//	                      [E, C, H] per rank (C = ⌈c·k·T/(P·E)⌉) goes out in one
//	                      all-to-all (dispatch) and comes back in another
//	                      (combine): 2·(P−1)/P·E·C·H forward, the same backward
//	                      plus the all-reduce of the replicated router's
//	                      gradient, 2(P−1)/P·H·E. With G capacity groups
//	                      (G/P per rank) C is ⌈c·k·T/(G·E)⌉ per group and the
//	                      buffer [E, G/P·C, H].
//
// The bytes are what the runtime's collectives send (rt.Ring), so a test
// can compare them with what a run measures: ring all-gather sends every
// block but the next rank's; ring reduce-scatter every chunk but its own;
// all-reduce is the two in turn over the flattened tensor cut into p
// balanced chunks; all-to-all every piece but its own; broadcast is a
// binomial tree (rank at distance v from the root forwards to v+2^s for
// every 2^s below v's lowest set bit, so the root sends ⌈lg p⌉ messages
// and the group p−1); reduce to a root is modelled as any tree, in which
// every rank but the root sends its partial once. Over SUMMA's q steps the
// root walks the whole group, so each rank sends exactly q−1 blocks per
// broadcast kind — the totals above — although a single broadcast costs
// its root ⌈lg q⌉ blocks. Uneven sizes are split as mesh.Split does
// (balanced, the first n mod p blocks one element larger; a block split
// again is split hierarchically) and every figure is exact for them; the
// symbolic formulas assume even division.
//
// Time (α latency per message, β seconds per byte, γ per byte reduced, of
// the link of the mesh axis the group runs over): ring all-gather
// (p−1)α + sent·β, ring reduce-scatter (p−1)α + sent·(β+γ), all-reduce
// 2(p−1)α + sent·β + sent/2·γ, all-to-all (p−1)α + sent·β, binomial
// broadcast ⌈lg p⌉(α + nβ), tree reduce ⌈lg p⌉(α + n(β+γ)), a ring shift
// α + nβ per hop. Collectives run one after another; computation is not
// modelled.
package algo

import (
	"math/bits"

	"github.com/meshrun/meshrun/mesh"
)

// Pass is the forward or the backward of a layer.
type Pass string

const (
	Forward  Pass = "forward"
	Backward Pass = "backward"
)

// Comm is one kind of collective of an algorithm, summed over its steps,
// as one rank sees it.
type Comm struct {
	Pass  Pass   `json:"pass"`
	What  string `json:"what"` // e.g. "broadcast X_it along row i, t = 0..q−1"
	Kind  string `json:"kind"` // broadcast, reduce, all_gather, reduce_scatter, all_reduce, all_to_all, shift
	Axis  string `json:"axis"` // the mesh axis its groups run over
	Bytes int64  `json:"bytes"`
	Msgs  int    `json:"messages"`
	// Latency and Transfer split the modelled seconds into the α part and
	// the β and γ part (the table says which one dominates).
	Latency  float64 `json:"latency_s"`
	Transfer float64 `json:"transfer_s"`
	Formula  string  `json:"formula"` // bytes per rank in elements, for even division
}

// Time is the modelled seconds of the collective.
func (c Comm) Time() float64 { return c.Latency + c.Transfer }

// Cost is one rank's share of an algorithm.
type Cost struct {
	Algorithm string     `json:"algorithm"`
	Mesh      *mesh.Mesh `json:"-"`
	Rank      int        `json:"rank"`
	// Bytes held: inputs (activations), weights, outputs, and the largest
	// buffers the forward receives or gathers into (workspace).
	Inputs    int64  `json:"inputs_bytes"`
	Weights   int64  `json:"weights_bytes"`
	Outputs   int64  `json:"outputs_bytes"`
	Workspace int64  `json:"workspace_bytes"`
	Comms     []Comm `json:"comms"`
}

// Memory is the bytes of inputs, weights and outputs held.
func (c *Cost) Memory() int64 { return c.Inputs + c.Weights + c.Outputs }

// Sent is the bytes the rank sends in a pass.
func (c *Cost) Sent(p Pass) int64 {
	var s int64
	for _, m := range c.Comms {
		if m.Pass == p {
			s += m.Bytes
		}
	}
	return s
}

// Msgs is the messages the rank sends in a pass.
func (c *Cost) Msgs(p Pass) int {
	n := 0
	for _, m := range c.Comms {
		if m.Pass == p {
			n += m.Msgs
		}
	}
	return n
}

// Time is the modelled seconds of a pass's collectives, split into the
// latency and the transfer parts.
func (c *Cost) Time(p Pass) (latency, transfer float64) {
	for _, m := range c.Comms {
		if m.Pass == p {
			latency += m.Latency
			transfer += m.Transfer
		}
	}
	return latency, transfer
}

// Links gives the link of a mesh axis by name; a nil Links is
// mesh.DefaultLink everywhere.
type Links map[string]mesh.Link

func (l Links) of(axis string) mesh.Link {
	if k, ok := l[axis]; ok {
		return k
	}
	if k, ok := l[""]; ok { // the default for axes not named
		return k
	}
	return mesh.DefaultLink
}

// Topology is the mesh.Topology of links on m.
func (l Links) Topology(m *mesh.Mesh) *mesh.Topology {
	t := &mesh.Topology{Links: make([]mesh.Link, m.NumAxes())}
	for i, a := range m.Axes {
		t.Links[i] = l.of(a.Name)
	}
	return t
}

// split is the length of block r of n cut into p balanced blocks.
func split(n, p, r int) int {
	_, l := mesh.Split(n, p, r)
	return l
}

// rounds is ⌈lg p⌉, the rounds of a binomial tree over p ranks.
func rounds(p int) int {
	if p <= 1 {
		return 0
	}
	return bits.Len(uint(p - 1))
}

// children is how many ranks the member at distance v from the root sends
// to in a binomial-tree broadcast over p ranks: v+2^s for every 2^s below
// v's lowest set bit (every 2^s < p at the root) that is still in the group.
func children(v, p int) int {
	n := 0
	for s := 1; s < p; s <<= 1 {
		if v&s != 0 {
			break
		}
		if v+s < p {
			n++
		}
	}
	return n
}

func mod(a, p int) int { return ((a % p) + p) % p }

// comm is a Comm under construction: the steps add to it.
type comm struct {
	Comm
	link mesh.Link
}

func newComm(pass Pass, kind, axis, what, formula string, l Links) *comm {
	return &comm{Comm: Comm{Pass: pass, Kind: kind, Axis: axis, What: what, Formula: formula}, link: l.of(axis)}
}

// broadcast adds one binomial-tree broadcast of n bytes over p ranks in
// which this rank is at distance v from the root.
func (c *comm) broadcast(n int64, p, v int) {
	ch := children(v, p)
	c.Bytes += int64(ch) * n
	c.Msgs += ch
	r := float64(rounds(p))
	c.Latency += r * c.link.Alpha
	c.Transfer += r * float64(n) * c.link.Beta
}

// reduce adds one tree reduce of n bytes over p ranks to a root: every
// member but the root sends its partial once.
func (c *comm) reduce(n int64, p int, root bool) {
	if p > 1 && !root {
		c.Bytes += n
		c.Msgs++
	}
	r := float64(rounds(p))
	c.Latency += r * c.link.Alpha
	c.Transfer += r * float64(n) * (c.link.Beta + c.link.Gamma)
}

// allGather adds a ring all-gather over p ranks of blocks of the given
// bytes, this rank at index r: it sends every block but the next rank's.
func (c *comm) allGather(blocks []int64, r int) {
	p := len(blocks)
	if p <= 1 {
		return
	}
	sent := sum(blocks) - blocks[(r+1)%p]
	c.Bytes += sent
	c.Msgs += p - 1
	c.Latency += float64(p-1) * c.link.Alpha
	c.Transfer += float64(sent) * c.link.Beta
}

// reduceScatter adds a ring reduce-scatter into chunks of the given bytes,
// this rank at index r: it sends every chunk but its own.
func (c *comm) reduceScatter(chunks []int64, r int) {
	p := len(chunks)
	if p <= 1 {
		return
	}
	sent := sum(chunks) - chunks[r]
	c.Bytes += sent
	c.Msgs += p - 1
	c.Latency += float64(p-1) * c.link.Alpha
	c.Transfer += float64(sent) * (c.link.Beta + c.link.Gamma)
}

// allReduce adds a ring all-reduce of numel elements of elem bytes over p
// ranks, this rank at index r: reduce-scatter then all-gather of the
// flattened tensor in p balanced chunks.
func (c *comm) allReduce(numel, elem, p, r int) {
	if p <= 1 {
		return
	}
	// every chunk but its own, then every chunk but the next rank's
	rs := int64((numel - split(numel, p, r)) * elem)
	ag := int64((numel - split(numel, p, (r+1)%p)) * elem)
	c.Bytes += rs + ag
	c.Msgs += 2 * (p - 1)
	c.Latency += 2 * float64(p-1) * c.link.Alpha
	c.Transfer += float64(rs+ag)*c.link.Beta + float64(rs)*c.link.Gamma
}

// allToAll adds a pairwise all-to-all whose pieces have the given bytes,
// this rank at index r: it sends every piece but its own.
func (c *comm) allToAll(pieces []int64, r int) {
	p := len(pieces)
	if p <= 1 {
		return
	}
	sent := sum(pieces) - pieces[r]
	c.Bytes += sent
	c.Msgs += p - 1
	c.Latency += float64(p-1) * c.link.Alpha
	c.Transfer += float64(sent) * c.link.Beta
}

// shift adds one ring hop of n bytes: send to the next rank.
func (c *comm) shift(n int64) {
	c.Bytes += n
	c.Msgs++
	c.Latency += c.link.Alpha
	c.Transfer += float64(n) * c.link.Beta
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// blocks is the bytes of n elements cut into p balanced blocks, each
// times width elements of elem bytes.
func blocks(n, p, width, elem int) []int64 {
	out := make([]int64, p)
	for i := range out {
		out[i] = int64(split(n, p, i) * width * elem)
	}
	return out
}
