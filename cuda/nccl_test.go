package cuda

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
)

// NCCL's communicator is tested across processes: the test binary starts
// copies of itself (TestNCCLChild, which does nothing unless
// MESHRUN_NCCL_CHILD names a scenario), one per rank, joined by the
// rendezvous variables, each on its own device of the fake (MESHRUN_FAKE_GPUS)
// with the fake's NCCL, whose communicator is shared memory between
// processes. Every collective's result is compared, bit for bit, with the
// in-process communicator's (rt.NewInProc) on the same inputs: integers,
// so that every dtype sums exactly in any order.

// useNCCL loads NCCL: the fake (beside the fake driver), or on a GPU the
// machine's.
func useNCCL(t testing.TB) {
	t.Helper()
	useDriver(t)
	if onGPU() {
		if err := Load(NCCL); err != nil {
			if os.Getenv("MESHRUN_REQUIRE_GPU") == "1" {
				t.Fatalf("MESHRUN_REQUIRE_GPU=1: %v", err)
			}
			t.Skipf("no NCCL here: %v", err)
		}
		return
	}
	so := buildFakeDriver(t)
	t.Setenv(NCCL.Env(), so)
	path, err := load(NCCL, overrideOnly(NCCL.Env(), so))
	require.NoError(t, err)
	loadMu.Lock()
	loaded[NCCL].done, loaded[NCCL].path, loaded[NCCL].err = true, path, nil
	loadMu.Unlock()
}

// freePort is a TCP port nothing listens on now.
func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startRanks runs the scenario in n processes and returns each one's
// combined output and error; extra sets variables per rank.
func startRanks(t *testing.T, scenario string, n int, extra func(rank int) []string) ([]string, []error) {
	return startTestRanks(t, "TestNCCLChild", scenario, n, extra)
}

// startTestRanks runs test (which reads MESHRUN_NCCL_CHILD) in n processes.
func startTestRanks(t *testing.T, test, scenario string, n int, extra func(rank int) []string) ([]string, []error) {
	t.Helper()
	useNCCL(t) // the children inherit the fake's variables
	port := freePort(t)
	outs, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$", "-test.v", "-test.timeout", "300s")
		cmd.Env = append(os.Environ(), "MESHRUN_NCCL_CHILD="+scenario, "MASTER_ADDR=127.0.0.1",
			"MASTER_PORT="+strconv.Itoa(port), "WORLD_SIZE="+strconv.Itoa(n), "RANK="+strconv.Itoa(r),
			"LOCAL_RANK="+strconv.Itoa(r), "MESHRUN_FAKE_GPUS="+strconv.Itoa(n))
		if extra != nil {
			cmd.Env = append(cmd.Env, extra(r)...)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(out), err
		}()
	}
	wg.Wait()
	return outs, errs
}

// TestNCCLChild is one rank of a multi-process test.
func TestNCCLChild(t *testing.T) {
	switch os.Getenv("MESHRUN_NCCL_CHILD") {
	case "":
		t.Skip("a rank of the multi-process NCCL tests (they start it)")
	case "collectives":
		childCollectives(t)
	case "stall":
		childStall(t)
	case "join":
		childJoin(t)
	default:
		t.Fatalf("unknown scenario %q", os.Getenv("MESHRUN_NCCL_CHILD"))
	}
}

func TestNCCLCollectivesAcrossProcesses(t *testing.T) {
	if onGPU() {
		t.Skip("two ranks cannot share the one GPU: the fake's test")
	}
	for _, n := range []int{2, 3} {
		outs, errs := startRanks(t, "collectives", n, nil)
		for r := range n {
			require.NoError(t, errs[r], "rank %d of %d:\n%s", r, n, outs[r])
			require.Contains(t, outs[r], "--- PASS: TestNCCLChild", "rank %d of %d:\n%s", r, n, outs[r])
			require.Contains(t, outs[r], "collectives checked: ", "rank %d ran them:\n%s", r, outs[r])
		}
	}
}

// openRank joins the rendezvous and opens this rank's GPU (LOCAL_RANK's)
// and its NCCL communicator.
func openRank(t *testing.T) (*NCCLComm, *Backend) {
	t.Helper()
	useNCCL(t)
	dev, err := ChooseDevice()
	require.NoError(t, err)
	be, err := NewBackend(dev, nil)
	require.NoError(t, err)
	t.Cleanup(func() { be.Close() })
	rv, ok, err := rt.RendezvousFromEnv()
	require.NoError(t, err)
	require.True(t, ok, "the rendezvous variables are set")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host, err := rv.Connect(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { host.Close() })
	c, err := NewNCCLComm(host, be)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c, be
}

// collective is one call on a group, by a member with its input.
type collective struct {
	name string
	do   func(ctx context.Context, g rt.Group, x rt.Buffer) (rt.Buffer, error)
	// input is member i's of p (a broadcast's non-roots get nil)
	input func(i, p int) *rt.Tensor
}

// intTensor fills a tensor of dt with small integers from rank, case and
// position, some negative, exact in every dtype.
func intTensor(dt ir.DType, shape []int, seed int) *rt.Tensor {
	t := rt.NewTensor(dt, shape)
	for i := range t.Numel() {
		v := float32((i*7+seed*13)%17 - 8)
		switch d := t.Data.(type) {
		case []float32:
			d[i] = v
		case []float64:
			d[i] = float64(v)
		case []int32:
			d[i] = int32(v)
		case []int64:
			d[i] = int64(v)
		case []uint16:
			if dt == ir.BF16 {
				d[i] = rt.F32ToBF16(v)
			} else {
				d[i] = rt.F32ToF16(v)
			}
		}
	}
	return t
}

// uneven is p lengths with a zero among them (from 3 members on).
func uneven(p int) []int {
	lens := make([]int, p)
	for i := range lens {
		lens[i] = (i*2 + 1) % 4
	}
	return lens
}

func even(p, l int) []int {
	lens := make([]int, p)
	for i := range lens {
		lens[i] = l
	}
	return lens
}

// collectives lists the cases: every dtype reduced (sum and max), gathers
// and scatters even and uneven, along the outer dim and an inner one,
// all-to-all both ways, broadcast and reduce to a root that is not 0.
func collectives() []collective {
	var cs []collective
	for _, dt := range []ir.DType{ir.F32, ir.F64, ir.I32, ir.I64, ir.BF16, ir.F16} {
		for _, op := range []rt.ReduceOp{rt.OpSum, rt.OpMax} {
			cs = append(cs, collective{
				name:  fmt.Sprintf("all-reduce %s op %d", dt, op),
				input: func(i, p int) *rt.Tensor { return intTensor(dt, []int{5, 3}, i) },
				do: func(ctx context.Context, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
					return g.AllReduce(ctx, x, op)
				},
			})
		}
		cs = append(cs, collective{
			name:  fmt.Sprintf("reduce %s", dt),
			input: func(i, p int) *rt.Tensor { return intTensor(dt, []int{4, 2}, i+3) },
			do: func(ctx context.Context, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
				return g.Reduce(ctx, x, g.Size()-1)
			},
		})
	}
	for _, dt := range []ir.DType{ir.F32, ir.BF16, ir.I64} {
		for _, dim := range []int{0, 1} {
			for _, lens := range []func(int) []int{func(p int) []int { return even(p, 2) }, uneven} {
				cs = append(cs, collective{
					name: fmt.Sprintf("all-gather %s dim %d %v", dt, dim, lens(3)),
					input: func(i, p int) *rt.Tensor {
						shape := []int{3, 4}
						shape[dim] = lens(p)[i]
						return intTensor(dt, shape, i)
					},
					do: func(ctx context.Context, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
						return g.AllGather(ctx, x, dim, lens(g.Size()))
					},
				}, collective{
					name: fmt.Sprintf("reduce-scatter %s dim %d %v", dt, dim, lens(3)),
					input: func(i, p int) *rt.Tensor {
						shape := []int{3, 4}
						shape[dim] = sumOf(lens(p))
						return intTensor(dt, shape, i+5)
					},
					do: func(ctx context.Context, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
						return g.ReduceScatter(ctx, x, dim, lens(g.Size()), rt.OpSum)
					},
				})
			}
		}
		cs = append(cs, collective{
			name:  fmt.Sprintf("broadcast %s", dt),
			input: func(i, p int) *rt.Tensor { return intTensor(dt, []int{3, 5}, 9) },
			do: func(ctx context.Context, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
				root := 1 % g.Size()
				if g.Index() != root {
					x = nil
				}
				return g.Broadcast(ctx, x, root, dt, []int{3, 5})
			},
		})
		// all-to-all: split along 0 (uneven), join along 1, each member's
		// width its own; and split and join along 0
		cs = append(cs, collective{
			name:  fmt.Sprintf("all-to-all %s 0→1", dt),
			input: func(i, p int) *rt.Tensor { return intTensor(dt, []int{sumOf(uneven(p)), i + 1}, i) },
			do: func(ctx context.Context, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
				cat := make([]int, g.Size())
				for j := range cat {
					cat[j] = j + 1
				}
				return g.AllToAll(ctx, x, 0, uneven(g.Size()), 1, cat)
			},
		}, collective{
			name:  fmt.Sprintf("all-to-all %s 1→1", dt),
			input: func(i, p int) *rt.Tensor { return intTensor(dt, []int{2, 2 * p}, i+1) },
			do: func(ctx context.Context, g rt.Group, x rt.Buffer) (rt.Buffer, error) {
				return g.AllToAll(ctx, x, 1, even(g.Size(), 2), 1, even(g.Size(), 2))
			},
		})
	}
	return cs
}

// inProcResult runs a collective on p in-process members over host tensors
// and returns member me's result and the bytes it counts as sent.
func inProcResult(t *testing.T, c collective, p, me int) (*rt.Tensor, int64) {
	comms := rt.NewInProc(p)
	members := make([]int, p)
	for i := range members {
		members[i] = i
	}
	res := make([]rt.Buffer, p)
	errs := make([]error, p)
	var wg sync.WaitGroup
	for i := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			g, err := comms[i].NewGroup(ctx, 0, members)
			if err == nil {
				res[i], err = c.do(ctx, g, c.input(i, p))
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i := range p {
		require.NoError(t, errs[i], "%s: the in-process reference, member %d", c.name, i)
	}
	return res[me].(*rt.Tensor), comms[me].BytesSent()
}

// childCollectives runs every case on the world group and on a group of
// the same ranks in reverse order (so a member's index is not its rank).
func childCollectives(t *testing.T) {
	c, be := openRank(t)
	n := c.Size()
	world, reversed := make([]int, n), make([]int, n)
	for i := range world {
		world[i], reversed[n-1-i] = i, i
	}
	ctx := context.Background()
	checked := 0
	for gi, members := range [][]int{world, reversed} {
		g, err := c.NewGroup(ctx, gi, members)
		require.NoError(t, err)
		me := g.Index()
		require.Equal(t, members[me], c.Rank())
		for _, cs := range collectives() {
			x, err := be.CopyIn(cs.input(me, n))
			require.NoError(t, err)
			cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			sent := c.BytesSent()
			out, err := cs.do(cctx, g, x)
			sent = c.BytesSent() - sent
			cancel()
			require.NoError(t, err, "%s in group %v", cs.name, members)
			_, onDevice := out.(*Buf)
			require.True(t, onDevice, "%s: the result is a device buffer (%T)", cs.name, out)
			got, err := be.CopyOut(out)
			require.NoError(t, err)
			want, wantSent := inProcResult(t, cs, n, me)
			require.Equal(t, wantSent, sent, "%s: the bytes counted are the in-process algorithm's", cs.name)
			require.Equal(t, want.DType, got.DType, cs.name)
			require.Equal(t, want.Shape, got.Shape, cs.name)
			require.Equal(t, want.Data, got.Data, "%s in group %v, member %d", cs.name, members, me)
			be.Free(out)
			be.Free(x)
			checked++
		}
	}
	t.Logf("collectives checked: %d", checked)
}

// TestNCCLTimeoutAborts: rank 1 stops before an all-reduce; rank 0's
// all-reduce ends at its deadline with an error naming the collective,
// and the communicator is aborted (a later call fails at once).
func TestNCCLTimeoutAborts(t *testing.T) {
	if onGPU() {
		t.Skip("two ranks cannot share the one GPU: the fake's test")
	}
	outs, errs := startRanks(t, "stall", 2, nil)
	require.NoError(t, errs[0], "rank 0:\n%s", outs[0])
	require.Contains(t, outs[0], "timed out as expected: NCCL all-reduce of f32[64] (member 0 of 2) did not finish (communicator aborted): timed out", outs[0])
	require.Contains(t, outs[0], "after the abort: NCCL all-reduce of f32[64] (member 0 of 2): the communicator was aborted", outs[0])
	require.NoError(t, errs[1], "rank 1:\n%s", outs[1])
}

func childStall(t *testing.T) {
	c, be := openRank(t)
	g, err := c.NewGroup(context.Background(), 0, []int{0, 1})
	require.NoError(t, err)
	x, err := be.CopyIn(intTensor(ir.F32, []int{64}, c.Rank()))
	require.NoError(t, err)
	if c.Rank() == 1 {
		time.Sleep(3 * time.Second) // never joins the all-reduce
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = g.AllReduce(ctx, x, rt.OpSum)
	require.Error(t, err)
	require.ErrorIs(t, err, rt.ErrPeerTimeout)
	require.Less(t, time.Since(start), 2500*time.Millisecond, "it ended at the deadline, not when the peer left")
	t.Logf("timed out as expected: %v", err)
	_, err = g.AllReduce(context.Background(), x, rt.OpSum)
	require.Error(t, err)
	t.Logf("after the abort: %v", err)
	c.mu.Lock()
	c.comms = nil // aborted: nothing to destroy
	c.mu.Unlock()
}

// TestNCCLOneRankPerDevice: two ranks given one device (LOCAL_RANK 0
// both) are refused by NCCL's init, as on GPUs, so the other tests' pass
// shows each rank took the device LOCAL_RANK names.
func TestNCCLOneRankPerDevice(t *testing.T) {
	if onGPU() {
		t.Skip("the fake's test")
	}
	outs, errs := startRanks(t, "join", 2, func(int) []string { return []string{"LOCAL_RANK=0"} })
	joined := strings.Contains(outs[0], "joined") || strings.Contains(outs[1], "joined")
	require.False(t, joined, "both ranks joined on one device:\n%s\n%s", outs[0], outs[1])
	require.Error(t, errs[0])
	require.Contains(t, outs[0]+outs[1], "ncclCommInitRank: invalid usage (ncclResult 5)")
	require.Contains(t, outs[0]+outs[1], "Duplicate GPU detected")
}

func childJoin(t *testing.T) {
	c, _ := openRank(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.NewGroup(ctx, 0, []int{0, 1})
	require.NoError(t, err)
	t.Log("joined")
}

// TestNCCLUniqueIDByValue: the fake's ncclCommInitRank checks the
// checksum its id carries, so a changed byte (as an id passed other than
// by value would be) is refused.
func TestNCCLUniqueIDByValue(t *testing.T) {
	fakeOnly(t)
	useNCCL(t)
	be := newTestBackend(t)
	id, err := NCCLGetUniqueID()
	require.NoError(t, err)
	id[77] ^= 1
	_, rc := ncInit(be.dev.ctx, 1, &id, 0)
	require.Equal(t, 4, rc, "a corrupted id is ncclInvalidArgument")
	id[77] ^= 1
	comm, rc := ncInit(be.dev.ctx, 1, &id, 0)
	require.Equal(t, 0, rc)
	require.Equal(t, 0, ncDestroy(be.dev.ctx, comm))
}

// TestNCCLNeedsAGPUPerProcess: a local rank beyond the host's GPUs is an
// error naming the variable before NCCL is asked (NCCL would refuse the
// shared GPU only once every member joined).
func TestNCCLNeedsAGPUPerProcess(t *testing.T) {
	fakeOnly(t)
	useNCCL(t)
	be := newTestBackend(t)
	t.Setenv("MESHRUN_FAKE_GPUS", "2")
	t.Setenv("LOCAL_RANK", "2")
	_, err := NewNCCLComm(nil, be)
	require.ErrorContains(t, err, "LOCAL_RANK=2, but this host has 2 GPU(s): NCCL needs a GPU per process")
	t.Setenv("LOCAL_RANK", "1")
	_, err = NewNCCLComm(nil, be)
	require.NoError(t, err)
}
