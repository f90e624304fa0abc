package algo

import (
	"fmt"
	"math"

	"github.com/meshrun/meshrun/mesh"
)

// MoE is a mixture-of-experts layer as stdlib/moe.mesh writes it: Tokens
// tokens of Hidden features, Experts experts (each an FFN of a [Hidden,
// FFN] and an [FFN, Hidden] matrix), a router [Hidden, Experts] replicated
// on every rank, top-TopK gating and a capacity factor. Groups is the
// number of capacity groups over the whole batch (a multiple of the rank
// count that divides Tokens); 0 means one group per rank, whatever its
// share of the tokens.
type MoE struct {
	Tokens, Experts, TopK int
	CapacityFactor        float64
	Groups                int
	Hidden, FFN, Elem     int
}

// Capacity is the slots per expert of a group of t tokens:
// ⌈factor·k·t/E⌉ (GShard's expert capacity); tokens routed to a full
// expert are dropped.
func (e MoE) Capacity(t int) int {
	return int(math.Ceil(e.CapacityFactor * float64(e.TopK*t) / float64(e.Experts)))
}

// slots is the slots per expert that rank r packs: its groups times their
// capacity.
func (e MoE) slots(p, r int) int {
	if e.Groups == 0 {
		return e.Capacity(split(e.Tokens, p, r))
	}
	return e.Groups / p * e.Capacity(e.Tokens/e.Groups)
}

// Cost is rank r's share of expert parallelism over p ranks: tokens are
// split over the ranks, experts too (E/p each). Each rank packs its tokens
// into a fixed [E, G·C, H] buffer (its G groups of C slots per expert;
// padding and drops make it independent of the routing), sends the slots
// of every other rank's experts in one all-to-all (dispatch), and gets the
// experts' outputs back in a second (combine). Backward the gradients
// take the same two all-to-alls in the opposite direction, and the
// router's gradient, a sum over every rank's tokens, is all-reduced.
func (e MoE) Cost(p int, links Links, r int) (*Cost, error) {
	if p < 1 || e.Experts%p != 0 {
		return nil, fmt.Errorf("expert parallelism on %d ranks: the %d experts must split evenly", p, e.Experts)
	}
	if e.Groups != 0 && (e.Groups%p != 0 || e.Tokens%e.Groups != 0) {
		return nil, fmt.Errorf("expert parallelism on %d ranks: %d capacity groups must be a multiple of the ranks and divide the %d tokens", p, e.Groups, e.Tokens)
	}
	ep := e.Experts / p
	tr := split(e.Tokens, p, r)
	slots := func(rank int) int64 { return int64(ep * e.slots(p, rank) * e.Hidden * e.Elem) }
	c := &Cost{Algorithm: fmt.Sprintf("MoE expert parallel p=%d", p), Mesh: mesh.New("ep", mesh.Axis{Name: "ep", Size: p}), Rank: r}
	c.Inputs = int64(tr * e.Hidden * e.Elem)
	c.Outputs = c.Inputs
	c.Weights = int64((ep*2*e.FFN + e.Experts) * e.Hidden * e.Elem)
	dispatch := make([]int64, p) // this rank's slots for rank i's experts
	combine := make([]int64, p)  // rank i's slots for this rank's experts
	for i := range p {
		dispatch[i] = slots(r)
		combine[i] = slots(i)
		c.Workspace += dispatch[i] + combine[i]
	}
	d := newComm(Forward, "all_to_all", "ep", "dispatch: all-to-all the [E, C, H] slots to the experts' ranks", "(p−1)/p·E·C·H", links)
	cb := newComm(Forward, "all_to_all", "ep", "combine: all-to-all the experts' outputs back", "(p−1)/p·E·C·H", links)
	dB := newComm(Backward, "all_to_all", "ep", "combine's gradient: the outputs' gradients to the experts", "(p−1)/p·E·C·H", links)
	cbB := newComm(Backward, "all_to_all", "ep", "dispatch's gradient: the inputs' gradients back", "(p−1)/p·E·C·H", links)
	rg := newComm(Backward, "all_reduce", "ep", "router's gradient: all-reduce the replicated [H, E] router's", "2(p−1)/p·H·E", links)
	d.allToAll(dispatch, r)
	dB.allToAll(dispatch, r)
	cb.allToAll(combine, r)
	cbB.allToAll(combine, r)
	rg.allReduce(e.Hidden*e.Experts, e.Elem, p, r)
	c.Comms = []Comm{d.Comm, cb.Comm, dB.Comm, cbB.Comm, rg.Comm}
	return c, nil
}
