package algo

import (
	"fmt"

	"github.com/meshrun/meshrun/mesh"
)

// Attention is self-attention on Batch sequences of Seq tokens with
// Heads heads of Hidden/Heads features, Elem bytes per element. Q, K, V
// and the output O are [Batch, Seq, Hidden].
type Attention struct {
	Batch, Seq, Heads, Hidden, Elem int
}

func spMesh(n int) *mesh.Mesh { return mesh.New("sp", mesh.Axis{Name: "sp", Size: n}) }

// tokens is the bytes of rows tokens of every sequence: [Batch, rows, cols].
func (a Attention) tokens(rows, cols int) int64 { return int64(a.Batch * rows * cols * a.Elem) }

// Ring is rank r's share of ring attention over n ranks: the sequence is
// cut into n blocks; rank r keeps Q_r and its output rows, and the K and V
// blocks travel the ring, each forwarded n−1 times. The backward is
// autodiff's (stdlib's par.ring_attention): the shifts' transposes send
// the gradients dK and dV of every block back the way it came, n−1 hops,
// and the K and V blocks they need are the forward's, kept (all n of them
// per rank). A backward that keeps none (Liu et al.) sends K and V round
// again with dK and dV and a last hop of the gradients home: 4n−2 blocks
// against these 2(n−1). A causal mask skips computation, not blocks: the
// bytes are the same.
func (a Attention) Ring(n int, links Links, r int) *Cost {
	return a.ring(n, links, r, func(i int) int { return split(a.Seq, n, i) }, fmt.Sprintf("ring attention n=%d", n))
}

// ZigzagRows are the sequence rows rank r holds in causal ring attention
// with load balancing: the sequence is cut into 2n balanced chunks and
// rank r holds chunks r and 2n−1−r, so every rank has as many rows near
// the start (few keys to attend to) as near the end (many). Each entry is
// an offset and a length.
func ZigzagRows(seq, n, r int) [2][2]int {
	o1, l1 := mesh.Split(seq, 2*n, r)
	o2, l2 := mesh.Split(seq, 2*n, 2*n-1-r)
	return [2][2]int{{o1, l1}, {o2, l2}}
}

// RingBalanced is Ring with ZigzagRows: the same schedule, with each
// rank's block made of its two chunks.
func (a Attention) RingBalanced(n int, links Links, r int) *Cost {
	rows := func(i int) int {
		z := ZigzagRows(a.Seq, n, i)
		return z[0][1] + z[1][1]
	}
	return a.ring(n, links, r, rows, fmt.Sprintf("ring attention n=%d, causal load balance", n))
}

// ring is the schedule of Ring, rank i's block having rows(i) rows.
func (a Attention) ring(n int, links Links, r int, rows func(int) int, name string) *Cost {
	h := a.Hidden
	c := &Cost{Algorithm: name, Mesh: spMesh(n), Rank: r}
	c.Inputs = 3 * a.tokens(rows(r), h)
	c.Outputs = a.tokens(rows(r), h)
	var most int64
	for i := range n {
		most = max(most, a.tokens(rows(i), h))
	}
	c.Workspace = 2 * most // the K and V block in flight
	kv := newComm(Forward, "shift", "sp", "pass K and V blocks to the next rank, n−1 hops", "2(n−1)·B·L/n·H", links)
	grad := newComm(Backward, "shift", "sp", "pass dK and dV back to the previous rank, n−1 hops", "2(n−1)·B·L/n·H", links)
	for s := range n - 1 {
		// hop s+1 sends the block that arrived s hops ago (r−s); its
		// transpose sends back the gradient of the block it received (r−s−1)
		for range 2 { // K and V, dK and dV: a message each
			kv.shift(a.tokens(rows(mod(r-s, n)), h))
			grad.shift(a.tokens(rows(mod(r-s-1, n)), h))
		}
	}
	c.Comms = []Comm{kv.Comm, grad.Comm}
	return c
}

// Ulysses is rank r's share of DeepSpeed-Ulysses over p ranks: Q, K and V
// go from sequence shards [B, L/p, H] to head shards [B, L, H/p] in three
// all-to-alls, attention is local, and one all-to-all takes O back to
// sequence shards. Backward mirrors it: dO in, dQ, dK, dV out. p must
// divide the heads.
func (a Attention) Ulysses(p int, links Links, r int) (*Cost, error) {
	if p < 1 || a.Heads%p != 0 || a.Hidden%a.Heads != 0 {
		return nil, fmt.Errorf("ulysses on %d ranks: the %d heads must split evenly (and the hidden size %d must be a multiple of the heads)", p, a.Heads, a.Hidden)
	}
	h := a.Hidden
	lr := split(a.Seq, p, r)
	c := &Cost{Algorithm: fmt.Sprintf("Ulysses p=%d", p), Mesh: spMesh(p), Rank: r}
	c.Inputs = 3 * a.tokens(lr, h)
	c.Outputs = a.tokens(lr, h)
	c.Workspace = 4 * a.tokens(a.Seq, h/p)
	// to heads: every piece is this rank's rows and one rank's heads;
	// back to sequence: one rank's rows and this rank's heads
	toHeads := make([]int64, p)
	toSeq := make([]int64, p)
	for i := range p {
		toHeads[i] = a.tokens(lr, h/p)
		toSeq[i] = a.tokens(split(a.Seq, p, i), h/p)
	}
	in := newComm(Forward, "all_to_all", "sp", "all-to-all Q, K, V from sequence to head shards", "3(p−1)/p·B·L·H/p", links)
	out := newComm(Forward, "all_to_all", "sp", "all-to-all O from head to sequence shards", "(p−1)/p·B·L·H/p", links)
	inB := newComm(Backward, "all_to_all", "sp", "all-to-all dO from sequence to head shards", "(p−1)/p·B·L·H/p", links)
	outB := newComm(Backward, "all_to_all", "sp", "all-to-all dQ, dK, dV from head to sequence shards", "3(p−1)/p·B·L·H/p", links)
	for range 3 {
		in.allToAll(toHeads, r)
		outB.allToAll(toSeq, r)
	}
	out.allToAll(toSeq, r)
	inB.allToAll(toHeads, r)
	c.Comms = []Comm{in.Comm, out.Comm, inB.Comm, outB.Comm}
	return c, nil
}
