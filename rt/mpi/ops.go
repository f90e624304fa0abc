package mpi

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"
	"unsafe"
)

// Elem are the element types the package moves; byte and uint16 only move
// (uint16 carries bf16/f16 bits).
type Elem interface {
	float32 | float64 | int32 | int64 | uint16 | byte
}

// Number are the element types the reductions accept.
type Number interface {
	float32 | float64 | int32 | int64
}

// Op is a reduction.
type Op int

const (
	Sum Op = iota
	Max
)

func (o Op) handle() (uintptr, error) {
	switch o {
	case Sum:
		return lib.h.sum, nil
	case Max:
		return lib.h.max, nil
	}
	return 0, fmt.Errorf("mpi: unknown reduction %d", int(o))
}

// Status describes a completed receive.
type Status struct {
	Source, Tag int // the sender and tag that matched
	Count       int // elements received
}

func dtype[T Elem]() uintptr {
	var z T
	switch any(z).(type) {
	case float32:
		return lib.h.types[dtFloat32]
	case float64:
		return lib.h.types[dtFloat64]
	case int32:
		return lib.h.types[dtInt32]
	case int64:
		return lib.h.types[dtInt64]
	case uint16:
		return lib.h.types[dtUint16]
	}
	return lib.h.types[dtByte]
}

// ptr is the address of s's first element, nil for an empty slice (MPI
// accepts any pointer with a zero count; nil keeps Pin away from it).
func ptr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// layout converts per-rank element counts to MPI's C ints and their
// displacements (each rank's block follows the previous one), after checking
// there is one per rank and all fit.
func layout(op string, c *Comm, n []int) (cnt, disp []int32, total int, err error) {
	if len(n) != c.size {
		return nil, nil, 0, fmt.Errorf("mpi: %s: %d counts for %d ranks", op, len(n), c.size)
	}
	cnt, disp = make([]int32, len(n)), make([]int32, len(n))
	for i, k := range n {
		if k < 0 || total+k > math.MaxInt32 {
			return nil, nil, 0, fmt.Errorf("mpi: %s: count %d for rank %d is negative or too large", op, k, i)
		}
		cnt[i], disp[i] = int32(k), int32(total)
		total += k
	}
	return cnt, disp, total, nil
}

func checkLen(op, what string, got, want int) error {
	if got != want {
		return fmt.Errorf("mpi: %s: %s has %d elements, want %d", op, what, got, want)
	}
	return nil
}

func checkCount(op string, n int) error {
	if n > math.MaxInt32 {
		return fmt.Errorf("mpi: %s: %d elements exceed MPI's int count", op, n)
	}
	return nil
}

// checkPeer rejects ranks and tags outside c before they reach MPI, where
// -1 and -2 mean different things to the two libraries (MPI_PROC_NULL, or
// a wildcard) and would silently become no-ops.
func checkPeer(op string, c *Comm, rank, tag int, wild bool) error {
	if c == nil {
		return fmt.Errorf("mpi: %s on a nil communicator", op)
	}
	if (rank < 0 || rank >= c.size) && !(wild && rank == AnySource) {
		return fmt.Errorf("mpi: %s: rank %d outside a communicator of %d", op, rank, c.size)
	}
	if tag < 0 && !(wild && tag == AnyTag) {
		return fmt.Errorf("mpi: %s: negative tag %d", op, tag)
	}
	return nil
}

// Request is a started nonblocking operation (Isend returns one).
type Request struct {
	op  string
	dt  uintptr
	p2p bool
	req uintptr
	pin *runtime.Pinner
	t0  time.Time
}

// run starts a nonblocking operation and polls it to completion.
func run(ctx context.Context, c *Comm, op string, dt uintptr, p2p bool, pins []unsafe.Pointer, start func() (uintptr, int)) (Status, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	r, err := begin(ctx, c, op, dt, p2p, pins, start)
	if err != nil {
		return Status{}, err
	}
	return r.Wait(ctx)
}

// begin starts a nonblocking operation. Every pointer in pins (buffers and
// count arrays MPI reads later) is pinned until it completes, as cgo
// requires of memory C keeps using after a call returns (Pin ignores
// memory Go did not allocate, such as a mapped file).
func begin(ctx context.Context, c *Comm, op string, dt uintptr, p2p bool, pins []unsafe.Pointer, start func() (uintptr, int)) (*Request, error) {
	if err := ready(c); err != nil {
		return nil, err
	}
	pin := new(runtime.Pinner)
	for _, p := range pins {
		if p != nil {
			pin.Pin(p)
		}
	}
	t0 := time.Now()
	if !lockMPI(ctx) {
		pin.Unpin()
		return nil, &TimeoutError{Op: op, After: time.Since(t0), Cause: ctx.Err()}
	}
	req, rc := start()
	unlockMPI()
	if rc != 0 {
		pin.Unpin()
		return nil, codeErr(op, rc)
	}
	return &Request{op: op, dt: dt, p2p: p2p, req: req, pin: pin, t0: t0}, nil
}

// Wait polls the request to completion. A point-to-point request that
// times out is cancelled if MPI can still do so; anything left pending
// keeps its pins for ever (see abandoned).
func (r *Request) Wait(ctx context.Context) (Status, error) {
	ctx, cancel := withDefault(ctx)
	defer cancel()
	st, done, err := poll(ctx, r.op, &r.req, r.dt)
	if done {
		r.pin.Unpin()
		return st, err
	}
	err = &TimeoutError{Op: r.op, After: time.Since(r.t0), Cause: ctx.Err()}
	if r.p2p {
		grace, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
		if lockMPI(grace) {
			libCancel(&r.req)
			unlockMPI()
			_, done, _ = poll(grace, r.op, &r.req, 0)
		}
		stop()
		if done {
			r.pin.Unpin()
			return Status{}, err
		}
	}
	abandonMu.Lock()
	abandoned = append(abandoned, r.pin)
	abandonMu.Unlock()
	return Status{}, err
}

// poll tests req until it completes (done), fails, or ctx ends (neither
// done nor an error). Nonblocking collectives advance only inside MPI calls
// (neither library runs a progress thread by default), so a multi-round
// algorithm moves one step per MPI_Test: poll spins briefly, for the
// latency of small messages, then sleeps with doubling naps capped at
// 100µs, which bounds the delay added per step while a long wait still
// costs little CPU (spinning starves the other ranks when they outnumber
// the cores).
func poll(ctx context.Context, op string, req *uintptr, dt uintptr) (Status, bool, error) {
	var nap time.Duration
	for i := 0; ; i++ {
		if !lockMPI(ctx) {
			return Status{}, false, nil
		}
		done, st, rc := libTest(req, dt)
		unlockMPI()
		if rc != 0 {
			// A failed request is complete; its buffers are free again.
			return Status{}, true, codeErr(op, rc)
		}
		if done {
			return st, true, nil
		}
		if ctx.Err() != nil {
			return Status{}, false, nil
		}
		if i < 100 {
			runtime.Gosched()
			continue
		}
		nap = min(max(2*nap, 5*time.Microsecond), 100*time.Microsecond)
		time.Sleep(nap)
	}
}

// Isend starts sending buf to rank dest of c with a tag (>= 0) and
// returns at once; buf must not change until the request's Wait returns.
// Messages to one rank with one tag arrive in the order they were started.
func Isend[T Elem](ctx context.Context, c *Comm, buf []T, dest, tag int) (*Request, error) {
	if err := checkPeer("Isend", c, dest, tag, false); err != nil {
		return nil, err
	}
	if err := checkCount("Isend", len(buf)); err != nil {
		return nil, err
	}
	p := ptr(buf)
	return begin(ctx, c, "Isend", 0, true, []unsafe.Pointer{p}, func() (uintptr, int) {
		return libIsend(p, len(buf), dtype[T](), dest, tag, c.h)
	})
}

// Send sends buf to rank dest of c with a tag (>= 0), waiting until the
// buffer may be reused.
func Send[T Elem](ctx context.Context, c *Comm, buf []T, dest, tag int) error {
	if err := checkPeer("Send", c, dest, tag, false); err != nil {
		return err
	}
	if err := checkCount("Send", len(buf)); err != nil {
		return err
	}
	p := ptr(buf)
	_, err := run(ctx, c, "Send", 0, true, []unsafe.Pointer{p}, func() (uintptr, int) {
		return libIsend(p, len(buf), dtype[T](), dest, tag, c.h)
	})
	return err
}

// Recv receives into buf from rank source (or AnySource) with a tag (or
// AnyTag). The message may be shorter than buf; Status.Count says how long.
func Recv[T Elem](ctx context.Context, c *Comm, buf []T, source, tag int) (Status, error) {
	if err := checkPeer("Recv", c, source, tag, true); err != nil {
		return Status{}, err
	}
	if err := checkCount("Recv", len(buf)); err != nil {
		return Status{}, err
	}
	if source == AnySource {
		source = lib.h.anySource
	}
	if tag == AnyTag {
		tag = lib.h.anyTag
	}
	p, dt := ptr(buf), dtype[T]()
	return run(ctx, c, "Recv", dt, true, []unsafe.Pointer{p}, func() (uintptr, int) {
		return libIrecv(p, len(buf), dt, source, tag, c.h)
	})
}

// Allreduce combines send across the ranks of c element by element and
// leaves the result in recv on every rank. With send nil, or the same slice
// as recv, it works in place on recv.
func Allreduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	oh, err := op.handle()
	if err != nil {
		return err
	}
	if err := checkCount("Allreduce", len(recv)); err != nil {
		return err
	}
	s, r := ptr(send), ptr(recv)
	switch {
	case send == nil || (s == r && len(send) == len(recv)):
		s = nil // in place
	case len(send) != len(recv):
		return checkLen("Allreduce", "send", len(send), len(recv))
	}
	_, err = run(ctx, c, "Allreduce", 0, false, []unsafe.Pointer{s, r}, func() (uintptr, int) {
		return libIallreduce(s, r, len(recv), dtype[T](), oh, c.h)
	})
	return err
}

// Reduce combines send across the ranks of c element by element into recv
// on root alone (len(recv) = len(send) there; other ranks pass nil): MPI's
// tree, where each rank sends its block about once, not the twice of an
// all-reduce. send and recv must not overlap.
func Reduce[T Number](ctx context.Context, c *Comm, send, recv []T, op Op, root int) error {
	oh, err := op.handle()
	if err != nil {
		return err
	}
	if err := checkPeer("Reduce", c, root, 0, false); err != nil {
		return err
	}
	if err := checkCount("Reduce", len(send)); err != nil {
		return err
	}
	if c.rank == root {
		if err := checkLen("Reduce", "recv", len(recv), len(send)); err != nil {
			return err
		}
	}
	s, r := ptr(send), ptr(recv)
	if c.rank != root {
		r = nil
	}
	_, err = run(ctx, c, "Reduce", 0, false, []unsafe.Pointer{s, r}, func() (uintptr, int) {
		return libIreduce(s, r, len(send), dtype[T](), oh, root, c.h)
	})
	return err
}

// Allgatherv concatenates every rank's send, in rank order, into recv on
// every rank; counts[i] is the length of rank i's send (it may differ, and
// be zero). When send is this rank's own block of recv (the same memory),
// or nil, it works in place. Other overlaps of send and recv are not allowed.
func Allgatherv[T Elem](ctx context.Context, c *Comm, send, recv []T, counts []int) error {
	cnt, disp, total, err := layout("Allgatherv", c, counts)
	if err != nil {
		return err
	}
	if err := checkLen("Allgatherv", "recv", len(recv), total); err != nil {
		return err
	}
	mine := recv[disp[c.rank] : disp[c.rank]+cnt[c.rank]]
	s, r := ptr(send), ptr(recv)
	switch {
	case send == nil || (s == ptr(mine) && len(send) == len(mine)):
		s = nil // in place
	case len(send) != len(mine):
		return checkLen("Allgatherv", "send", len(send), len(mine))
	}
	_, err = run(ctx, c, "Allgatherv", 0, false, []unsafe.Pointer{s, r, ptr(cnt), ptr(disp)}, func() (uintptr, int) {
		return libIallgatherv(s, len(mine), r, &cnt[0], &disp[0], dtype[T](), c.h)
	})
	return err
}

// ReduceScatter reduces send (the concatenation of one block per rank,
// block i of length counts[i]) across the ranks of c and leaves block i of
// the result in recv on rank i.
func ReduceScatter[T Number](ctx context.Context, c *Comm, send, recv []T, counts []int, op Op) error {
	oh, err := op.handle()
	if err != nil {
		return err
	}
	cnt, _, total, err := layout("ReduceScatter", c, counts)
	if err != nil {
		return err
	}
	if err := checkLen("ReduceScatter", "send", len(send), total); err != nil {
		return err
	}
	if err := checkLen("ReduceScatter", "recv", len(recv), counts[c.rank]); err != nil {
		return err
	}
	s, r := ptr(send), ptr(recv)
	_, err = run(ctx, c, "ReduceScatter", 0, false, []unsafe.Pointer{s, r, ptr(cnt)}, func() (uintptr, int) {
		return libIreduceScatter(s, r, &cnt[0], dtype[T](), oh, c.h)
	})
	return err
}

// Alltoallv sends block i of send (length sendCounts[i]) to rank i and
// receives rank i's block for us into block i of recv (length
// recvCounts[i]); blocks are packed in rank order.
func Alltoallv[T Elem](ctx context.Context, c *Comm, send []T, sendCounts []int, recv []T, recvCounts []int) error {
	sc, sd, stotal, err := layout("Alltoallv", c, sendCounts)
	if err != nil {
		return err
	}
	rc, rd, rtotal, err := layout("Alltoallv", c, recvCounts)
	if err != nil {
		return err
	}
	if err := checkLen("Alltoallv", "send", len(send), stotal); err != nil {
		return err
	}
	if err := checkLen("Alltoallv", "recv", len(recv), rtotal); err != nil {
		return err
	}
	s, r := ptr(send), ptr(recv)
	pins := []unsafe.Pointer{s, r, ptr(sc), ptr(sd), ptr(rc), ptr(rd)}
	_, err = run(ctx, c, "Alltoallv", 0, false, pins, func() (uintptr, int) {
		return libIalltoallv(s, &sc[0], &sd[0], r, &rc[0], &rd[0], dtype[T](), c.h)
	})
	return err
}

// Bcast copies buf on rank root into buf on every other rank of c.
func Bcast[T Elem](ctx context.Context, c *Comm, buf []T, root int) error {
	if err := checkPeer("Bcast", c, root, 0, false); err != nil {
		return err
	}
	if err := checkCount("Bcast", len(buf)); err != nil {
		return err
	}
	p := ptr(buf)
	_, err := run(ctx, c, "Bcast", 0, false, []unsafe.Pointer{p}, func() (uintptr, int) {
		return libIbcast(p, len(buf), dtype[T](), root, c.h)
	})
	return err
}

// Barrier returns once every rank of c has entered it.
func (c *Comm) Barrier(ctx context.Context) error {
	_, err := run(ctx, c, "Barrier", 0, false, nil, func() (uintptr, int) {
		return libIbarrier(c.h)
	})
	return err
}
