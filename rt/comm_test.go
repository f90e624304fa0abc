package rt

import (
	"context"
	"errors"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runGroup runs f on every member of a p-device group concurrently.
func runGroup(t *testing.T, p int, f func(ctx context.Context, g Group, c Comm) (Buffer, error)) []*Tensor {
	t.Helper()
	comms := NewInProc(p)
	devs := make([]int, p)
	for i := range devs {
		devs[i] = i
	}
	out := make([]*Tensor, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := 0; r < p; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			g, err := comms[r].NewGroup(ctx, 0, devs)
			if err != nil {
				errs[r] = err
				return
			}
			b, err := f(ctx, g, comms[r])
			if b != nil {
				out[r] = b.(*Tensor)
			}
			errs[r] = err
		}(r)
	}
	wg.Wait()
	for _, e := range errs {
		require.NoError(t, e)
	}
	return out
}

func randTensor(r *rand.Rand, shape []int) *Tensor {
	t := NewTensor(2, shape) // f64
	d := t.Data.([]float64)
	for i := range d {
		d[i] = float64(r.Intn(100) - 50) // integers: sums are exact in any order
	}
	return t
}

func TestSendRecv(t *testing.T) {
	x := randTensor(rand.New(rand.NewSource(5)), []int{4})
	out := runGroup(t, 2, func(ctx context.Context, g Group, c Comm) (Buffer, error) {
		if g.Index() == 0 {
			return x, c.Send(ctx, 1, 0, x)
		}
		return c.Recv(ctx, 0, 0, x.DType, x.Shape)
	})
	require.Equal(t, x.Data, out[1].Data)
}

func TestRingBytesMatchModel(t *testing.T) {
	// Each rank of a ring all-reduce sends 2(p-1)/p of the data.
	for _, p := range []int{2, 4, 8} {
		n := 8 * p
		tr := NewChanTransport(p)
		var wg sync.WaitGroup
		for r := 0; r < p; r++ {
			wg.Add(1)
			go func(r int) {
				defer wg.Done()
				devs := make([]int, p)
				for i := range devs {
					devs[i] = i
				}
				g := &Ring{T: tr, Devices: devs, Rank: r}
				_, err := g.AllReduce(context.Background(), NewTensor(2, []int{n}), OpSum)
				require.NoError(t, err)
			}(r)
		}
		wg.Wait()
		for r := 0; r < p; r++ {
			require.Equal(t, int64(2*(p-1)*n/p*8), tr.BytesSent(r), "p=%d", p)
		}
	}
}

func TestCollectiveTimesOutNamingDeviceOpAndLine(t *testing.T) {
	p := compile(t, `mesh M = [tp=4]
param W : f32[8, 8] {S(1)} = normal(0, 1)
y = to(W, {B})
output y
`)
	start := time.Now()
	_, err := Run(context.Background(), p, Options{Timeout: 200 * time.Millisecond, stall: func(d int) bool { return d == 2 }})
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second)
	var re *RunError
	require.True(t, errors.As(err, &re), "%v", err)
	require.True(t, errors.Is(err, ErrPeerTimeout), "%v", err)
	msg := err.Error()
	require.Contains(t, msg, "t.mesh:3:5")
	require.Contains(t, msg, "all_gather over tp of W")
	require.Regexp(t, `device [013] \(tp=[013]\)`, msg)
	require.Contains(t, msg, "timed out after 200ms")
}
