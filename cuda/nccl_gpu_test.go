package cuda

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
)

// TestBackendNCCLOneRank is the NCCL check a machine with one GPU can
// make (bench/gpu.sh runs it with MESHRUN_TEST_GPU=1; here it runs on the
// fake): one rank (WORLD_SIZE=1) joins through the rendezvous, makes its
// communicator, and every collective of a group of one returns its input,
// bit for bit, in every dtype. Two ranks cannot share a GPU in NCCL, so
// collectives between GPUs are checked on the fake only.
func TestBackendNCCLOneRank(t *testing.T) {
	useNCCL(t)
	v, err := NCCLVersion()
	require.NoError(t, err)
	t.Logf("NCCL %d from %s", v, Path(NCCL))
	// one rank on one host: NCCL's bootstrap may use the loopback
	// interface (a GPU machine may have no other), and says why it fails
	for k, v := range map[string]string{"NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "WARN"} {
		if os.Getenv(k) == "" {
			t.Setenv(k, v)
		}
	}
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	t.Setenv("MASTER_PORT", strconv.Itoa(freePort(t)))
	t.Setenv("WORLD_SIZE", "1")
	t.Setenv("RANK", "0")
	t.Setenv("LOCAL_RANK", "0")
	c, be := openRank(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, err := c.NewGroup(ctx, 0, []int{0})
	require.NoError(t, err)
	for _, dt := range []ir.DType{ir.F32, ir.F64, ir.I32, ir.I64, ir.BF16, ir.F16} {
		in := intTensor(dt, []int{6, 5}, 3)
		if dt == ir.F32 || dt == ir.F64 {
			scaleBy(in, 0.37) // fractions too
		}
		calls := map[string]func(x rt.Buffer) (rt.Buffer, error){
			"all-reduce sum": func(x rt.Buffer) (rt.Buffer, error) { return g.AllReduce(ctx, x, rt.OpSum) },
			"all-reduce max": func(x rt.Buffer) (rt.Buffer, error) { return g.AllReduce(ctx, x, rt.OpMax) },
			"all-gather 0":   func(x rt.Buffer) (rt.Buffer, error) { return g.AllGather(ctx, x, 0, []int{6}) },
			"all-gather 1":   func(x rt.Buffer) (rt.Buffer, error) { return g.AllGather(ctx, x, 1, []int{5}) },
			"reduce-scatter 0": func(x rt.Buffer) (rt.Buffer, error) {
				return g.ReduceScatter(ctx, x, 0, []int{6}, rt.OpSum)
			},
			"reduce-scatter 1": func(x rt.Buffer) (rt.Buffer, error) {
				return g.ReduceScatter(ctx, x, 1, []int{5}, rt.OpMax)
			},
			"all-to-all": func(x rt.Buffer) (rt.Buffer, error) { return g.AllToAll(ctx, x, 0, []int{6}, 1, []int{5}) },
			"broadcast":  func(x rt.Buffer) (rt.Buffer, error) { return g.Broadcast(ctx, x, 0, dt, []int{6, 5}) },
			"reduce":     func(x rt.Buffer) (rt.Buffer, error) { return g.Reduce(ctx, x, 0) },
		}
		for name, call := range calls {
			x, err := be.CopyIn(in.Clone())
			require.NoError(t, err)
			out, err := call(x)
			require.NoError(t, err, "%s %s", name, dt)
			_, onDevice := out.(*Buf)
			require.True(t, onDevice, "%s %s: a device buffer", name, dt)
			got, err := be.CopyOut(out)
			require.NoError(t, err)
			require.Equal(t, in.Shape, got.Shape, "%s %s", name, dt)
			require.Equal(t, in.Data, got.Data, "%s %s: a group of one returns its input", name, dt)
			be.Free(out)
			be.Free(x)
		}
	}
}

func scaleBy(t *rt.Tensor, s float64) {
	switch d := t.Data.(type) {
	case []float32:
		for i := range d {
			d[i] *= float32(s)
		}
	case []float64:
		for i := range d {
			d[i] *= s
		}
	}
}
