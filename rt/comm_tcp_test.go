package rt

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
)

func tcpPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// connectAll runs the rendezvous of n ranks as goroutines; sizes[r] is
// the WORLD_SIZE rank r says (nil: n for all), and ranks not in join stay
// away.
func connectAll(t *testing.T, n int, sizes []int, join []int, timeout time.Duration) ([]*TCPComm, []error) {
	port := tcpPort(t)
	comms, errs := make([]*TCPComm, n), make([]error, n)
	var wg sync.WaitGroup
	for _, r := range join {
		size := n
		if sizes != nil {
			size = sizes[r]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			comms[r], errs[r] = Rendezvous{Addr: "127.0.0.1", Port: port, Size: size, Rank: r, LocalRank: r}.Connect(ctx)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
	return comms, errs
}

func all(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// TestTCPRingsMatchInProc: rings over TCP between three ranks give what
// the in-process communicator gives, bit for bit (the same ring
// algorithms), for each collective; point-to-point messages are taken by
// tag in another order than sent.
func TestTCPRingsMatchInProc(t *testing.T) {
	const n = 3
	comms, errs := connectAll(t, n, nil, all(n), 10*time.Second)
	for r := range n {
		require.NoError(t, errs[r])
	}
	input := func(r int) *Tensor {
		d := make([]float32, 12)
		for i := range d {
			d[i] = float32(i*r) * 0.37
		}
		return FromSlice([]int{4, 3}, d)
	}
	calls := map[string]func(context.Context, Group, *Tensor) (Buffer, error){
		"all-reduce": func(ctx context.Context, g Group, x *Tensor) (Buffer, error) { return g.AllReduce(ctx, x, OpSum) },
		"all-gather": func(ctx context.Context, g Group, x *Tensor) (Buffer, error) {
			return g.AllGather(ctx, x, 1, []int{3, 3, 3})
		},
		"reduce-scatter": func(ctx context.Context, g Group, x *Tensor) (Buffer, error) {
			return g.ReduceScatter(ctx, x, 0, []int{2, 0, 2}, OpMax)
		},
		"broadcast": func(ctx context.Context, g Group, x *Tensor) (Buffer, error) {
			return g.Broadcast(ctx, x, 2, ir.F32, []int{4, 3})
		},
	}
	for name, call := range calls {
		run := func(cs []Comm) []*Tensor {
			out := make([]*Tensor, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					g, err := cs[r].NewGroup(ctx, 7, []int{2, 0, 1})
					require.NoError(t, err)
					b, err := call(ctx, g, input(r))
					require.NoError(t, err, name)
					out[r] = b.(*Tensor)
				}()
			}
			wg.Wait()
			return out
		}
		tcp, local := make([]Comm, n), make([]Comm, n)
		for r, c := range NewInProc(n) {
			tcp[r], local[r] = comms[r], c
		}
		got, want := run(tcp), run(local)
		for r := range n {
			require.Equal(t, want[r].Shape, got[r].Shape, "%s rank %d", name, r)
			require.Equal(t, want[r].Data, got[r].Data, "%s rank %d", name, r)
		}
	}
	ctx := context.Background()
	before := comms[0].BytesSent()
	require.NoError(t, comms[0].Send(ctx, 1, 5, FromSlice([]int{1}, []int64{5})))
	require.NoError(t, comms[0].Send(ctx, 1, 6, FromSlice([]int{2}, []int64{6, 6})))
	b, err := comms[1].Recv(ctx, 0, 6, ir.I64, []int{2})
	require.NoError(t, err)
	require.Equal(t, []int64{6, 6}, b.(*Tensor).Data)
	_, err = comms[1].Recv(ctx, 0, 5, ir.I64, []int{3})
	require.ErrorContains(t, err, "received i64[1] from rank 0 (tag 5), expected i64[3]")
	require.Equal(t, int64(8+16), comms[0].BytesSent()-before, "the two sends' bytes")
}

// TestRendezvousFailures: a rank that never comes is named when rank 0
// gives up; a rank that says another world size is refused, and the
// refusal reaches it; a peer whose connection closes fails the receive
// waiting for it at once, not at the timeout.
func TestRendezvousFailures(t *testing.T) {
	_, errs := connectAll(t, 3, nil, []int{0, 1}, 300*time.Millisecond)
	require.ErrorContains(t, errs[0], "ranks [2] did not join")
	require.True(t, errors.Is(errs[0], ErrPeerTimeout))

	_, errs = connectAll(t, 2, []int{2, 3}, []int{0, 1}, 5*time.Second)
	require.ErrorContains(t, errs[0], "rank 1 says WORLD_SIZE=3, rank 0 says 2")
	require.ErrorContains(t, errs[1], "rank 0 refused the run: rank 1 says WORLD_SIZE=3, rank 0 says 2")

	comms, errs := connectAll(t, 2, nil, all(2), 5*time.Second)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	ctx := context.Background()
	require.NoError(t, comms[1].Send(ctx, 0, 1, FromSlice([]int{1}, []float32{1})))
	_, err := comms[0].Recv(ctx, 1, 1, ir.F32, []int{1})
	require.NoError(t, err)
	comms[1].Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = comms[0].Recv(ctx, 1, 1, ir.F32, []int{1})
	require.ErrorContains(t, err, "waiting for rank 1: closed its connection")
	require.Less(t, time.Since(start), 10*time.Second)
}

func TestRendezvousVariables(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	_, ok, err := rendezvousFrom(env(nil))
	require.False(t, ok)
	require.NoError(t, err)
	full := map[string]string{"MASTER_ADDR": "h", "MASTER_PORT": "29500", "WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1"}
	rv, ok, err := rendezvousFrom(env(full))
	require.True(t, ok)
	require.NoError(t, err)
	require.Equal(t, Rendezvous{Addr: "h", Port: 29500, Size: 4, Rank: 3, LocalRank: 1}, rv)
	for k, v := range map[string]string{"RANK": "4", "WORLD_SIZE": "zero", "MASTER_PORT": "70000", "MASTER_ADDR": "", "LOCAL_RANK": "-1"} {
		bad := map[string]string{}
		for k2, v2 := range full {
			bad[k2] = v2
		}
		bad[k] = v
		_, ok, err := rendezvousFrom(env(bad))
		require.True(t, ok)
		require.ErrorContains(t, err, k, "%s=%q", k, v)
	}
	_, _, err = rendezvousFrom(env(map[string]string{"WORLD_SIZE": "2", "RANK": "0"}))
	require.ErrorContains(t, err, "MASTER_PORT is not set")
}

// TestWaitForLeadHoldsTheOthers: over the rendezvous's TCP world, a rank
// that calls WaitForLead returns only once rank 0 has called it too.
func TestWaitForLeadHoldsTheOthers(t *testing.T) {
	comms, errs := connectAll(t, 3, nil, all(3), 10*time.Second)
	var wg sync.WaitGroup
	released := make([]time.Duration, 3)
	start := time.Now()
	for r := range 3 {
		require.NoError(t, errs[r])
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			world, err := comms[r].NewGroup(ctx, 0, all(3))
			require.NoError(t, err)
			if r == 0 {
				time.Sleep(300 * time.Millisecond) // writing a checkpoint
			}
			require.NoError(t, (&MPI{world: world}).WaitForLead(ctx))
			released[r] = time.Since(start)
		}()
	}
	wg.Wait()
	for r := 1; r < 3; r++ {
		require.GreaterOrEqual(t, released[r], 300*time.Millisecond, "rank %d waited for rank 0", r)
	}
}
