package rt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// Worker runs one rank's program against a Backend and a Comm. It is made
// once per run (its groups are created at start-up) and executes the
// program as many times as the trainer has steps.
type Worker struct {
	Plan    *plan.Plan
	Prog    *plan.RankProgram
	Backend Backend
	// Host is the rank's host memory, where a plan with offload keeps its
	// host tier (Instr.Host) and runs the update: a CPU backend of its own,
	// so that even on the CPU the tiers are distinct buffers joined by
	// real copies. Nil when the plan has no host tier.
	Host    Backend
	Comm    Comm
	Groups  []Group // per plan group: this rank's
	Timeout time.Duration
	Seed    uint64
	hook    func(rank, instr int)
	clock   *SimClock
	files   *npyCache
	labels  []eventLabel // per instruction, formatted once
	onHost  []bool       // per slot: written by a host-tier instruction
	// rings names the ring steps on the timeline, per phase (reduce-
	// scatter, all-gather) and step, formatted once per worker: the same
	// steps recur in every execution (a map keyed by the phase's name
	// was 5% of a Megatron MLP mesh step, hashing the string).
	rings [2][]string
	// selfTimed is, per group, whether its collectives time themselves
	// out (Ring.SetTimeout): those need no context with a deadline.
	selfTimed []bool
	// bucket is the bucket of collectives being run (bucket.go), its slices
	// kept from one execution to the next
	bucket launched
	// lateRings is, per group, whether it is a shared-memory ring that
	// leaves its steps for the worker to draw (drawRings)
	lateRings []bool
	// last is the last execution's state, reused by the next (reuse)
	last *execution
	// inProc is Comm when it is the in-process launcher's: the rank's
	// count of shared collective results it holds (comm_shm_pool.go)
	inProc *InProc
	// watch times the rank's instructions on its device (DeviceTime, on
	// a DeviceClock backend); nil: the host's clock
	watch Stopwatch
	// don is buffer donation's state (donate.go), made at the first
	// instruction that donates
	don *donor
	// events is how many timeline events the last execution recorded
	// (instructions and ring steps): the next one's list is made that
	// long at once instead of grown by doubling.
	events int
	// spare is an earlier execution's timeline that its caller gave back
	// (ReuseTimeline): the next execution records into it.
	spare []Event
	// loaded is, per source, this rank's block of a loaded file when it is
	// a view of the file's storage (blockView), made by the first
	// execution that materialised it: the same block every step, read
	// only (no kernel writes an argument but a donated one, and a view
	// is never donated), so later steps reuse it (its layout, header and
	// storage slice were 8 allocations a rank per step of the Megatron
	// MLP).
	loaded []*Tensor
}

// ReuseTimeline gives the worker back the timeline (DeviceStats.Events) of
// one of its executions, which the caller no longer reads: the next
// execution records over it instead of allocating its own. A training
// step's timeline was 60% of the bytes a Megatron MLP step allocated
// on [dp=1, tp=2], and the collector's work on them took the cores the
// ranks ran on (issue 10).
func (w *Worker) ReuseTimeline(ev []Event) { w.spare = ev[:0] }

// NewWorker binds rank's program and creates its groups (every rank of
// the plan must call it, as group creation may be collective).
func NewWorker(ctx context.Context, p *plan.Plan, rank int, be Backend, c Comm, opts Options) (*Worker, error) {
	rp, err := p.Bind(rank)
	if err != nil {
		return nil, err
	}
	if _, local := c.(*InProc); opts.Clock != nil && !local {
		return nil, fmt.Errorf("a simulated clock needs the in-process launcher (its timestamps travel beside the data in this process)")
	}
	w := &Worker{Plan: p, Prog: rp, Backend: be, Comm: c, Timeout: opts.Timeout, Seed: opts.Seed, hook: opts.Hook, clock: opts.Clock, files: opts.files}
	if w.Timeout == 0 {
		w.Timeout = 60 * time.Second
	}
	w.inProc, _ = c.(*InProc)
	if w.watch, err = stopwatch(be, rank, opts); err != nil {
		return nil, fmt.Errorf("rank %d: device timing: %w", rank, err)
	}
	if w.files == nil {
		w.files = &npyCache{}
	}
	w.labels = labelsOf(rp.Prog)
	w.onHost = make([]bool, rp.Prog.NumSlots())
	for i := range rp.Prog.Instrs {
		if in := &rp.Prog.Instrs[i]; in.Out >= 0 && in.Host {
			in.Written(func(s int) { w.onHost[s] = true })
			w.Host = &CPU{BLAS: DefaultBLAS()}
		}
	}
	for gi, g := range p.Groups {
		cctx, cancel := context.WithTimeout(ctx, w.Timeout)
		grp, err := c.NewGroup(cctx, gi, p.Mesh.Group(rank, g.Axes...))
		cancel()
		if err != nil {
			return nil, fmt.Errorf("rank %d: creating group g%d: %w", rank, gi, err)
		}
		w.Groups = append(w.Groups, grp)
		r, ok := grp.(*Ring)
		w.selfTimed = append(w.selfTimed, ok && opts.Clock == nil && r.SetTimeout(w.Timeout))
	}
	return w, nil
}

// Feed supplies a rank's block of source src for one execution; a nil
// buffer means the source's initialiser. The worker owns what it is fed:
// it frees the buffer after its last use (a recycling backend reuses it
// at once), so a caller must not feed a buffer it still needs.
type Feed func(src int) (Buffer, error)

// RankResult is what one execution of a rank's program produced.
type RankResult struct {
	Outputs []Buffer // per Plan.Outputs
	Carry   []Buffer // per Plan.Carry
	Stats   DeviceStats
}

// PipeStats is a pipelined rank's record of one execution.
type PipeStats struct {
	Actions []ActionSpan
	// PeakLive, PeakBytes and PeakKept are, per stage this rank holds,
	// the most micro-batches whose activations were alive at once, the
	// most activation bytes, and the most kept between actions.
	PeakLive  map[int]int
	PeakBytes map[int]int64
	PeakKept  map[int]int64
	// End is when the rank finished its program, optimizer step
	// included (on the run's clock).
	End time.Duration
}

// execution is one run of a worker's program: its slots and accounting.
type execution struct {
	w     *Worker
	feed  Feed
	start time.Time
	slots []Buffer
	size  []int64  // per slot, its buffer's bytes as hold counted them
	refs  holds    // slots (and sends in flight) holding each buffer: freed when none does
	sent  []Buffer // buffers of buffered sends, held until Flush
	args  []Buffer // the current instruction's arguments
	off   []int    // a local step's offsets (localStep)
	more  []Buffer // its further results (plan.Instr.Outs), in order
	cur   int64
	peak  int64
	// the host tier's bytes held and peak, and the bytes copied each way
	hostCur, hostPeak int64
	toHost, toDevice  int64
	events            []Event
	clk               *clockState // nil: wall time
	pipe              *pipeStats  // nil: not a pipelined plan
	// devOrigin is, with device timing, where the stopwatch's origin
	// lies on the run's clock
	devOrigin time.Duration
}

// now is the execution's time: simulated, or since start.
func (x *execution) now() time.Duration {
	if x.clk != nil {
		return x.clk.now
	}
	return time.Since(x.start)
}

// Run executes the program once. start is the run's common time origin
// (timelines of all ranks share it).
func (w *Worker) Run(ctx context.Context, feed Feed, start time.Time) (*RankResult, error) {
	prog := w.Prog.Prog
	// the timeline sized once, not grown by doubling (issue 10: the growth
	// was a fifth of the bytes a tiny-GPT step allocated)
	x := w.reuse()
	x.feed, x.start = feed, start
	if n := max(len(prog.Instrs), w.events); cap(w.spare) >= n {
		x.events = w.spare
	} else {
		x.events = make([]Event, 0, n)
	}
	w.spare = nil
	if w.clock != nil {
		x.clk = newClockState(w.clock, w.Prog.Rank)
	}
	if w.Plan.Pipe != nil {
		x.pipe = newPipeStats(x.clk != nil)
	}
	sent0 := w.Comm.BytesSent()
	w.drawRings(x)
	if w.watch != nil {
		if err := x.beginDevice(); err != nil {
			return nil, err
		}
	}
	// One clock read per instruction: an instruction's span starts where
	// the previous one's ended, so the bookkeeping between two (holding a
	// result, freeing dead slots, the timeline) counts in the later one.
	// Two reads per instruction were 5% of a Megatron MLP mesh step, most
	// of it in clock_gettime.
	t0 := x.now()
	for i := range prog.Instrs {
		t1, err := x.step(ctx, i, t0)
		if err != nil {
			return nil, err
		}
		t0 = t1
	}
	if err := w.Backend.Sync(ctx); err != nil {
		return nil, fmt.Errorf("rank %d: %v", w.Prog.Rank, err)
	}
	end := x.now()
	if w.watch != nil {
		var err error
		if end, err = x.layDevice(end); err != nil {
			return nil, err
		}
	}
	if err := w.flush(ctx); err != nil {
		return nil, err
	}
	for _, b := range x.sent {
		x.drop(b, w.Backend)
	}
	if w.inProc != nil {
		w.inProc.forgetAll() // what is still held outlives the execution
	}
	if w.don != nil {
		w.don.carried(x, prog)
	}
	w.events = len(x.events)
	res := &RankResult{Stats: DeviceStats{Device: w.Prog.Rank, Peak: x.peak, Final: x.cur, Events: x.events,
		BytesSent: w.Comm.BytesSent() - sent0, HostPeak: x.hostPeak, HostFinal: x.hostCur, ToHost: x.toHost, ToDevice: x.toDevice}}
	if x.pipe != nil {
		res.Stats.Pipe = &PipeStats{Actions: x.pipe.spans, PeakLive: x.pipe.PeakLive, PeakBytes: x.pipe.PeakBytes, PeakKept: x.pipe.PeakKept, End: end}
	}
	// outputs and carry in one array, made at its length (appending
	// to nil grew the carry four times a step on the Megatron MLP)
	nOut, nCarry := len(prog.OutputSlots), len(prog.CarrySlots)
	all := make([]Buffer, nOut+nCarry)
	for i, s := range prog.OutputSlots {
		all[i] = x.held(s)
	}
	for i, s := range prog.CarrySlots {
		all[nOut+i] = x.held(s)
	}
	if nOut > 0 { // none: nil, as before
		res.Outputs = all[:nOut:nOut]
	}
	if nCarry > 0 {
		res.Carry = all[nOut:]
	}
	return res, nil
}

// held is slot s's buffer; nil for -1 (another pipeline rank holds it).
func (x *execution) held(s int) Buffer {
	if s < 0 {
		return nil
	}
	return x.slots[s]
}

// step runs instruction i, which began at t0 (the previous one's end),
// and returns when it ended: its result held, its dead slots freed, its
// event on the timeline.
func (x *execution) step(ctx context.Context, i int, t0 time.Duration) (time.Duration, error) {
	w := x.w
	if err := ctx.Err(); err != nil { // cancelled (Ctrl-C in the REPL), or another rank failed
		return 0, err
	}
	in, b := &w.Prog.Prog.Instrs[i], &w.Prog.Instrs[i]
	if w.hook != nil {
		w.hook(w.Prog.Rank, i)
	}
	// only an instruction that communicates sends (reading the count
	// twice per instruction was 1% of a Megatron MLP mesh step)
	comm := in.Kind.Communicates()
	var before, sent int64
	if comm {
		before = w.Comm.BytesSent()
	}
	var out Buffer
	var err error
	if x.inBucket(i, b) { // bucket.go: the part's own bytes
		out, sent, err = x.bucketStep(ctx, i)
		comm = false
	} else {
		out, err = x.timed(ctx, in, b)
	}
	if err == nil && out != nil {
		err = checkShapes(b.Out.Len, out, x.more)
	}
	if err != nil {
		if pe, ok := err.(*partError); ok && pe.part > 0 {
			return 0, w.bucketFault(i, pe)
		}
		return 0, w.fault(in, b, err)
	}
	t1 := x.now()
	if in.Kind == plan.Collective && w.lateRings[in.Group] {
		x.layRing(w.Groups[in.Group].(*Ring), t0, t1)
	}
	if comm {
		sent = w.Comm.BytesSent() - before
	}
	x.record(in, i, t0, t1-t0, sent, out)
	if x.pipe != nil {
		x.pipe.step(i, in, t0, t1)
	}
	if in.Donate != nil { // results in dying arguments' buffers (donate.go)
		x.holdDonated(in, out)
		return t1, nil
	}
	if in.Out >= 0 {
		x.hold(in, in.Out, out)
		for k, s := range in.Outs {
			x.hold(in, s, x.more[k])
		}
	}
	for _, s := range in.Free {
		x.release(s)
	}
	return t1, nil
}

// flush waits for the rank's sends to complete, at most Timeout. The
// in-process transport's sends complete as they return, so its Flush
// never waits and gets no deadline (a context and its timer per rank per
// step).
func (w *Worker) flush(ctx context.Context) error {
	fctx := ctx
	if w.inProc == nil {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(ctx, w.Timeout)
		defer cancel()
	}
	if err := w.Comm.Flush(fctx); err != nil {
		return fmt.Errorf("rank %d %s: completing its sends: %w", w.Prog.Rank, w.Plan.Mesh.CoordString(w.Prog.Rank), err)
	}
	return nil
}

// reuse is the worker's execution state, emptied for another run: its
// slot table, reference counts and argument list are the last run's
// memory (made afresh each step, the counts' map grew through every
// step of a Megatron MLP mesh step again), everything else zero.
func (w *Worker) reuse() *execution {
	x := w.last
	if x == nil {
		n := w.Prog.Prog.NumSlots()
		x = &execution{slots: make([]Buffer, n), size: make([]int64, n), refs: newHolds()}
		w.last = x
	}
	clear(x.slots)
	x.refs.clear()
	if w.inProc != nil {
		w.inProc.forgetAll() // a failed execution's leftovers
	}
	clear(x.sent)
	*x = execution{w: w, slots: x.slots, size: x.size, refs: x.refs, sent: x.sent[:0], args: x.args[:0], off: x.off}
	return x
}

// checkShapes checks an instruction's results (out, then more: every
// result of an instruction has one block) against the plan's block.
func checkShapes(want []int, out Buffer, more []Buffer) error {
	for i := -1; i < len(more); i++ {
		r := out
		if i >= 0 {
			r = more[i]
		}
		if !slices.Equal(r.Dims(), want) {
			return fmt.Errorf("result has local shape %s, the plan says %s", ir.ShapeString(r.Dims()), ir.ShapeString(want))
		}
	}
	return nil
}

// hold puts a result of an instruction in slot s and counts it in its
// tier's memory.
func (x *execution) hold(in *plan.Instr, s int, out Buffer) {
	x.slots[s] = out
	x.refs.add(out)
	n := out.Bytes()
	x.size[s] = n // (release counts it out again without asking the buffer)
	if in.Host {
		x.hostCur += n
		x.hostPeak = max(x.hostPeak, x.hostCur)
		return
	}
	x.cur += n
	x.peak = max(x.peak, x.cur)
	if x.pipe != nil {
		x.pipe.made(in, out)
	}
}

// release empties slot s; its buffer goes back to the backend when no
// other slot holds it (a backend may recycle it at once).
func (x *execution) release(s int) {
	b := x.slots[s]
	x.slots[s] = nil
	if x.w.onHost[s] {
		x.hostCur -= x.size[s]
		x.drop(b, x.w.Host)
		return
	}
	x.cur -= x.size[s]
	if x.pipe != nil {
		x.pipe.released(b)
	}
	x.drop(b, x.w.Backend)
}

// drop gives up one hold on b and frees it into be (the backend whose
// memory it is) when none is left.
func (x *execution) drop(b Buffer, be Backend) {
	if x.refs.drop(b) {
		if x.w.inProc != nil {
			x.w.inProc.Release(b) // a shared collective result: one holder fewer
		}
		be.Free(b)
	}
}

// BackendOf is the backend of one tier: the host's (Host) or the device's.
func (w *Worker) BackendOf(host bool) Backend {
	if host && w.Host != nil {
		return w.Host
	}
	return w.Backend
}

// fault wraps an instruction's error with the rank, its coordinate, the
// op and the source line.
func (w *Worker) fault(in *plan.Instr, b *plan.Bound, err error) error {
	if errors.Is(err, ErrPeerTimeout) {
		err = fmt.Errorf("%w after %v", err, w.Timeout)
		switch in.Kind {
		case plan.Collective:
			err = fmt.Errorf("%w waiting for its group, ranks %v", err, b.Members)
		case plan.Recv, plan.Send:
			err = fmt.Errorf("%w waiting for rank %d", err, b.Peer)
		}
	}
	m := w.Plan.Mesh
	return &RunError{Device: w.Prog.Rank, Coord: m.CoordString(w.Prog.Rank), Op: w.describe(in), Pos: in.Pos, Where: in.Where, Err: err}
}

// bucketFault is fault for a bucket launched at instruction i whose
// member pe.part failed: reported at that member, saying which bucket.
func (w *Worker) bucketFault(i int, pe *partError) error {
	k := i + pe.part
	err := w.fault(&w.Prog.Prog.Instrs[k], &w.Prog.Instrs[k], pe.err)
	if re, ok := err.(*RunError); ok {
		re.Err = fmt.Errorf("%w (member %d of %d of a bucket launched together by %s)", re.Err, pe.part+1, pe.of, w.describe(&w.Prog.Prog.Instrs[i]))
	}
	return err
}

func (w *Worker) describe(in *plan.Instr) string {
	switch in.Kind {
	case plan.Local, plan.Collective:
		return fmt.Sprintf("%s over %s of %s", in.Step.Kind, w.Plan.Mesh.Axes[in.Step.Axis].Name, in.Label)
	case plan.Source:
		return "initialising " + in.Label
	case plan.Offload, plan.Fetch:
		return in.Name()
	case plan.Send, plan.Recv:
		return fmt.Sprintf("%s of %s (tag %d)", in.Kind, in.Label, in.Tag)
	}
	return fmt.Sprintf("%s (%s)", in.Kernel.Op, in.Label)
}

// timed runs an instruction, between its stopwatch's marks when the
// device times it.
func (x *execution) timed(ctx context.Context, in *plan.Instr, b *plan.Bound) (Buffer, error) {
	sw := x.w.watch
	if sw == nil {
		return x.exec(ctx, in, b)
	}
	if err := sw.Start(exclusive(in.Kind)); err != nil {
		return nil, err
	}
	out, err := x.exec(ctx, in, b)
	if e := sw.Stop(); err == nil && e != nil {
		// the run fails: its result is left to the backend's teardown
		// (it may also be an argument another slot holds)
		return nil, e
	}
	return out, err
}

func (x *execution) exec(ctx context.Context, in *plan.Instr, b *plan.Bound) (out Buffer, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	return x.dispatch(ctx, in, b)
}

// dispatch is exec's work, apart from exec's recover: a function with
// two defers and a dozen returns gets no open-coded defers, and the
// runtime's deferred calls (deferreturn, a deferred record per call) were
// 1% of a tiny-GPT mesh step, whose four ranks run 2,400 instructions.
func (x *execution) dispatch(ctx context.Context, in *plan.Instr, b *plan.Bound) (out Buffer, err error) {
	w := x.w
	x.more = nil
	x.args = x.args[:0] // one argument list per execution, reused
	for _, s := range in.Args {
		x.args = append(x.args, x.slots[s])
	}
	args := x.args
	be := w.BackendOf(in.Host)
	switch in.Kind {
	case plan.Source:
		return x.source(in)
	case plan.Compute:
		if len(in.Outs) > 0 {
			res, err := x.launchResults(ctx, be, in, b, args)
			if err != nil {
				return nil, err
			}
			// step indexes more by Outs outside this recover: a backend
			// that hands back another count is an error, not a panic
			if len(res) != 1+len(in.Outs) {
				for _, r := range res {
					be.Free(r)
				}
				return nil, fmt.Errorf("%s: the backend gave %d results, the instruction writes %d", in.Kernel.Op, len(res), 1+len(in.Outs))
			}
			x.more = res[1:]
			return res[0], nil
		}
		return be.Launch(ctx, in.Kernel, args, b.In, b.Out)
	case plan.Local:
		return localStep(be, in, b, args[0], &x.off)
	case plan.Offload:
		return copyBetween(w.Backend, w.Host, args[0])
	case plan.Fetch:
		return copyBetween(w.Host, w.Backend, args[0])
	}
	if in.Kind == plan.Mark {
		if x.clk != nil {
			x.clk.mark(*in.Act)
		}
		return nil, nil
	}
	if in.Kind == plan.Collective && (len(b.Members) == 1 || w.selfTimed[in.Group]) && x.clk == nil {
		// the identity (collectiveStep): nothing to wait for, so no
		// timer; or a group that times its own waits out
		return collectiveStep(ctx, w.Groups[in.Group], in, b, args[0])
	}
	cctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	switch in.Kind {
	case plan.Collective:
		// every collective is done with its input when it returns (the
		// shared-memory ones meet after their last read of a peer's
		// buffers, or read only staged copies; MPI's copy), so the input
		// may be recycled at once
		if x.clk != nil {
			x.clk.arrive(in.Group, b.Members)
		}
		if out, err = collectiveStep(cctx, w.Groups[in.Group], in, b, args[0]); err == nil && x.clk != nil {
			err = x.clk.leave(cctx, in.Group, b.Members)
		}
	case plan.Send:
		if x.clk != nil {
			x.clk.send(b.Peer, in.Tag)
		}
		// the communicator may read the buffer until Flush: hold it
		escape(args[0])
		if w.inProc != nil {
			w.inProc.forget(args[0]) // the peer may read it after this rank lets go
		}
		if err = w.Comm.Send(cctx, b.Peer, in.Tag, args[0]); err == nil {
			x.refs.add(args[0])
			x.sent = append(x.sent, args[0])
		}
	case plan.Recv:
		out, err = w.Comm.Recv(cctx, b.Peer, in.Tag, in.DType, b.Out.Len)
		if err == nil && x.clk != nil {
			err = x.clk.recv(cctx, b.Peer, in.Tag, out.Bytes())
		}
	}
	return out, err
}

// escape marks a buffer that goes to another rank: the in-process
// transport hands peers the storage itself, which they may read after
// this rank frees it, so the backend must not recycle it. A buffer with
// no home is left unwritten: a shared collective result is one tensor
// every member of the group holds, and the others read its home as they
// free it (a write here raced with them under -race).
func escape(b Buffer) {
	if t, ok := b.(*Tensor); ok && t.home != nil {
		t.home = nil
	}
}

// source builds this rank's block of a source: fed by the caller (the
// trainer's carried state, batches and per-step scalars) or from its
// initialiser.
func (x *execution) source(in *plan.Instr) (Buffer, error) {
	src := &x.w.Plan.Sources[in.Src]
	if x.feed != nil {
		b, err := x.feed(in.Src)
		if err != nil || b != nil {
			return b, err
		}
	}
	if src.Role == "hyper" || src.Init == nil {
		return nil, fmt.Errorf("no value fed for %s", in.Label)
	}
	be := x.w.BackendOf(in.Host)
	if l := x.w.loaded; l != nil && l[in.Src] != nil {
		return be.CopyIn(l[in.Src])
	}
	t, err := materialise(src, x.w.Plan.Mesh, x.w.Prog.Rank, x.w.Seed, x.w.files)
	if err != nil {
		return nil, err
	}
	if t.view {
		if x.w.loaded == nil {
			x.w.loaded = make([]*Tensor, len(x.w.Plan.Sources))
		}
		x.w.loaded[in.Src] = t
	}
	return be.CopyIn(t)
}

// copyBetween copies a buffer of one tier into a new buffer of the other
// (ZeRO-Offload's transfers): read out of from, a fresh copy into to. The
// copy is real even where both are CPU memory, so neither tier ever holds
// the other's storage.
func copyBetween(from, to Backend, b Buffer) (Buffer, error) {
	if from == nil || to == nil {
		return nil, fmt.Errorf("a copy between device and host memory in a plan without a host tier")
	}
	t, err := from.CopyOut(b)
	if err != nil {
		return nil, err
	}
	return to.CopyIn(t.Clone())
}

func reduceOp(st *sbp.Step) ReduceOp {
	if st.Reduce == sbp.Max {
		return OpMax
	}
	return OpSum
}

// collectiveStep runs one communicating boxing step on the rank's group.
// In a group of one every collective is the identity: the step returns
// its argument, held by two slots (execution.refs counts them; memory
// is counted as the plan counts a result, once per slot), instead of a
// copy — on one device the tiny GPT's boxing steps spent 8% of its step
// copying 1.2 MB (issue 10).
func collectiveStep(ctx context.Context, g Group, in *plan.Instr, b *plan.Bound, x Buffer) (Buffer, error) {
	st := in.Step
	if len(b.Members) == 1 && x != nil {
		return x, nil
	}
	from, to := st.From[st.Axis], st.To[st.Axis]
	switch st.Kind {
	case sbp.AllGather:
		return g.AllGather(ctx, x, from.Dim, b.Lens)
	case sbp.ReduceScatter:
		return g.ReduceScatter(ctx, x, to.Dim, b.Lens, reduceOp(st))
	case sbp.AllReduce:
		return g.AllReduce(ctx, x, reduceOp(st))
	case sbp.AllToAll:
		return g.AllToAll(ctx, x, to.Dim, b.Lens, from.Dim, b.CatLens)
	case sbp.RootBroadcast:
		if b.Index != st.Root {
			x = nil
		}
		return g.Broadcast(ctx, x, st.Root, in.DType, b.Out.Len)
	case sbp.RootReduce:
		return g.Reduce(ctx, x, st.Root)
	}
	return nil, fmt.Errorf("unknown collective step %s", st.Kind)
}

// localStep runs a boxing step without communication: B → S(i) slices the
// rank's block; making a value partial keeps it on one rank of the group
// (sum over B), on every rank (max), or places each S block in the
// identity of the reduction.
//
// scratch is the execution's slice for the offsets (a make per call was
// 8 allocations per Megatron MLP mesh step): the backends' Slice and
// Embed read their offsets during the call only.
func localStep(be Backend, in *plan.Instr, b *plan.Bound, x Buffer, scratch *[]int) (Buffer, error) {
	st := in.Step
	off := slices.Grow((*scratch)[:0], len(in.Shape))[:len(in.Shape)]
	clear(off)
	*scratch = off
	switch st.Kind {
	case sbp.LocalSlice:
		for i := range off {
			off[i] = b.Out.Off[i] - b.In[0].Off[i]
		}
		return be.Slice(x, off, b.Out.Len)
	case sbp.LocalPartial:
		fill := FillZero
		if st.Reduce == sbp.Max {
			fill = FillNegInf
		}
		if st.From[st.Axis].IsB() && (fill == FillNegInf || b.Index == 0) {
			return be.Slice(x, off, b.Out.Len) // a copy of the whole block
		}
		if st.From[st.Axis].IsB() {
			return be.Alloc(in.DType, b.Out.Len)
		}
		for i := range off {
			off[i] = b.In[0].Off[i] - b.Out.Off[i]
		}
		return be.Embed(x, b.Out.Len, off, fill)
	}
	return nil, fmt.Errorf("unknown local step %s", st.Kind)
}
