package cuda_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/cuda"
	"github.com/meshrun/meshrun/internal/cli"
	"github.com/meshrun/meshrun/rt"
)

// TestBackendRanksOnTwoGPUs: the ranks of one process on two GPUs
// (rt.Options.Backends), blocked so that the innermost axis's groups stay
// on one GPU: those groups' collectives run on their GPU, the others'
// (and sends between the GPUs) through host copies; every run equals the
// CPU's running the same plan. On the fake driver two devices are made
// (MESHRUN_FAKE_GPUS); on a machine with fewer than two GPUs it skips.
func TestBackendRanksOnTwoGPUs(t *testing.T) {
	twoGPUs(t)
	var notes bytes.Buffer
	be1 := newBackend(t, &notes)
	cuda.UseDriver(t)
	be2, err := cuda.NewBackend(1, &notes)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, be2.Close()) })
	gpus := []*countingGPU{{Backend: be1}, {Backend: be2}}
	for _, ex := range []string{"train/gpt/gpt.mesh", "train/mlp_offload_pipe.mesh", "train/mlp_bf16.mesh"} {
		t.Run(ex, func(t *testing.T) {
			file := "../examples/" + ex
			src, err := os.ReadFile(file)
			require.NoError(t, err)
			p := compile(t, file, string(src), "", false)
			n := p.Exec.Mesh.Size()
			bes := make([]rt.Backend, n)
			for r := range bes {
				bes[r] = gpus[r*len(gpus)/n]
			}
			got, err := rt.Train(context.Background(), p, rt.Options{Backends: bes}, rt.TrainConfig{})
			require.NoError(t, err)
			want, err := rt.Train(context.Background(), p, rt.Options{}, rt.TrainConfig{})
			require.NoError(t, err)
			worst := compareTraining(t, computeDType(p), got, want)
			t.Logf("%s on %s, ranks blocked on 2 GPUs: worst %.0f ulp vs the cpu", ex, p.Exec.Mesh, worst)
			for i, g := range gpus {
				requireNative(t, g.Backend, ex)
				// the groups within a GPU ran there (a group across the
				// two that tried would fail: its members' buffers are on
				// different devices)
				require.Positive(t, g.parts.Swap(0), "%s: collectives on GPU %d", ex, i)
			}
		})
	}
}

// countingGPU counts the collective parts its ranks ran on the device.
type countingGPU struct {
	*cuda.Backend
	parts atomic.Int64
}

func (g *countingGPU) ReduceRows(outs, in []rt.Buffer, first int, span rt.Rows, op rt.ReduceOp) error {
	g.parts.Add(1)
	return g.Backend.ReduceRows(outs, in, first, span, op)
}

func (g *countingGPU) CopyRows(outs []rt.Buffer, x rt.Buffer, span rt.Rows) error {
	g.parts.Add(1)
	return g.Backend.CopyRows(outs, x, span)
}

// TestCLIRanksOnTwoGPUs: with two GPUs, meshrun spreads the local
// launcher's ranks over both (blocked), and check passes against the one
// device CPU run; $MESHRUN_CUDA_DEVICE pins every rank to one GPU.
func TestCLIRanksOnTwoGPUs(t *testing.T) {
	twoGPUs(t)
	cuda.UseDriver(t)
	for _, pin := range []bool{false, true} {
		if pin {
			t.Setenv("MESHRUN_CUDA_DEVICE", "1")
		}
		var out, errb bytes.Buffer
		code := cli.Main([]string{"check", "../examples/train/gpt/gpt.mesh", "--backend", "cuda"}, strings.NewReader(""), &out, &errb)
		require.Equal(t, cli.ExitOK, code, "%s%s", out.String(), errb.String())
		require.Contains(t, out.String(), "PASS")
		if pin {
			require.NotContains(t, errb.String(), "run on GPU")
			continue
		}
		require.Contains(t, errb.String(), "meshrun: ranks 0-1 run on GPU 0, cuda (")
		require.Contains(t, errb.String(), "meshrun: ranks 2-3 run on GPU 1, cuda (")
	}
}

// twoGPUs skips on a machine with fewer than two GPUs, and gives the fake
// driver two.
func twoGPUs(t *testing.T) {
	if cuda.OnGPU() {
		if n, err := cuda.DeviceCount(); err != nil || n < 2 {
			t.Skip("needs two GPUs")
		}
		return
	}
	t.Setenv("MESHRUN_FAKE_GPUS", "2")
}
