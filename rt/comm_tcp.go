package rt

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/meshrun/meshrun/ir"
)

// TCPComm is a Comm between processes over TCP, for runs started
// without MPI (Rendezvous makes it): every process listens, and a rank
// sends to a peer over one connection it dials on first use, so messages
// to one peer keep their order. A reader goroutine per incoming
// connection files each message under (sender, tag) at once, so a send
// completes when the bytes are written, whether or not the peer has
// posted its receive: sends are buffered, as the plan's must be. Groups
// are the message-passing rings of comm.go over the same connections,
// on host memory (the CUDA backend's NCCL communicator replaces them for
// device buffers and keeps this one for sends and the launcher's
// messages).
type TCPComm struct {
	rank  int
	size  int
	addrs []string // every rank's listening address (once the rendezvous is over)
	ln    net.Listener
	sent  atomic.Int64

	mu     sync.Mutex
	out    map[int]*tcpOut
	queues map[[2]int]*tcpQueue // (from, tag)
	lost   map[int]error        // peers whose connection broke
	closed bool
}

type tcpOut struct {
	mu sync.Mutex
	c  net.Conn
	w  *bufio.Writer
}

// tcpQueue holds the messages from one sender with one tag, in order.
type tcpQueue struct {
	msgs  []*Tensor
	ready chan struct{} // closed and replaced whenever a message arrives
}

func (c *TCPComm) Rank() int        { return c.rank }
func (c *TCPComm) Size() int        { return c.size }
func (c *TCPComm) BytesSent() int64 { return c.sent.Load() }

// Flush implements Comm: a send has completed once written.
func (c *TCPComm) Flush(context.Context) error { return nil }

// Close stops listening and closes every connection.
func (c *TCPComm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, o := range c.out {
		o.c.Close()
	}
	return c.ln.Close()
}

// NewGroup implements Comm: a ring over this communicator's connections.
func (c *TCPComm) NewGroup(_ context.Context, id int, members []int) (Group, error) {
	idx := slices.Index(members, c.rank)
	if idx < 0 {
		return nil, fmt.Errorf("rank %d is not in group %v", c.rank, members)
	}
	return tcpGroup{&Ring{T: tcpTransport{c}, Devices: members, Rank: idx, Tag: collectiveTag(id)}}, nil
}

// tcpGroup hides the Ring from the worker, which draws an in-process
// ring's steps on the timeline: a process's statistics must have one
// event per instruction, as MPI's, for the lead to decode them.
type tcpGroup struct{ Group }

// tcpTransport is the Transport view of a TCPComm, for its rings.
type tcpTransport struct{ c *TCPComm }

func (t tcpTransport) Send(ctx context.Context, _, to, tag int, x *Tensor) error {
	return t.c.send(ctx, to, tag, x)
}
func (t tcpTransport) Recv(ctx context.Context, _, from, tag int) (*Tensor, error) {
	return t.c.recv(ctx, from, tag)
}

// Send implements Comm.
func (c *TCPComm) Send(ctx context.Context, peer, tag int, b Buffer) error {
	t, err := host(b)
	if err != nil {
		return err
	}
	return c.send(ctx, peer, tag, t)
}

// Recv implements Comm: the next message from peer with tag, which must
// have the type and shape expected.
func (c *TCPComm) Recv(ctx context.Context, peer, tag int, dt ir.DType, shape []int) (Buffer, error) {
	t, err := c.recv(ctx, peer, tag)
	if err != nil {
		return nil, err
	}
	if t.DType != dt || !slices.Equal(t.Shape, shape) {
		return nil, fmt.Errorf("received %s%v from rank %d (tag %d), expected %s%v", t.DType, t.Shape, peer, tag, dt, shape)
	}
	return t, nil
}

// A message is its tag, dtype and dims, then the elements' bytes in this
// machine's order (every platform meshrun builds for is little-endian).
func (c *TCPComm) send(ctx context.Context, peer, tag int, t *Tensor) error {
	if peer < 0 || peer >= c.Size() {
		return fmt.Errorf("send to rank %d of %d", peer, c.Size())
	}
	if peer == c.rank {
		c.deliver(peer, tag, t.Clone())
		return nil
	}
	o, err := c.dial(ctx, peer)
	if err != nil {
		return err
	}
	hdr := binary.LittleEndian.AppendUint64(nil, uint64(int64(tag)))
	hdr = append(hdr, byte(t.DType), byte(len(t.Shape)))
	for _, d := range t.Shape {
		hdr = binary.LittleEndian.AppendUint64(hdr, uint64(d))
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		o.c.SetWriteDeadline(dl)
	} else {
		o.c.SetWriteDeadline(time.Time{})
	}
	_, err = o.w.Write(hdr)
	if err == nil {
		_, err = o.w.Write(tensorBytes(t))
	}
	if err == nil {
		err = o.w.Flush()
	}
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return fmt.Errorf("sending to rank %d: %w", peer, ErrPeerTimeout)
		}
		return fmt.Errorf("sending to rank %d: %v", peer, err)
	}
	c.sent.Add(t.Bytes())
	return nil
}

// tensorBytes is a tensor's storage as bytes (shared, not copied).
func tensorBytes(t *Tensor) []byte {
	n := int(t.Bytes())
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(dataPtr(t.Data)), n)
}

// dial returns the connection to peer, made on first use: it says who
// this rank is, and from then on carries messages one way.
func (c *TCPComm) dial(ctx context.Context, peer int) (*tcpOut, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o := c.out[peer]; o != nil {
		return o, nil
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addrs[peer])
	if err != nil {
		return nil, fmt.Errorf("connecting to rank %d at %s: %v", peer, c.addrs[peer], err)
	}
	hello := binary.LittleEndian.AppendUint32([]byte(tcpMagic), uint32(helloData))
	hello = binary.LittleEndian.AppendUint32(hello, uint32(c.rank))
	if _, err := conn.Write(hello); err != nil {
		conn.Close()
		return nil, fmt.Errorf("connecting to rank %d at %s: %v", peer, c.addrs[peer], err)
	}
	o := &tcpOut{c: conn, w: bufio.NewWriterSize(conn, 1<<16)}
	c.out[peer] = o
	return o, nil
}

// read files every message arriving on a peer's connection until it
// closes; a break is remembered, so receives from that peer fail at once.
func (c *TCPComm) read(from int, r *bufio.Reader) {
	for {
		t, tag, err := readMessage(r)
		if err != nil {
			c.mu.Lock()
			if !c.closed {
				if err == io.EOF {
					err = errors.New("closed its connection")
				}
				c.lost[from] = fmt.Errorf("rank %d: %v", from, err)
			}
			for k, q := range c.queues {
				if k[0] == from {
					close(q.ready)
					q.ready = make(chan struct{})
				}
			}
			c.mu.Unlock()
			return
		}
		c.deliver(from, tag, t)
	}
}

func readMessage(r *bufio.Reader) (*Tensor, int, error) {
	var hdr [10]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, 0, err
	}
	tag := int(int64(binary.LittleEndian.Uint64(hdr[:8])))
	dt, nd := ir.DType(hdr[8]), int(hdr[9])
	if dt == ir.Invalid || dt > ir.F16 {
		return nil, 0, fmt.Errorf("a message of unknown dtype %d", dt)
	}
	shape := make([]int, nd)
	var d [8]byte
	for i := range shape {
		if _, err := io.ReadFull(r, d[:]); err != nil {
			return nil, 0, err
		}
		shape[i] = int(binary.LittleEndian.Uint64(d[:]))
	}
	t := NewTensor(dt, shape)
	if _, err := io.ReadFull(r, tensorBytes(t)); err != nil {
		return nil, 0, err
	}
	return t, tag, nil
}

func (c *TCPComm) queue(from, tag int) *tcpQueue {
	k := [2]int{from, tag}
	q := c.queues[k]
	if q == nil {
		q = &tcpQueue{ready: make(chan struct{})}
		c.queues[k] = q
	}
	return q
}

func (c *TCPComm) deliver(from, tag int, t *Tensor) {
	c.mu.Lock()
	q := c.queue(from, tag)
	q.msgs = append(q.msgs, t)
	close(q.ready)
	q.ready = make(chan struct{})
	c.mu.Unlock()
}

func (c *TCPComm) recv(ctx context.Context, from, tag int) (*Tensor, error) {
	for {
		c.mu.Lock()
		q := c.queue(from, tag)
		if len(q.msgs) > 0 {
			t := q.msgs[0]
			q.msgs[0] = nil
			q.msgs = q.msgs[1:]
			c.mu.Unlock()
			return t, nil
		}
		lost, ready := c.lost[from], q.ready
		c.mu.Unlock()
		if lost != nil {
			return nil, fmt.Errorf("waiting for %w", lost)
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for rank %d: %w", from, ctxErr(ctx))
		}
	}
}
