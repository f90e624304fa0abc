package cuda

import (
	"context"
	"errors"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
)

// scarce is the backend with one allocation of a collective's result
// failing: the next Uninit or Alloc after arm fails, once. Every rank
// draws from the same scarce, so the group's members share one device.
type scarce struct {
	*Backend
	left    atomic.Int32 // allocations to fail
	parts   atomic.Int32 // members' parts (kernel launches) to fail
	uploads atomic.Int32 // host inputs' uploads to fail
}

func (s *scarce) CopyIn(t *rt.Tensor) (rt.Buffer, error) {
	if s.uploads.Add(-1) == 0 {
		return nil, errScarce
	}
	return s.Backend.CopyIn(t)
}

func (s *scarce) failPart() error {
	if s.parts.Add(-1) == 0 {
		return errScarce
	}
	return nil
}

func (s *scarce) ReduceRows(outs, in []rt.Buffer, first int, span rt.Rows, op rt.ReduceOp) error {
	if err := s.failPart(); err != nil {
		return err
	}
	return s.Backend.ReduceRows(outs, in, first, span, op)
}

func (s *scarce) CopyRows(outs []rt.Buffer, x rt.Buffer, span rt.Rows) error {
	if err := s.failPart(); err != nil {
		return err
	}
	return s.Backend.CopyRows(outs, x, span)
}

func (s *scarce) CopyBlock(out rt.Buffer, outOff []int, x rt.Buffer, xOff, count []int) error {
	if err := s.failPart(); err != nil {
		return err
	}
	return s.Backend.CopyBlock(out, outOff, x, xOff, count)
}

func (s *scarce) TreeReduce(out rt.Buffer, in []rt.Buffer, root int) error {
	if err := s.failPart(); err != nil {
		return err
	}
	return s.Backend.TreeReduce(out, in, root)
}

var errScarce = errors.New("no memory (test)")

func (s *scarce) arm() { s.left.Store(1) }

func (s *scarce) take() bool { return s.left.Add(-1) == 0 }

func (s *scarce) Uninit(dt ir.DType, shape []int) (rt.Buffer, error) {
	if s.take() {
		return nil, errScarce
	}
	return s.Backend.Uninit(dt, shape)
}

func (s *scarce) Alloc(dt ir.DType, shape []int) (rt.Buffer, error) {
	if s.take() {
		return nil, errScarce
	}
	return s.Backend.Alloc(dt, shape)
}

// A member whose result cannot be allocated fails, and so does every
// other member of the collective, whichever collective: none returns a
// result the group did not make, and none waits for the failed one.
func TestBackendCollectivesAllocFailureFailsEveryMember(t *testing.T) {
	be := newTestBackend(t)
	for _, c := range collectiveCases(ir.F32, rt.OpSum) {
		s := &scarce{Backend: be}
		errs := collectiveOnce(t, s, c, s.arm, false)
		failed := 0
		for i, err := range errs {
			if errors.Is(err, errScarce) {
				failed++
				continue
			}
			require.Error(t, err, "%s: member %d succeeded while a peer could not allocate its result", c.name, i)
			require.NotErrorIs(t, err, rt.ErrPeerTimeout, "%s: member %d", c.name, i)
			require.NotErrorIs(t, err, context.DeadlineExceeded, "%s: member %d", c.name, i)
		}
		require.Equal(t, 1, failed, "%s: one allocation failed", c.name)
	}
}

// A member whose part fails on the device (its kernel launch) fails every
// member: none returns a result with that member's part missing.
func TestBackendCollectivesPartFailureFailsEveryMember(t *testing.T) {
	be := newTestBackend(t)
	for _, c := range collectiveCases(ir.F32, rt.OpSum) {
		s := &scarce{Backend: be}
		for i, err := range collectiveOnce(t, s, c, func() { s.parts.Store(1) }, false) {
			require.ErrorIs(t, err, errScarce, "%s: member %d", c.name, i)
		}
	}
}

// A member whose host input cannot be moved to the device still meets its
// peers, and every member fails at once rather than at the timeout.
func TestBackendCollectivesUploadFailureFailsEveryMember(t *testing.T) {
	be := newTestBackend(t)
	for _, c := range collectiveCases(ir.F32, rt.OpSum) {
		s := &scarce{Backend: be}
		start := time.Now()
		for i, err := range collectiveOnce(t, s, c, func() { s.uploads.Store(1) }, true) {
			require.Error(t, err, "%s: member %d succeeded while a peer had no input", c.name, i)
			require.NotErrorIs(t, err, rt.ErrPeerTimeout, "%s: member %d", c.name, i)
			require.NotErrorIs(t, err, context.DeadlineExceeded, "%s: member %d", c.name, i)
		}
		require.Less(t, time.Since(start), 4*time.Second, "%s: failed at the meeting, not at a timeout", c.name)
	}
}

// collectiveOnce runs c on a group of 3 members drawing from s, after
// arm, and returns each member's error; with host, the inputs are host
// tensors (each member uploads its own).
func collectiveOnce(t *testing.T, s *scarce, c collectiveCase, arm func(), host bool) []error {
	const p = 3
	comms := rt.NewInProc(p)
	groups := make([]rt.Group, p)
	for _, cm := range comms {
		cm.DrawResultsFrom(s) // every rank's before any group
	}
	for i, cm := range comms {
		g, err := cm.NewGroup(context.Background(), 1, []int{0, 1, 2})
		require.NoError(t, err)
		groups[i] = g
	}
	ins := c.ins(rand.New(rand.NewSource(7)), p)
	arm()
	errs := make([]error, p)
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var x rt.Buffer
			if ins[i] != nil && host {
				x = ins[i]
			} else if ins[i] != nil {
				d, err := s.Backend.CopyIn(ins[i])
				if err != nil {
					errs[i] = err
					return
				}
				defer s.Backend.Free(d)
				x = d
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r, err := c.call(ctx, i, g, x)
			if err == nil {
				s.Backend.Free(r)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errs
}

// Sends between ranks sharing the device stay on it: the receiver gets a
// device copy of its own (the sender frees its buffer at once), a host
// tensor is uploaded, the bytes are counted once, and a message of the
// wrong shape is an error, not a result.
func TestBackendSendRecvOnDevice(t *testing.T) {
	be := newTestBackend(t)
	comms := rt.NewInProc(2)
	for _, c := range comms {
		c.DrawResultsFrom(be)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rng := rand.New(rand.NewSource(3))
	want := randomTensor(rng, ir.BF16, []int{3, 5}, true)
	d, err := be.CopyIn(want)
	require.NoError(t, err)
	require.NoError(t, comms[0].Send(ctx, 1, 9, d))
	be.Free(d) // the message is a copy of its own
	host := randomTensor(rng, ir.F64, []int{4}, false)
	require.NoError(t, comms[0].Send(ctx, 1, 9, host))
	require.Equal(t, want.Bytes()+host.Bytes(), comms[0].BytesSent())

	got, err := comms[1].Recv(ctx, 0, 9, ir.BF16, []int{3, 5})
	require.NoError(t, err)
	require.IsType(t, &Buf{}, got)
	back, err := be.CopyOut(got)
	require.NoError(t, err)
	be.Free(got)
	bitsEqual(t, back, want, "device message")

	_, err = comms[1].Recv(ctx, 0, 9, ir.F64, []int{5})
	require.ErrorContains(t, err, "expected f64[5]")

	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	_, err = comms[1].Recv(short, 0, 9, ir.F64, []int{4})
	require.ErrorIs(t, err, rt.ErrPeerTimeout, "nothing is left to receive")
}

// A host tensor (a value from the host tier) given to a device group is
// uploaded for the collective: the results are bitwise the host path's.
func TestBackendCollectivesHostInputs(t *testing.T) {
	be := newTestBackend(t)
	for _, c := range collectiveCases(ir.F32, rt.OpSum) {
		const p = 3
		ins := c.ins(rand.New(rand.NewSource(5)), p)
		want, wantSent := newCommWorld(t, nil, p).run(t, ins, c.call)
		w := newCommWorld(t, be, p)
		got, gotSent := w.run(t, ins, func(ctx context.Context, i int, g rt.Group, _ rt.Buffer) (rt.Buffer, error) {
			var x rt.Buffer
			if ins[i] != nil {
				x = ins[i].Clone()
			}
			return c.call(ctx, i, g, x)
		})
		for i := range want {
			bitsEqual(t, got[i], want[i], c.name)
		}
		require.Equal(t, wantSent, gotSent, c.name)
	}
}

// A member that gives up at the second barrier (its context ended) while
// a peer has not yet issued its part must not hand its result's memory
// to the allocator: the peer's kernel still writes there. Here the root
// of a broadcast is held at the device's bracket lock, having taken its
// peer's pointers, while the peer is cancelled; a buffer allocated after
// the peer failed must keep its contents.
func TestBackendCollectivesCancelledMemberKeepsItsResult(t *testing.T) {
	be := newTestBackend(t)
	comms := rt.NewInProc(2)
	groups := make([]rt.Group, 2)
	for i, cm := range comms {
		cm.DrawResultsFrom(be)
		g, err := cm.NewGroup(context.Background(), 2, []int{0, 1})
		require.NoError(t, err)
		groups[i] = g
	}
	shape := []int{64}
	ones := rt.NewTensor(ir.F32, shape)
	for i := range ones.Data.([]float32) {
		ones.Data.([]float32)[i] = 1
	}
	x, err := be.CopyIn(ones)
	require.NoError(t, err)
	defer be.Free(x)

	be.dev.events.bracket.Lock() // the root's launch waits here
	locked := true
	defer func() {
		if locked {
			be.dev.events.bracket.Unlock()
		}
	}()
	peerCtx, cancelPeer := context.WithCancel(context.Background())
	rootCtx, cancelRoot := context.WithTimeout(context.Background(), time.Second)
	defer cancelRoot()
	peerDone, rootDone := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := groups[0].Broadcast(peerCtx, nil, 1, ir.F32, shape)
		peerDone <- err
	}()
	go func() {
		r, err := groups[1].Broadcast(rootCtx, x, 1, ir.F32, shape)
		if err == nil {
			be.Free(r)
		}
		rootDone <- err
	}()
	time.Sleep(200 * time.Millisecond) // the peer at the second barrier, the root at the lock
	cancelPeer()
	require.Error(t, <-peerDone)
	z, err := be.Alloc(ir.F32, shape) // zeros, perhaps in the peer's result's memory
	require.NoError(t, err)
	defer be.Free(z)
	be.dev.events.bracket.Unlock()
	locked = false
	require.Error(t, <-rootDone) // the peer never came to the second barrier
	got, err := be.CopyOut(z)
	require.NoError(t, err)
	for i, v := range got.Data.([]float32) {
		require.Zero(t, v, "element %d of a buffer allocated after the cancelled member left was written by the collective", i)
	}
}
