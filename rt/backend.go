package rt

import (
	"context"
	"fmt"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/plan"
	"github.com/meshrun/meshrun/sbp"
)

// Buffer is a tensor in one backend's memory. The interpreter only reads
// its type and size (for checks, accounting and the timeline); what the
// bytes are and where they live is the backend's business.
type Buffer interface {
	Elem() ir.DType
	Dims() []int
	Bytes() int64
}

// Fill is what make_partial puts where a rank holds no part of the value.
type Fill uint8

const (
	FillZero   Fill = iota // the identity of a sum
	FillNegInf             // the identity of a max
)

// Backend is one rank's device: memory and kernels. The interpreter moves
// every tensor through it, so a GPU backend plugs in by implementing it.
// Buffers a backend returns are immutable once returned: the interpreter
// never writes into an argument, and may hand a buffer to a collective or
// keep it across steps.
type Backend interface {
	Name() string
	// Alloc returns a zero-filled buffer.
	Alloc(dt ir.DType, shape []int) (Buffer, error)
	// Free releases a buffer the interpreter no longer needs.
	Free(Buffer)
	// CopyIn moves a host tensor to the device (the backend may take
	// ownership of t).
	CopyIn(t *Tensor) (Buffer, error)
	// CopyOut returns the buffer's contents in host memory: a copy from a
	// device; the CPU backend returns its own storage, so the caller must
	// not change it nor keep it past the buffer's life.
	CopyOut(b Buffer) (*Tensor, error)
	// Launch runs kernel k on local blocks; in are the arguments' blocks
	// and out the result's (kernels on a shard need offsets and sizes).
	// The args slice is the caller's, valid during the call only.
	Launch(ctx context.Context, k *plan.Kernel, args []Buffer, in []sbp.Block, out sbp.Block) (Buffer, error)
	// Slice returns the box [off, off+count) of x (the B → S(i) step).
	Slice(x Buffer, off, count []int) (Buffer, error)
	// Embed returns a buffer of shape holding x at off and fill elsewhere
	// (the S(i) → P step).
	Embed(x Buffer, shape, off []int, fill Fill) (Buffer, error)
	// Sync waits until everything launched has finished.
	Sync(ctx context.Context) error
}

// Elem, Dims and Bytes make a host tensor the CPU backend's Buffer.
func (t *Tensor) Elem() ir.DType { return t.DType }
func (t *Tensor) Dims() []int    { return t.Shape }

// HostReader is a device buffer that can copy itself to host memory (a
// GPU backend's). The host-side communicators and the CPU backend read
// such a buffer through that copy, so a device backend runs under the
// in-process and MPI collectives unchanged; their results are host
// tensors, which the device backend then takes as arguments.
type HostReader interface {
	Buffer
	ReadHost() (*Tensor, error)
}

// host returns b as host memory: what the CPU backend and the host-side
// communicators work on (a copy, for a HostReader).
func host(b Buffer) (*Tensor, error) {
	if t, ok := b.(*Tensor); ok {
		return t, nil
	}
	if r, ok := b.(HostReader); ok {
		return r.ReadHost()
	}
	return nil, fmt.Errorf("a %T is not host memory", b)
}

// Name implements Backend.
func (c *CPU) Name() string {
	if c.BLAS == nil {
		return "cpu"
	}
	return "cpu (" + c.BLAS.Name() + ")"
}

// Alloc implements Backend.
func (c *CPU) Alloc(dt ir.DType, shape []int) (Buffer, error) {
	return c.alloc().zeroed(dt, shape), nil
}

// Free implements Backend: a recycling CPU backend keeps the buffer for
// reuse; otherwise Go's collector reclaims it.
func (c *CPU) Free(b Buffer) {
	t, ok := b.(*Tensor)
	switch {
	case !ok:
	case c.pool != nil:
		c.pool.put(t)
	case c.arena != nil && t.home == c.arena:
		c.arena.put(t)
	}
}

// CopyIn implements Backend: host memory is the CPU's own.
func (c *CPU) CopyIn(t *Tensor) (Buffer, error) { return t, nil }

// CopyOut implements Backend.
func (c *CPU) CopyOut(b Buffer) (*Tensor, error) { return host(b) }

// Sync implements Backend: CPU kernels finish before Launch returns.
func (c *CPU) Sync(context.Context) error { return nil }

// Launch implements Backend.
func (c *CPU) Launch(_ context.Context, k *plan.Kernel, args []Buffer, in []sbp.Block, out sbp.Block) (Buffer, error) {
	var call *OpCall
	var ts []*Tensor
	if c.arena != nil {
		call, ts = &c.call, c.args[:0]
	} else {
		call, ts = new(OpCall), make([]*Tensor, 0, len(args))
	}
	for _, a := range args {
		t, err := host(a)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	call.Kernel, call.Args, call.In, call.Out, call.pool = k, ts, in, out, c.alloc()
	res, err := c.Compute(call)
	if c.arena != nil {
		// hold no argument past its life; the rest of the record (the
		// plan's kernel and blocks, the arena) lives as long as the rank,
		// so it is overwritten next call instead of cleared now: a
		// record's worth of write barriers fewer per instruction
		clear(ts)
		c.args = ts
	}
	return res, err
}

// Slice implements Backend.
func (c *CPU) Slice(x Buffer, off, count []int) (Buffer, error) {
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	return extract(c.alloc(), t, off, count), nil
}

// Embed implements Backend.
func (c *CPU) Embed(x Buffer, shape, off []int, fill Fill) (Buffer, error) {
	t, err := host(x)
	if err != nil {
		return nil, err
	}
	out := c.alloc().zeroed(t.DType, shape)
	if fill == FillNegInf {
		fillNegInf(out)
	}
	CopyBlock(out, off, t, make([]int, len(t.Shape)), t.Shape)
	return out, nil
}
