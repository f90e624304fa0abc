package rt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrun/meshrun/ir"
)

// Comm is one rank's connection to the other ranks of a run: tagged
// point-to-point messages, and the groups its collectives run on, created
// once at start-up. The in-process communicator (NewInProc) connects
// goroutines; package rt/mpi's connects processes.
type Comm interface {
	Rank() int
	Size() int
	// NewGroup is called by every rank once per plan group, at start-up
	// and in plan order, with id the plan's group index and members its
	// own group's ranks in ring order.
	NewGroup(ctx context.Context, id int, members []int) (Group, error)
	// Send may return before the peer receives (it is buffered); the
	// buffer must not change afterwards. Recv waits for the message from
	// peer with that tag, first sent first received, which must be a
	// tensor of type dt and the given shape (a receiver posts its buffer
	// before the data arrives).
	Send(ctx context.Context, peer, tag int, b Buffer) error
	Recv(ctx context.Context, peer, tag int, dt ir.DType, shape []int) (Buffer, error)
	// Flush waits until every buffered send has completed (the worker
	// calls it at the end of each execution, so no send outlives it).
	Flush(ctx context.Context) error
	// BytesSent is what this rank has sent so far.
	BytesSent() int64
}

// Group runs collectives among its members. Lengths are per member along
// the dim a collective cuts or joins, so uneven splits need no padding.
type Group interface {
	Size() int
	Index() int // this rank's position in the group
	// AllReduce reduces x over the group; every member gets the result.
	AllReduce(ctx context.Context, x Buffer, op ReduceOp) (Buffer, error)
	// AllGather concatenates every member's x along dim; lens[i] is
	// member i's length along dim.
	AllGather(ctx context.Context, x Buffer, dim int, lens []int) (Buffer, error)
	// ReduceScatter reduces x over the group and returns chunk Index of
	// the result cut along dim into lens.
	ReduceScatter(ctx context.Context, x Buffer, dim int, lens []int, op ReduceOp) (Buffer, error)
	// AllToAll cuts x along splitDim into splitLens, sends piece i to
	// member i, and concatenates what arrives along catDim in member
	// order; catLens[i] is member i's length along catDim (when catDim is
	// splitDim every piece has this member's splitLens entry instead).
	AllToAll(ctx context.Context, x Buffer, splitDim int, splitLens []int, catDim int, catLens []int) (Buffer, error)
	// Broadcast returns root's x on every member; the others pass nil and
	// the type and shape they expect.
	Broadcast(ctx context.Context, x Buffer, root int, dt ir.DType, shape []int) (Buffer, error)
	// Reduce returns the sum over the group on root and zeros of x's
	// type and shape on the others.
	Reduce(ctx context.Context, x Buffer, root int) (Buffer, error)
}

// ReduceOp combines partial values.
type ReduceOp uint8

const (
	OpSum ReduceOp = iota
	OpMax
)

// ErrPeerTimeout is wrapped by errors of receives whose peer never sent.
var ErrPeerTimeout = errors.New("timed out")

func ctxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ErrPeerTimeout
	}
	return ctx.Err()
}

// Transport moves host tensors between the ranks of one process, per
// (sender, receiver, tag) channel in order.
type Transport interface {
	Send(ctx context.Context, from, to, tag int, t *Tensor) error
	Recv(ctx context.Context, to, from, tag int) (*Tensor, error)
}

// ChanTransport connects the ranks of one process with a buffered channel
// per (sender, receiver, tag).
type ChanTransport struct {
	chans sync.Map       // [3]int{from, to, tag} → chan *Tensor, made on first use
	sent  []atomic.Int64 // bytes sent per rank
}

// NewChanTransport makes a transport for n ranks.
func NewChanTransport(n int) *ChanTransport {
	return &ChanTransport{sent: make([]atomic.Int64, n)}
}

// ch finds a channel without a lock once it exists.
func (c *ChanTransport) ch(from, to, tag int) chan *Tensor {
	k := [3]int{from, to, tag}
	if ch, ok := c.chans.Load(k); ok {
		return ch.(chan *Tensor)
	}
	// A collective sends at most a group's worth of messages to one peer
	// before it must receive, so this rarely fills; if it does, Send
	// waits (bounded by ctx).
	ch, _ := c.chans.LoadOrStore(k, make(chan *Tensor, 64))
	return ch.(chan *Tensor)
}

// Send implements Transport. Tensors are immutable once produced, so the
// receiver may share t's storage with the sender.
func (c *ChanTransport) Send(ctx context.Context, from, to, tag int, t *Tensor) error {
	select {
	case c.ch(from, to, tag) <- t:
		c.sent[from].Add(t.Bytes())
		return nil
	case <-ctx.Done():
		return fmt.Errorf("send to rank %d: %w", to, ctxErr(ctx))
	}
}

// Recv implements Transport.
func (c *ChanTransport) Recv(ctx context.Context, to, from, tag int) (*Tensor, error) {
	select {
	case t := <-c.ch(from, to, tag):
		return t, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for rank %d: %w", from, ctxErr(ctx))
	}
}

// BytesSent is the bytes rank dev has sent so far.
func (c *ChanTransport) BytesSent(dev int) int64 { return c.sent[dev].Load() }

// InProc is one goroutine rank's Comm over a shared ChanTransport. Its
// groups run their collectives through shared memory (comm_shm.go).
type InProc struct {
	T      *ChanTransport
	rank   int
	size   int
	shared *shmWorld
	pool   *hostPool // collective results' arena (DrawResultsFrom)
	// held is this rank's tensors of shared results, each with its
	// count of holders (comm_shm_pool.go)
	held map[*Tensor]*sharedResult
	// dev runs the collectives of groups that fit it on the device the
	// ranks share (DrawResultsFrom)
	dev DeviceCollectives
	// park is what the rank's waits at its groups' barriers park with
	// when the launcher runs it in a shift (shift.go)
	park *parker
}

// NewInProc returns the n communicators of an in-process world.
func NewInProc(n int) []*InProc {
	t, w := NewChanTransport(n), &shmWorld{devs: make([]DeviceCollectives, n)}
	w.hot.Store(hotRanks(n))
	out := make([]*InProc, n)
	for r := range out {
		out[r] = &InProc{T: t, rank: r, size: n, shared: w, held: map[*Tensor]*sharedResult{}, park: &parker{}}
	}
	return out
}

func (c *InProc) Rank() int        { return c.rank }
func (c *InProc) Size() int        { return c.size }
func (c *InProc) BytesSent() int64 { return c.T.BytesSent(c.rank) }

// Flush implements Comm: a channel send has completed when it returns.
func (c *InProc) Flush(context.Context) error { return nil }

// collectiveTag keeps each group's ring messages apart from the others'
// and from point-to-point tags (which are small non-negative numbers).
func collectiveTag(group int) int { return -1 - group }

// NewGroup implements Comm: an in-process group shares a table with its
// members, found by the plan's group id and the members.
func (c *InProc) NewGroup(_ context.Context, id int, members []int) (Group, error) {
	idx := -1
	for i, m := range members {
		if m == c.rank {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("rank %d is not in group %v", c.rank, members)
	}
	shm := &shmMember{s: c.shared.group(id, members), sent: &c.T.sent[c.rank], pool: c.pool, held: c.held, park: c.park}
	if c.dev != nil && len(members) <= c.dev.MaxMembers() && c.shared.sameDevice(members) {
		shm.dev = c.dev
	}
	return &Ring{T: c.T, Devices: members, Rank: idx, Tag: collectiveTag(id), shm: shm}, nil
}

// Send implements Comm.
func (c *InProc) Send(ctx context.Context, peer, tag int, b Buffer) error {
	if c.dev != nil && c.shared.devs[peer] == c.dev {
		return c.sendOnDevice(ctx, peer, tag, b)
	}
	t, err := host(b)
	if err != nil {
		return err
	}
	return c.T.Send(ctx, c.rank, peer, tag, t)
}

// Recv implements Comm.
func (c *InProc) Recv(ctx context.Context, peer, tag int, dt ir.DType, shape []int) (Buffer, error) {
	if c.dev != nil && c.shared.devs[peer] == c.dev {
		return c.recvOnDevice(ctx, peer, tag, dt, shape)
	}
	t, err := c.T.Recv(ctx, c.rank, peer, tag)
	if err != nil {
		return nil, err
	}
	if t.DType != dt || !sameShape(t.Shape, shape) {
		return nil, fmt.Errorf("received %s%v from rank %d (tag %d), expected %s%v", t.DType, t.Shape, peer, tag, dt, shape)
	}
	return t, nil
}

// Ring is a Group running the classic algorithms over a Transport: ring
// all-gather, ring reduce-scatter, all-reduce as reduce-scatter then
// all-gather (each rank sends 2(p-1)/p of the data), pairwise all-to-all,
// binomial-tree broadcast. Devices are the members in ring order, Rank
// the caller's index among them, Tag the channel its messages use.
//
// A Ring made by InProc.NewGroup simulates these algorithms: its members
// share memory, and its collectives move the data directly (comm_shm.go)
// while counting the bytes and reporting the steps the message-passing
// algorithms would. A Ring built by hand passes messages, and is the
// reference the shared-memory path is tested against.
type Ring struct {
	T       Transport
	Devices []int
	Rank    int
	Tag     int
	// OnStep, if set, sees every ring step: the phase (all_gather,
	// reduce_scatter), the step's index, the bytes this rank sent and
	// when the step began and ended (timelines draw the ring).
	OnStep func(phase string, step int, bytes int64, start, end time.Time)
	shm    *shmMember // nil: pass messages over T
}

// stepDone reports a finished ring step to OnStep.
func (g *Ring) stepDone(phase string, k int, sent *Tensor, start time.Time) {
	if g.OnStep != nil {
		g.OnStep(phase, k, int64(sent.Numel()*sent.DType.Size()), start, time.Now())
	}
}

func (g *Ring) Size() int    { return len(g.Devices) }
func (g *Ring) Index() int   { return g.Rank }
func (g *Ring) next() int    { return g.Devices[(g.Rank+1)%g.Size()] }
func (g *Ring) prev() int    { return g.Devices[(g.Rank-1+g.Size())%g.Size()] }
func (g *Ring) me() int      { return g.Devices[g.Rank] }
func (g *Ring) at(i int) int { return g.Devices[mod(i, g.Size())] }
func mod(a, p int) int       { return ((a % p) + p) % p }

func (g *Ring) send(ctx context.Context, to int, t *Tensor) error {
	return g.T.Send(ctx, g.me(), to, g.Tag, t)
}

func (g *Ring) recv(ctx context.Context, from int) (*Tensor, error) {
	return g.T.Recv(ctx, g.me(), from, g.Tag)
}

// AllGather implements Group: p-1 steps; in step k each rank forwards the
// block it received in step k-1 (its own at k=0) to the next rank.
func (g *Ring) AllGather(ctx context.Context, x Buffer, dim int, lens []int) (Buffer, error) {
	if g.onDevice() {
		return g.devAllGather(ctx, x, dim, lens)
	}
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	if g.shm != nil {
		return g.shmAllGather(ctx, t, dim, lens)
	}
	return g.allGather(ctx, t, dim, lens)
}

func (g *Ring) allGather(ctx context.Context, t *Tensor, dim int, lens []int) (*Tensor, error) {
	p := g.Size()
	blocks := make([]*Tensor, p)
	blocks[g.Rank] = t
	for k := 0; k < p-1; k++ {
		start := time.Now()
		if err := g.send(ctx, g.next(), blocks[mod(g.Rank-k, p)]); err != nil {
			return nil, err
		}
		got, err := g.recv(ctx, g.prev())
		if err != nil {
			return nil, err
		}
		g.stepDone("all_gather", k, blocks[mod(g.Rank-k, p)], start)
		recv := mod(g.Rank-k-1, p)
		if got.Shape[dim] != lens[recv] {
			return nil, fmt.Errorf("all_gather: block %d has length %d along dim %d, expected %d", recv, got.Shape[dim], dim, lens[recv])
		}
		blocks[recv] = got
	}
	return ConcatDim(blocks, dim), nil
}

// ReduceScatter implements Group: in step k rank r sends its running sum
// of chunk r-k-1 to the next rank and adds the chunk r-k-2 it receives;
// after p-1 steps chunk r is complete on rank r.
func (g *Ring) ReduceScatter(ctx context.Context, x Buffer, dim int, lens []int, op ReduceOp) (Buffer, error) {
	if g.onDevice() {
		return g.devReduceScatter(ctx, x, dim, lens, op)
	}
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	if g.shm != nil {
		return g.shmReduceScatter(ctx, t, dim, lens, op)
	}
	return g.reduceScatter(ctx, t, dim, lens, op)
}

func (g *Ring) reduceScatter(ctx context.Context, t *Tensor, dim int, lens []int, op ReduceOp) (*Tensor, error) {
	if isHalf(t.DType) {
		if op == OpSum {
			return g.reduceScatterHalf(ctx, t, dim, lens)
		}
		return g.reduceScatterCopy(ctx, t, dim, lens, op)
	}
	// The running sum of a chunk travels the ring: this rank starts the
	// one of chunk r-1 as a copy of its own piece, then each step adds its
	// piece into the sum it received and passes that on. A received sum is
	// a buffer its sender made and never touches again, so adding into it
	// is safe, and a rank holds one chunk of scratch rather than a copy of
	// its whole input (which at 256 data-parallel ranks is a gradient's
	// worth of memory per rank during every all-reduce).
	p := g.Size()
	offs := make([]int, p+1)
	for i, l := range lens {
		offs[i+1] = offs[i] + l
	}
	run := chunkOf(t, dim, offs, mod(g.Rank-1, p), true)
	for k := 0; k < p-1; k++ {
		start := time.Now()
		if err := g.send(ctx, g.next(), run); err != nil {
			return nil, err
		}
		got, err := g.recv(ctx, g.prev())
		if err != nil {
			return nil, err
		}
		if err := accumulateOwn(got, chunkOf(t, dim, offs, mod(g.Rank-k-2, p), false), op); err != nil {
			return nil, err
		}
		g.stepDone("reduce_scatter", k, run, start)
		run = got
	}
	return run, nil
}

// reduceScatterCopy is the ring reduce-scatter over a copy of every chunk,
// for half-precision maxima (accumulate widens its two operands).
func (g *Ring) reduceScatterCopy(ctx context.Context, t *Tensor, dim int, lens []int, op ReduceOp) (*Tensor, error) {
	p := g.Size()
	chunks := SplitDim(t, dim, lens)
	for k := 0; k < p-1; k++ {
		start := time.Now()
		if err := g.send(ctx, g.next(), chunks[mod(g.Rank-k-1, p)]); err != nil {
			return nil, err
		}
		got, err := g.recv(ctx, g.prev())
		if err != nil {
			return nil, err
		}
		if err := accumulate(chunks[mod(g.Rank-k-2, p)], got, op); err != nil {
			return nil, err
		}
		g.stepDone("reduce_scatter", k, chunks[mod(g.Rank-k-1, p)], start)
	}
	return chunks[g.Rank], nil
}

// chunkOf is piece i of t cut along dim at offs: a copy when fresh (it
// will be sent and changed by its receiver), else a view of t's storage
// where the piece is contiguous (every dim before dim has extent 1),
// which the caller only reads.
func chunkOf(t *Tensor, dim int, offs []int, i int, fresh bool) *Tensor {
	count := slices.Clone(t.Shape)
	count[dim] = offs[i+1] - offs[i]
	outer, inner := 1, 1
	for _, d := range t.Shape[:dim] {
		outer *= d
	}
	for _, d := range t.Shape[dim+1:] {
		inner *= d
	}
	if fresh || outer != 1 {
		off := make([]int, len(t.Shape))
		off[dim] = offs[i]
		return Extract(t, off, count)
	}
	v := header(t.DType, count)
	v.Data = sliceData(t.Data, offs[i]*inner, offs[i+1]*inner)
	return v
}

// sliceData is d[lo:hi] for any storage type.
func sliceData(d any, lo, hi int) any {
	switch x := d.(type) {
	case []float32:
		return x[lo:hi]
	case []float64:
		return x[lo:hi]
	case []int32:
		return x[lo:hi]
	case []int64:
		return x[lo:hi]
	case []uint16:
		return x[lo:hi]
	}
	panic(fmt.Sprintf("rt: no storage type %T", d))
}

// accumulateOwn folds this rank's piece own into the running value dst
// received from the previous rank, with accumulate(own-copy, dst)'s
// result: own + dst, or for a maximum own unless dst is greater (which
// decides ties and NaNs as the copying ring did).
func accumulateOwn(dst, own *Tensor, op ReduceOp) error {
	if !sameShape(dst.Shape, own.Shape) || dst.DType != own.DType {
		return fmt.Errorf("reduce: received %s%v, expected %s%v", dst.DType, dst.Shape, own.DType, own.Shape)
	}
	if isHalf(dst.DType) {
		return fmt.Errorf("reduce: %s in place is not supported", dst.DType)
	}
	return combine(dst, own, op, true)
}

// reduceScatterHalf sums half-precision partials in f32 and rounds once.
// A ring would round its running sum to the half dtype at every hop (the
// result then depends on the ring order and differs per chunk), so each
// member instead sends chunk j straight to member j — the same (p-1)/p of
// the data a ring sends — and adds the p chunks it holds in f32, in member
// order, so every chunk is reduced the same way wherever it lands.
func (g *Ring) reduceScatterHalf(ctx context.Context, t *Tensor, dim int, lens []int) (*Tensor, error) {
	p := g.Size()
	chunks := SplitDim(t, dim, lens)
	got := make([]*Tensor, p)
	got[g.Rank] = chunks[g.Rank]
	for k := 1; k < p; k++ {
		start := time.Now()
		if err := g.send(ctx, g.at(g.Rank+k), chunks[mod(g.Rank+k, p)]); err != nil {
			return nil, err
		}
		x, err := g.recv(ctx, g.at(g.Rank-k))
		if err != nil {
			return nil, err
		}
		got[mod(g.Rank-k, p)] = x
		g.stepDone("reduce_scatter", k-1, chunks[mod(g.Rank+k, p)], start)
	}
	return sumHalf(got)
}

// sumHalf adds half-precision tensors of one shape in f32, in order, and
// rounds the total once.
func sumHalf(parts []*Tensor) (*Tensor, error) {
	acc := widen(parts[0])
	for _, x := range parts[1:] {
		if x.DType != parts[0].DType {
			return nil, fmt.Errorf("reduce: received %s%v, expected %s%v", x.DType, x.Shape, parts[0].DType, parts[0].Shape)
		}
		if err := accumulate(acc, widen(x), OpSum); err != nil {
			return nil, err
		}
	}
	return narrow(acc, parts[0].DType), nil
}

// AllReduce implements Group: ring reduce-scatter of the flattened tensor
// in p balanced chunks, then ring all-gather of the chunks.
func (g *Ring) AllReduce(ctx context.Context, x Buffer, op ReduceOp) (Buffer, error) {
	if g.onDevice() {
		return g.devAllReduce(ctx, x, op)
	}
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	if g.shm != nil {
		return g.shmAllReduce(ctx, t, op)
	}
	p := g.Size()
	if p == 1 {
		return t.Clone(), nil
	}
	n := t.Numel()
	flat := &Tensor{DType: t.DType, Shape: []int{n}, Data: t.Data}
	lens := balanced(n, p)
	mine, err := g.reduceScatter(ctx, flat, 0, lens, op)
	if err != nil {
		return nil, err
	}
	all, err := g.allGather(ctx, mine, 0, lens)
	if err != nil {
		return nil, err
	}
	all.Shape = append([]int{}, t.Shape...)
	return all, nil
}

// AllToAll implements Group: p-1 pairwise rounds; in round k rank r sends
// to r+k and receives from r-k.
func (g *Ring) AllToAll(ctx context.Context, x Buffer, splitDim int, lens []int, catDim int, catLens []int) (Buffer, error) {
	if g.onDevice() {
		return g.devAllToAll(ctx, x, splitDim, lens, catDim, catLens)
	}
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	if g.shm != nil {
		return g.shmAllToAll(ctx, t, splitDim, lens, catDim, catLens)
	}
	p := g.Size()
	if p == 1 {
		// the lone piece is the whole block: one copy, not a split and a
		// concatenation (a one-device plan of the tiny GPT spends 1.2 MB
		// per step on them otherwise)
		return t.Clone(), nil
	}
	pieces := SplitDim(t, splitDim, lens)
	got := make([]*Tensor, p)
	got[g.Rank] = pieces[g.Rank]
	for k := 1; k < p; k++ {
		if err := g.send(ctx, g.at(g.Rank+k), pieces[mod(g.Rank+k, p)]); err != nil {
			return nil, err
		}
		x, err := g.recv(ctx, g.at(g.Rank-k))
		if err != nil {
			return nil, err
		}
		from := mod(g.Rank-k, p)
		want := catLens[from]
		if catDim == splitDim {
			want = lens[g.Rank]
		}
		if x.Shape[catDim] != want {
			return nil, fmt.Errorf("all_to_all: member %d's piece has length %d along dim %d, expected %d", from, x.Shape[catDim], catDim, want)
		}
		got[from] = x
	}
	return ConcatDim(got, catDim), nil
}

// Broadcast implements Group: binomial tree rooted at root; lg p rounds.
func (g *Ring) Broadcast(ctx context.Context, x Buffer, root int, dt ir.DType, shape []int) (Buffer, error) {
	if g.onDevice() {
		return g.devBroadcast(ctx, x, root, dt, shape)
	}
	var t *Tensor
	if x != nil {
		var err error
		if t, err = host(x); err != nil {
			return nil, err
		}
	}
	if g.shm != nil {
		return g.shmBroadcast(ctx, t, root, dt, shape)
	}
	p := g.Size()
	vr := mod(g.Rank-root, p)
	mask := 1
	for mask < p {
		if vr&mask != 0 {
			got, err := g.recv(ctx, g.at(vr-mask+root))
			if err != nil {
				return nil, err
			}
			t = got
			break
		}
		mask <<= 1
	}
	mask >>= 1
	for mask > 0 {
		if vr+mask < p {
			if err := g.send(ctx, g.at(vr+mask+root), t); err != nil {
				return nil, err
			}
		}
		mask >>= 1
	}
	if t.DType != dt || !sameShape(t.Shape, shape) {
		return nil, fmt.Errorf("broadcast: got %s%v from the root, expected %s%v", t.DType, t.Shape, dt, shape)
	}
	return t, nil
}

// Reduce implements Group: the binomial tree of Broadcast run backwards;
// every member but the root sends once. Half precision is summed in f32
// (the partial sums travel in f32) and rounded once, on the root.
func (g *Ring) Reduce(ctx context.Context, x Buffer, root int) (Buffer, error) {
	if g.onDevice() {
		return g.devReduce(ctx, x, root)
	}
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	if g.shm != nil {
		return g.shmReduce(ctx, t, root)
	}
	acc := widen(t).Clone()
	p := g.Size()
	vr := mod(g.Rank-root, p)
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			if err := g.send(ctx, g.at(vr-mask+root), acc); err != nil {
				return nil, err
			}
			return NewTensor(t.DType, t.Shape), nil
		}
		if vr+mask < p {
			got, err := g.recv(ctx, g.at(vr+mask+root))
			if err != nil {
				return nil, err
			}
			if err := accumulate(acc, got, OpSum); err != nil {
				return nil, err
			}
		}
	}
	if isHalf(t.DType) {
		return narrow(acc, t.DType), nil // the f32 sum rounded once
	}
	return acc, nil // summed in t's own type: integers exactly
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

// accumulate folds src into dst elementwise (a maximum takes src only
// where it is greater).
func accumulate(dst, src *Tensor, op ReduceOp) error { return combine(dst, src, op, false) }

// combine is accumulate, or with own accumulateOwn's tie rule: one dtype
// dispatch for both.
func combine(dst, src *Tensor, op ReduceOp, own bool) error {
	if !sameShape(dst.Shape, src.Shape) || dst.DType != src.DType {
		return fmt.Errorf("reduce: received %s%v, expected %s%v", src.DType, src.Shape, dst.DType, dst.Shape)
	}
	switch d := dst.Data.(type) {
	case []float32:
		fold(d, src.Data.([]float32), op, own)
	case []float64:
		fold(d, src.Data.([]float64), op, own)
	case []int32:
		fold(d, src.Data.([]int32), op, own)
	case []int64:
		fold(d, src.Data.([]int64), op, own)
	case []uint16: // half precision, two values: add in f32, round once
		// (a sum of more than two must use sumHalf, which rounds once)
		w := widen(dst)
		fold(w.Data.([]float32), widen(src).Data.([]float32), op, own)
		copy(d, narrow(w, dst.DType).Data.([]uint16))
	}
	return nil
}

// fold is d op= s; a maximum keeps d where it is greater, else takes s —
// own: where d is not greater (ties and NaNs go to s) — else only where s
// is greater. The sums are addInto's (commutative, so the same either
// way round).
func fold[T Num](d, s []T, op ReduceOp, own bool) {
	switch {
	case op != OpMax:
		addInto(d, s)
	case own:
		maxInto(d, s)
	default:
		for i, v := range s[:len(d)] {
			if v > d[i] {
				d[i] = v
			}
		}
	}
}
