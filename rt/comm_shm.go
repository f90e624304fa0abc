package rt

// Shared-memory collectives for the in-process launcher.
//
// Every rank of a local run is a goroutine of one process, so a collective
// need not pass messages around a ring: the members of a group post their
// input in a table they share, meet at a barrier, and then each member
// does its own part of the work reading its peers' buffers directly — an
// all-reduce member reduces its chunk of the result, a reduce-scatter
// member its own chunk, an all-gather member copies its block into place
// — and they meet at a second barrier, after which nobody reads anyone's
// buffers again, so every member may free or reuse its input at once. Two
// barriers per collective, no per-step buffers, no concatenation copies.
// A result every member holds alike (all-reduce, all-gather, broadcast)
// is one buffer for the whole group (see shared); a result of a member's
// own comes from its rank's arena when the launcher gave it one.
//
// What is reported is still the ring algorithms' traffic (comm_shm_report.go):
// the bytes a rank counts as sent and the ring steps it hands OnStep are
// those of the ring reduce-scatter, all-gather and the other algorithms of
// Ring, the algorithm being simulated; only the data moves differently.
// The reductions add the operands in the ring's order (chunk c starts
// from member c+1 and goes round the ring to member c; half precision in
// f32 in member order, rounded once), so results are bitwise those of the
// message-passing Ring, which stays as the reference.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshrun/meshrun/ir"
)

// shmWorld holds the shared tables of one in-process world's groups.
type shmWorld struct {
	groups sync.Map // group key → *shmShared
	// devs is each rank's device, when its backend runs collectives
	// (DrawResultsFrom): a group whose members all share one runs there
	devs []DeviceCollectives
	// mail holds the point-to-point messages of ranks sharing a device:
	// [3]int{from, to, tag} → chan Buffer (comm_dev.go)
	mail sync.Map
	// hot: the world's ranks wait hot at their barriers (hotwait.go);
	// set when the world is made and again by the local launcher at each
	// execution, as GOMAXPROCS may have changed since
	hot atomic.Bool
}

// shmShared is what the members of one group share.
type shmShared struct {
	bar barrier
	// post is what members post for a collective, two sets used in turn
	// by the parity of the barrier's generation at the collective's
	// first barrier (see posted): a member that leaves a one-barrier
	// collective (comm_shm_small.go) and posts for the next one must not
	// overwrite what a slower peer still reads of this one. A set is
	// reused two generations later, when every member has passed the
	// barrier in between and so finished reading it.
	post [2]posting
	// small is the most bytes a member's input times the group's size
	// may be for the one-barrier algorithms (shmSmallBytes; tests set it
	// to check both).
	small int64
	free  sharedFree // memory of shared results every member let go
}

// posting is one set of what the members post.
type posting struct {
	in  []*Tensor // per member: its input to the collective
	sig []call    // per member: the collective it is in
	out []*Tensor // per member: a result peers write into (a shared one on member 0, a reduce's on its root)
	// stage is per member its own copy of its input for the one-barrier
	// algorithms, reused from one collective to the next
	stage []*staging
	// owner counts the holders of the shared result the first member
	// posted in out (comm_shm_pool.go)
	owner *sharedResult
	// din and dout are in and out for a group on a device (comm_dev.go),
	// ddev the device each member runs its part on
	din, dout []Buffer
	ddev      []DeviceCollectives
	derr      []error // each member's failure in its part, posted at the second barrier
}

// shmMember is one member's side of a shared-memory group.
type shmMember struct {
	s    *shmShared
	sent *atomic.Int64 // the rank's bytes-sent counter, in the ring's terms
	pool *hostPool     // where results come from (nil: fresh memory)
	wide []float32     // a tile of f32 scratch for half precision
	// steps is scratch for the ring steps a collective reports; the first
	// counted of them are already counted as sent (a bucket's collectives
	// leave theirs pending for the worker one after another)
	steps   []ringStep
	counted int
	// late: the worker lays the steps over the collective's span
	// (stepsLater), so the collective reads no clock
	late bool
	par  int // the posting set of the current collective (shmShared.post)
	// timeout, if positive, bounds each wait at a barrier besides the
	// context (SetTimeout)
	timeout time.Duration
	alarm   alarm // the timer of this member's waits (barrier.waitWith)
	// held is the rank's table of its tensors of shared results
	// (InProc.held; nil: not counted)
	held map[*Tensor]*sharedResult
	// dev, if set, runs the group's collectives on the device its
	// members share (comm_dev.go)
	dev DeviceCollectives
	// park is the rank's parker (InProc.park): its waits park when the
	// rank runs in a shift (shift.go)
	park *parker
}

// SetTimeout makes each of this group's waits at a barrier fail with
// ErrPeerTimeout after d (0: only the context bounds them), and says
// whether the group can: only an in-process shared-memory group can.
func (g *Ring) SetTimeout(d time.Duration) bool {
	if g.shm == nil {
		return false
	}
	g.shm.timeout = d
	return true
}

// group finds (or makes) the shared table of the group with plan id and
// members; every member of the group calls it once at start-up.
func (w *shmWorld) group(id int, members []int) *shmShared {
	key := strconv.Itoa(id) + fmt.Sprint(members)
	n := len(members)
	fresh := &shmShared{bar: barrier{n: n, spin: n <= runtime.GOMAXPROCS(0), hot: &w.hot}, small: shmSmallBytes}
	for i := range fresh.post {
		fresh.post[i] = posting{in: make([]*Tensor, n), sig: make([]call, n), out: make([]*Tensor, n), stage: make([]*staging, n),
			din: make([]Buffer, n), dout: make([]Buffer, n), ddev: make([]DeviceCollectives, n), derr: make([]error, n)}
	}
	s, _ := w.groups.LoadOrStore(key, fresh)
	return s.(*shmShared)
}

// barrier is a reusable barrier for the n members of a group. Waiting
// honours the context, so a member whose peer never comes times out
// rather than deadlocking, and withdraws, leaving the barrier usable.
type barrier struct {
	mu   sync.Mutex
	n    int
	spin bool // yield a while before sleeping (see spins)
	// hot, when set (nil: never), says whether to poll for up to
	// hotBudget before sleeping (hotwait.go): every rank of the process
	// has a processor of its own
	hot   *atomic.Bool
	count int
	gen   atomic.Uint64 // generations completed
	// ch is closed when the current generation is complete; made only
	// when a member must sleep (nil until then): most generations of a
	// mesh step complete while the early members spin, and a channel
	// made for every one was 2% of the objects a tiny-GPT mesh step
	// allocated (issue 10)
	ch chan struct{}
}

// spins is how many times a member yields, watching the generation,
// before it sleeps on the channel, when every member can have a
// processor of its own (GOMAXPROCS when the group is made): the last one
// then usually arrives within microseconds, and waking a sleeping
// goroutine costs more. With more members than processors a spinning
// member would only take turns from those still working, so it sleeps at
// once. (On the Megatron MLP's sub-millisecond steps on 2 cores, spinning
// also with up to 4× GOMAXPROCS members made no difference visible above
// the machine's noise.)
const spins = 50

// wait returns when every member has arrived, or fails when ctx ends or,
// if timeout is positive, when this member has slept that long: a timer
// made only when the member must sleep, so that a collective that finds
// its peers on time costs no timer (the worker's in-process groups pass
// their timeout here instead of a context with a deadline per
// collective; see Worker.exec).
func (b *barrier) wait(ctx context.Context, timeout time.Duration) error {
	return b.waitWith(ctx, timeout, nil, nil)
}

// alarm is a member's timer for its waits at a barrier, made on its
// first sleep and reset for each later one: four ranks on two cores
// sleep at most collectives, and a timer made per sleep was two
// allocations and a timer-heap insertion each time.
type alarm struct{ t *time.Timer }

// set starts the timer for d and returns its channel.
func (a *alarm) set(d time.Duration) <-chan time.Time {
	if a.t == nil {
		a.t = time.NewTimer(d)
	} else {
		a.t.Reset(d) // stopped: nothing stale in its channel (Go ≥ 1.23 timers)
	}
	return a.t.C
}

// waitWith is wait with the member's alarm (nil: a timer of its own)
// and, when its rank runs in a shift (shift.go), the parker it parks
// with instead of polling or sleeping.
func (b *barrier) waitWith(ctx context.Context, timeout time.Duration, a *alarm, pk *parker) error {
	b.mu.Lock()
	b.count++
	if b.count == b.n {
		// the generation first: a member woken by the channel reads it
		// at once for its next collective's postings (meet)
		b.gen.Add(1)
		if b.ch != nil {
			close(b.ch)
		}
		b.ch, b.count = nil, 0
		b.mu.Unlock()
		return nil
	}
	gen := b.gen.Load()
	if pk.parking() {
		b.mu.Unlock()
		return b.parkFor(ctx, gen, timeout, pk)
	}
	hot := b.hot != nil && b.hot.Load()
	var ch chan struct{}
	if !b.spin && !hot {
		ch = b.sleeping()
	}
	b.mu.Unlock()
	if hot && pollFor(hotBudget, func() bool { return b.gen.Load() != gen }) {
		return nil
	}
	if b.spin || hot {
		for range spins {
			if b.gen.Load() != gen {
				return nil
			}
			runtime.Gosched()
		}
		b.mu.Lock()
		if b.gen.Load() != gen {
			b.mu.Unlock()
			return nil
		}
		ch = b.sleeping()
		b.mu.Unlock()
	}
	var expired <-chan time.Time
	if timeout > 0 {
		if a == nil {
			a = &alarm{}
		}
		expired = a.set(timeout)
		defer a.t.Stop()
	}
	err := ErrPeerTimeout
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		err = ctxErr(ctx)
	case <-expired:
	}
	return b.withdraw(gen, err)
}

// withdraw takes back a member's arrival in generation gen after its
// wait ended with err, unless the generation completed meanwhile.
func (b *barrier) withdraw(gen uint64, err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen.Load() != gen {
		return nil // completed as the wait ended
	}
	b.count--
	return err
}

// parkFor is a shift's rank's wait for generation gen to complete: it
// parks until then, and each time its shift resumes it, checks ctx and,
// if timeout is positive, how long it has waited.
func (b *barrier) parkFor(ctx context.Context, gen uint64, timeout time.Duration, pk *parker) error {
	pk.moves++
	var since time.Time
	if timeout > 0 {
		since = time.Now()
	}
	for {
		if b.gen.Load() != gen {
			pk.moves++
			return nil
		}
		if ctx.Err() != nil {
			return b.withdraw(gen, ctxErr(ctx))
		}
		if timeout > 0 && time.Since(since) > timeout {
			return b.withdraw(gen, ErrPeerTimeout)
		}
		if err := pk.park(); err != nil {
			return b.withdraw(gen, err)
		}
	}
}

// sleeping is the channel the current generation's completion closes,
// made by the first member that must sleep on it (b.mu held).
func (b *barrier) sleeping() chan struct{} {
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

// call names a collective and the arguments every member must agree on.
type call struct {
	kind  string
	arg   int  // the root, the dim or the reduction
	small bool // the one-barrier algorithm (comm_shm_small.go)
}

// meet posts x (and out) as this member's input to collective c and waits
// for every member. Members whose programs disagree on the collective
// (which a correct plan never does) all get an error here rather than
// reading each other's buffers wrongly.
func (g *Ring) meet(ctx context.Context, c call, x, out *Tensor) error {
	s := g.shm.s
	g.begin()
	post := g.posted()
	post.in[g.Rank], post.out[g.Rank], post.sig[g.Rank] = x, out, c
	if err := s.bar.waitWith(ctx, g.shm.timeout, &g.shm.alarm, g.shm.park); err != nil {
		return err
	}
	for m, d := range post.ddev {
		if d != nil {
			return fmt.Errorf("%s: member %d's buffers are on a device, member %d's on the host", c.kind, m, g.Rank)
		}
	}
	return g.agree(c)
}

// agree checks that every member posted collective c.
func (g *Ring) agree(c call) error {
	for m, o := range g.posted().sig {
		if o.kind == c.kind && o.arg == c.arg && o.small != c.small {
			return fmt.Errorf("%s: member %d's tensor and member %d's differ in size", c.kind, m, g.Rank)
		}
		if o != c {
			return fmt.Errorf("collectives out of step: member %d is in %s(%d), member %d in %s(%d)", m, o.kind, o.arg, g.Rank, c.kind, c.arg)
		}
	}
	return nil
}

// part waits at the second barrier, after which no member reads another's
// buffers, and forgets what this member posted.
func (g *Ring) part(ctx context.Context) error {
	err := g.shm.s.bar.waitWith(ctx, g.shm.timeout, &g.shm.alarm, g.shm.park)
	if err == nil {
		// (after a failed wait the peers may still be reading the
		// postings; this member's next collective overwrites them)
		post := g.posted()
		post.in[g.Rank], post.out[g.Rank] = nil, nil
	}
	return err
}

// begin picks the posting set of the collective this member is about to
// meet in: no generation completes before this member arrives, so the
// parity read here is the one every member reads for this collective.
func (g *Ring) begin() { g.shm.par = int(g.shm.s.bar.gen.Load() & 1) }

// posted is the set of postings of the collective this member is in.
func (g *Ring) posted() *posting { return &g.shm.s.post[g.shm.par] }

// finish waits at the second barrier and, when the collective succeeded,
// reports its simulated ring steps and returns out.
func (g *Ring) finish(ctx context.Context, start time.Time, out *Tensor, err error) (Buffer, error) {
	if perr := g.part(ctx); err == nil {
		err = perr
	}
	if err != nil {
		g.shm.steps = g.shm.steps[:g.shm.counted] // this collective's only
		return nil, err
	}
	g.account(start)
	return out, nil
}

// result is a buffer for a member's own result (reduce-scatter,
// all-to-all), whose every element the collective writes: from the rank's arena when it has one (the worker
// frees it there like a kernel's output), else fresh memory.
func (g *Ring) result(dt ir.DType, shape []int) *Tensor {
	p := g.shm.pool
	if p == nil {
		return NewTensor(dt, shape)
	}
	t := p.reuse(dt, shape)
	if t == nil {
		t = NewTensor(dt, shape)
	}
	t.home = p
	p.handOut(t.Bytes())
	return t
}

// DrawResultsFrom lets this rank's collectives take their results from
// be's arena (a recycling CPU backend), so that a training step's
// collectives reuse last step's memory instead of faulting in fresh pages.
// Call it before the groups are made (NewWorker).
//
// A device backend that runs collectives itself (DeviceCollectives: the
// ranks share one GPU) has this rank's groups whose members all share it
// run them there instead. Call it for every rank before any group is
// made: NewGroup looks at every member's device.
func (c *InProc) DrawResultsFrom(be Backend) {
	if cpu, ok := be.(*CPU); ok {
		c.pool = cpu.arena
	}
	if d, ok := be.(DeviceCollectives); ok {
		c.dev = d
		c.shared.devs[c.rank] = d
	}
}

// shmAllReduce: member r reduces chunk r of the flattened tensor (the
// ring's balanced chunks) into the group's one result.
func (g *Ring) shmAllReduce(ctx context.Context, t *Tensor, op ReduceOp) (Buffer, error) {
	if g.isSmall(t.Bytes()) {
		return g.smallAllReduce(ctx, t, op)
	}
	start := g.began()
	p, n := g.Size(), t.Numel()
	if err := g.meet(ctx, call{kind: "all_reduce", arg: int(op)}, t, g.shared(t.DType, t.Shape)); err != nil {
		return nil, err
	}
	out, owner := g.posted().out[0], g.posted().owner
	err := g.sameInputs("all_reduce", func(shape []int) bool { return numel(shape) == n })
	if err == nil {
		lens := balanced(n, p)
		lo := 0
		for _, l := range lens[:g.Rank] {
			lo += l
		}
		span := rows{count: 1, len: lens[g.Rank], src: lo, srcStride: n, dst: lo, dstStride: n}
		err = g.reduceRows(out, span, op)
		sz := int64(t.DType.Size())
		chunk := func(i int) int64 { return int64(lens[i]) * sz }
		g.reduceScatterSteps(chunk, isHalf(t.DType) && op == OpSum)
		g.allGatherSteps(chunk)
	}
	return g.finishShared(ctx, start, out, owner, t.Shape, err)
}

// shmReduceScatter: member r reduces its own chunk into its result.
func (g *Ring) shmReduceScatter(ctx context.Context, t *Tensor, dim int, lens []int, op ReduceOp) (Buffer, error) {
	start := g.began()
	if err := g.checkLens(t.Shape, dim, lens); err != nil {
		return nil, err
	}
	if g.isSmall(t.Bytes()) {
		return g.smallReduceScatter(ctx, t, dim, lens, op)
	}
	shape := slices.Clone(t.Shape)
	shape[dim] = lens[g.Rank]
	out := g.result(t.DType, shape)
	if err := g.meet(ctx, call{kind: "reduce_scatter", arg: dim<<1 | int(op)}, t, nil); err != nil {
		return nil, err
	}
	err := g.sameInputs("reduce_scatter", func(shape []int) bool { return sameShape(shape, t.Shape) })
	if err == nil {
		outer, inner := around(t.Shape, dim)
		lo := 0
		for _, l := range lens[:g.Rank] {
			lo += l
		}
		span := rows{count: outer, len: lens[g.Rank] * inner, src: lo * inner, srcStride: t.Shape[dim] * inner, dstStride: lens[g.Rank] * inner}
		err = g.reduceRows(out, span, op)
		sz := int64(outer * inner * t.DType.Size())
		g.reduceScatterSteps(func(i int) int64 { return int64(lens[i]) * sz }, isHalf(t.DType) && op == OpSum)
	}
	return g.finish(ctx, start, out, err)
}

// shmAllGather: member r copies its block into the group's one result.
func (g *Ring) shmAllGather(ctx context.Context, t *Tensor, dim int, lens []int) (Buffer, error) {
	start := g.began()
	if dim < 0 || dim >= len(t.Shape) || len(lens) != g.Size() {
		return nil, fmt.Errorf("all_gather: dim %d and %d lengths for a %d-dim block in a group of %d", dim, len(lens), len(t.Shape), g.Size())
	}
	shape := slices.Clone(t.Shape)
	shape[dim] = 0
	for _, l := range lens {
		shape[dim] += l
	}
	if g.isSmall(int64(numel(shape) * t.DType.Size())) {
		return g.smallAllGather(ctx, t, dim, lens, shape)
	}
	if err := g.meet(ctx, call{kind: "all_gather", arg: dim}, t, g.shared(t.DType, shape)); err != nil {
		return nil, err
	}
	out, owner := g.posted().out[0], g.posted().owner
	err := g.checkBlocks(dim, lens)
	if err == nil {
		outer, inner := around(shape, dim)
		at := 0
		for _, l := range lens[:g.Rank] {
			at += l
		}
		copyRows(out, t, rows{count: outer, len: lens[g.Rank] * inner, srcStride: lens[g.Rank] * inner, dst: at * inner, dstStride: shape[dim] * inner})
		sz := int64(outer * inner * t.DType.Size())
		g.allGatherSteps(func(i int) int64 { return int64(lens[i]) * sz })
	}
	return g.finishShared(ctx, start, out, owner, shape, err)
}

// checkBlocks checks every posted block of an all-gather against this
// member's (blocksAgree).
func (g *Ring) checkBlocks(dim int, lens []int) error {
	return blocksAgree(g.posted().in, g.Rank, dim, lens)
}

// blocksAgree checks every member's block of an all-gather against member
// me's: the same dtype and shape but for the gathered dim, whose length
// is the member's entry of lens. Every member finds the same.
func blocksAgree[B Buffer](in []B, me, dim int, lens []int) error {
	mine := in[me]
	for m, x := range in {
		shape, own := x.Dims(), mine.Dims()
		ok := x.Elem() == mine.Elem() && len(shape) == len(own)
		for d := 0; ok && d < len(shape); d++ {
			ok = d == dim || shape[d] == own[d]
		}
		if !ok || shape[dim] != lens[m] {
			want := slices.Clone(own)
			want[dim] = lens[m]
			return fmt.Errorf("all_gather: block %d is %s%v, expected %s%v", m, x.Elem(), shape, mine.Elem(), want)
		}
	}
	return nil
}

// sameInputs checks that every member posted the same dtype and a shape
// ok accepts (inputsAgree).
func (g *Ring) sameInputs(what string, ok func(shape []int) bool) error {
	return inputsAgree(g.posted().in, g.Rank, what, ok)
}

// inputsAgree checks that every member's input has member me's dtype and
// a shape ok accepts.
func inputsAgree[B Buffer](in []B, me int, what string, ok func(shape []int) bool) error {
	mine := in[me]
	for m, x := range in {
		if x.Elem() != mine.Elem() || !ok(x.Dims()) {
			return fmt.Errorf("%s: member %d holds %s%v, member %d %s%v", what, m, x.Elem(), x.Dims(), me, mine.Elem(), mine.Dims())
		}
	}
	return nil
}

// checkLens checks a cut of shape along dim into a length per member.
func (g *Ring) checkLens(shape []int, dim int, lens []int) error {
	if dim < 0 || dim >= len(shape) {
		return fmt.Errorf("dim %d of a %d-dim tensor", dim, len(shape))
	}
	sum := 0
	for _, l := range lens {
		sum += l
	}
	if sum != shape[dim] || len(lens) != g.Size() {
		return fmt.Errorf("lengths %v do not cut %v along dim %d", lens, shape, dim)
	}
	return nil
}

// around is the element counts before and after dim of shape.
func around(shape []int, dim int) (outer, inner int) {
	outer, inner = 1, 1
	for _, d := range shape[:dim] {
		outer *= d
	}
	for _, d := range shape[dim+1:] {
		inner *= d
	}
	return outer, inner
}
