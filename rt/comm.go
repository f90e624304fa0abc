package rt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Transport moves tensors between devices point to point. The in-process
// transport uses channels; an NCCL or MPI runtime provides its own
// Collectives instead (see Collectives).
type Transport interface {
	Send(ctx context.Context, from, to int, t *Tensor) error
	Recv(ctx context.Context, to, from int) (*Tensor, error)
}

// ErrPeerTimeout is wrapped by errors of receives whose peer never sent.
var ErrPeerTimeout = errors.New("timed out")

// ChanTransport connects the devices of one process with a buffered channel
// per ordered pair. Every device runs the same instruction sequence, so
// messages between two devices are matched in order.
type ChanTransport struct {
	chans sync.Map       // [2]int{from, to} → chan *Tensor, made on first use
	sent  []atomic.Int64 // bytes sent per device
}

// NewChanTransport makes a transport for n devices.
func NewChanTransport(n int) *ChanTransport {
	return &ChanTransport{sent: make([]atomic.Int64, n)}
}

// ch finds a pair's channel without a lock once it exists.
func (c *ChanTransport) ch(from, to int) chan *Tensor {
	k := [2]int{from, to}
	if ch, ok := c.chans.Load(k); ok {
		return ch.(chan *Tensor)
	}
	// A collective sends at most a group's worth of messages to one peer
	// before it must receive, so this never fills in practice; if it did,
	// Send would wait (bounded by ctx).
	ch, _ := c.chans.LoadOrStore(k, make(chan *Tensor, 64))
	return ch.(chan *Tensor)
}

// Send implements Transport. Tensors are immutable once produced, so the
// receiver may share t's storage with the sender.
func (c *ChanTransport) Send(ctx context.Context, from, to int, t *Tensor) error {
	select {
	case c.ch(from, to) <- t:
		c.sent[from].Add(t.Bytes())
		return nil
	case <-ctx.Done():
		return fmt.Errorf("send to device %d: %w", to, ctxErr(ctx))
	}
}

// Recv implements Transport.
func (c *ChanTransport) Recv(ctx context.Context, to, from int) (*Tensor, error) {
	select {
	case t := <-c.ch(from, to):
		return t, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for device %d: %w", from, ctxErr(ctx))
	}
}

// BytesSent is the bytes device dev has sent so far.
func (c *ChanTransport) BytesSent(dev int) int64 { return c.sent[dev].Load() }

func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ErrPeerTimeout
	}
	return ctx.Err()
}

// Group is the devices of one collective in ring order, and the caller's
// index among them.
type Group struct {
	Devices []int
	Rank    int
}

func (g Group) size() int      { return len(g.Devices) }
func (g Group) next() int      { return g.Devices[(g.Rank+1)%g.size()] }
func (g Group) prev() int      { return g.Devices[(g.Rank-1+g.size())%g.size()] }
func (g Group) me() int        { return g.Devices[g.Rank] }
func (g Group) at(i int) int   { return g.Devices[((i%g.size())+g.size())%g.size()] }
func mod(a, p int) int         { return ((a % p) + p) % p }
func (g Group) String() string { return fmt.Sprint(g.Devices) }

// ReduceOp combines partial values.
type ReduceOp uint8

const (
	OpSum ReduceOp = iota
	OpMax
)

// Collectives is what the interpreter asks of the network. The ring
// implementation below runs over any Transport; a GPU runtime implements it
// with NCCL.
type Collectives interface {
	// AllGather concatenates every member's t along dim; lens[i] is member
	// i's length along dim.
	AllGather(ctx context.Context, g Group, t *Tensor, dim int, lens []int) (*Tensor, error)
	// ReduceScatter reduces t over the group and returns chunk Rank of the
	// result cut along dim into lens.
	ReduceScatter(ctx context.Context, g Group, t *Tensor, dim int, lens []int, op ReduceOp) (*Tensor, error)
	// AllReduce reduces t over the group; every member gets the result.
	AllReduce(ctx context.Context, g Group, t *Tensor, op ReduceOp) (*Tensor, error)
	// AllToAll cuts t along splitDim into lens, sends piece i to member i,
	// and concatenates what arrives along catDim in member order.
	AllToAll(ctx context.Context, g Group, t *Tensor, splitDim int, lens []int, catDim int) (*Tensor, error)
	// Broadcast sends root's t to every member (others pass nil).
	Broadcast(ctx context.Context, g Group, t *Tensor, root int) (*Tensor, error)
	// Send and Recv move one tensor between two devices.
	Send(ctx context.Context, from, to int, t *Tensor) error
	Recv(ctx context.Context, to, from int) (*Tensor, error)
}

// Ring implements Collectives with the classic algorithms over a Transport:
// ring all-gather, ring reduce-scatter, all-reduce as reduce-scatter then
// all-gather (each rank sends 2(p-1)/p of the data), pairwise all-to-all,
// binomial-tree broadcast.
type Ring struct{ T Transport }

func (r Ring) Send(ctx context.Context, from, to int, t *Tensor) error {
	return r.T.Send(ctx, from, to, t)
}
func (r Ring) Recv(ctx context.Context, to, from int) (*Tensor, error) {
	return r.T.Recv(ctx, to, from)
}

// AllGather: p-1 steps; in step k each rank forwards the block it received
// in step k-1 (its own at k=0) to the next rank.
func (r Ring) AllGather(ctx context.Context, g Group, t *Tensor, dim int, lens []int) (*Tensor, error) {
	p := g.size()
	blocks := make([]*Tensor, p)
	blocks[g.Rank] = t
	for k := 0; k < p-1; k++ {
		send := mod(g.Rank-k, p)
		if err := r.T.Send(ctx, g.me(), g.next(), blocks[send]); err != nil {
			return nil, err
		}
		got, err := r.T.Recv(ctx, g.me(), g.prev())
		if err != nil {
			return nil, err
		}
		recv := mod(g.Rank-k-1, p)
		if got.Shape[dim] != lens[recv] {
			return nil, fmt.Errorf("all_gather: block %d has length %d along dim %d, expected %d", recv, got.Shape[dim], dim, lens[recv])
		}
		blocks[recv] = got
	}
	return ConcatDim(blocks, dim), nil
}

// ReduceScatter: in step k rank r sends its running sum of chunk r-k-1 to
// the next rank and adds the chunk r-k-2 it receives; after p-1 steps chunk
// r is complete on rank r.
func (r Ring) ReduceScatter(ctx context.Context, g Group, t *Tensor, dim int, lens []int, op ReduceOp) (*Tensor, error) {
	p := g.size()
	chunks := SplitDim(t, dim, lens)
	for k := 0; k < p-1; k++ {
		send := mod(g.Rank-k-1, p)
		if err := r.T.Send(ctx, g.me(), g.next(), chunks[send]); err != nil {
			return nil, err
		}
		got, err := r.T.Recv(ctx, g.me(), g.prev())
		if err != nil {
			return nil, err
		}
		recv := mod(g.Rank-k-2, p)
		if err := accumulate(chunks[recv], got, op); err != nil {
			return nil, err
		}
	}
	return chunks[g.Rank], nil
}

// AllReduce: ring reduce-scatter of the flattened tensor in p balanced
// chunks, then ring all-gather of the chunks.
func (r Ring) AllReduce(ctx context.Context, g Group, t *Tensor, op ReduceOp) (*Tensor, error) {
	p := g.size()
	if p == 1 {
		return t.Clone(), nil
	}
	n := t.Numel()
	flat := &Tensor{DType: t.DType, Shape: []int{n}, Data: t.Data}
	lens := balanced(n, p)
	mine, err := r.ReduceScatter(ctx, g, flat, 0, lens, op)
	if err != nil {
		return nil, err
	}
	all, err := r.AllGather(ctx, g, mine, 0, lens)
	if err != nil {
		return nil, err
	}
	all.Shape = append([]int{}, t.Shape...)
	return all, nil
}

// AllToAll: p-1 pairwise rounds; in round k rank r sends to r+k and
// receives from r-k.
func (r Ring) AllToAll(ctx context.Context, g Group, t *Tensor, splitDim int, lens []int, catDim int) (*Tensor, error) {
	p := g.size()
	pieces := SplitDim(t, splitDim, lens)
	got := make([]*Tensor, p)
	got[g.Rank] = pieces[g.Rank]
	for k := 1; k < p; k++ {
		if err := r.T.Send(ctx, g.me(), g.at(g.Rank+k), pieces[mod(g.Rank+k, p)]); err != nil {
			return nil, err
		}
		x, err := r.T.Recv(ctx, g.me(), g.at(g.Rank-k))
		if err != nil {
			return nil, err
		}
		got[mod(g.Rank-k, p)] = x
	}
	return ConcatDim(got, catDim), nil
}

// Broadcast: binomial tree rooted at root; lg p rounds.
func (r Ring) Broadcast(ctx context.Context, g Group, t *Tensor, root int) (*Tensor, error) {
	p := g.size()
	vr := mod(g.Rank-root, p)
	mask := 1
	for mask < p {
		if vr&mask != 0 {
			x, err := r.T.Recv(ctx, g.me(), g.at(vr-mask+root))
			if err != nil {
				return nil, err
			}
			t = x
			break
		}
		mask <<= 1
	}
	mask >>= 1
	for mask > 0 {
		if vr+mask < p {
			if err := r.T.Send(ctx, g.me(), g.at(vr+mask+root), t); err != nil {
				return nil, err
			}
		}
		mask >>= 1
	}
	return t, nil
}

func balanced(n, p int) []int {
	out := make([]int, p)
	for i := range out {
		out[i] = n / p
		if i < n%p {
			out[i]++
		}
	}
	return out
}

// accumulate folds src into dst elementwise.
func accumulate(dst, src *Tensor, op ReduceOp) error {
	if !sameShape(dst.Shape, src.Shape) || dst.DType != src.DType {
		return fmt.Errorf("reduce: received %s%v, expected %s%v", src.DType, src.Shape, dst.DType, dst.Shape)
	}
	switch d := dst.Data.(type) {
	case []float32:
		fold(d, src.Data.([]float32), op)
	case []float64:
		fold(d, src.Data.([]float64), op)
	case []int32:
		fold(d, src.Data.([]int32), op)
	case []int64:
		fold(d, src.Data.([]int64), op)
	case []uint16: // half precision: add in f32, round once
		w := widen(dst)
		fold(w.Data.([]float32), widen(src).Data.([]float32), op)
		copy(d, narrow(w, dst.DType).Data.([]uint16))
	}
	return nil
}

func fold[T Num](d, s []T, op ReduceOp) {
	if op == OpMax {
		for i, v := range s {
			if v > d[i] {
				d[i] = v
			}
		}
		return
	}
	for i, v := range s {
		d[i] += v
	}
}
