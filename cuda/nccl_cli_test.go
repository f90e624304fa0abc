package cuda_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/cuda"
	"github.com/meshrun/meshrun/internal/cli"
	"github.com/meshrun/meshrun/internal/npy"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
)

// Whole examples with one process per device: meshrun run and train
// --backend cuda under the rendezvous variables, each process on its own
// device of the fake, collectives through the fake NCCL between the
// processes, sends over TCP; rank 0's outputs against the CPU's run on
// one device, within the bounds of examples_test.go.

// TestNCCLCLIChild is one process of such a run: meshrun with the
// arguments in MESHRUN_NCCL_ARGS.
func TestNCCLCLIChild(t *testing.T) {
	if os.Getenv("MESHRUN_NCCL_CHILD") != "cli" {
		t.Skip("a rank of the multi-process CLI tests (they start it)")
	}
	code := cli.Main(strings.Fields(os.Getenv("MESHRUN_NCCL_ARGS")), strings.NewReader(""), os.Stdout, os.Stderr)
	fmt.Printf("meshrun exit code %d\n", code)
	require.Equal(t, cli.ExitOK, code)
}

// runRanks runs meshrun args in n processes; each must succeed. It
// returns rank 0's output and the fake NCCL's log.
func runRanks(t *testing.T, n int, args ...string) (string, string) {
	t.Helper()
	log := filepath.Join(t.TempDir(), "nccl.log")
	outs, errs := cuda.StartTestRanks(t, "TestNCCLCLIChild", "cli", n, func(int) []string {
		return []string{"MESHRUN_NCCL_ARGS=" + strings.Join(args, " "), "MESHRUN_FAKE_NCCL_LOG=" + log}
	})
	for r := range n {
		require.NoError(t, errs[r], "rank %d of %d: %v\n%s", r, n, args, outs[r])
	}
	b, err := os.ReadFile(log)
	if !os.IsNotExist(err) { // no log: no communicator
		require.NoError(t, err)
	}
	return outs[0], string(b)
}

func readNpy(t *testing.T, path string) *rt.Tensor {
	t.Helper()
	h, data, err := npy.ReadFile(path)
	require.NoError(t, err)
	return rt.FromSlice(h.Shape, data)
}

// usedNCCL checks the fake NCCL's log: every rank joined one communicator
// per plan group, and collectives ran.
func usedNCCL(t *testing.T, log string, p *lower.Plan) {
	t.Helper()
	n, groups := p.Exec.Mesh.Size(), len(p.Exec.Groups)
	require.Equal(t, n*groups, strings.Count(log, "init rank "), "every rank joins a communicator per plan group (%d ranks, %d groups)", n, groups)
	if groups > 0 {
		require.Contains(t, log, "op ", "collectives went through NCCL")
	}
}

func TestNCCLExamplesAcrossProcesses(t *testing.T) {
	cuda.FakeOnly(t)
	for _, ex := range []string{"dp_tp_block", "moe", "uneven"} {
		t.Run(ex, func(t *testing.T) {
			path := "../examples/" + ex + ".mesh"
			p := lowered(t, path, false)
			dir := t.TempDir()
			out, log := runRanks(t, p.Exec.Mesh.Size(), "run", path, "--backend", "cuda", "--out", dir)
			require.Contains(t, out, "meshrun: kernels run on cuda (", out)
			usedNCCL(t, log, p)
			single, err := rt.Run(context.Background(), lowered(t, path, true), rt.Options{})
			require.NoError(t, err)
			for i, name := range single.Names {
				got := readNpy(t, filepath.Join(dir, name+".npy"))
				w := compare(t, name, got, rt.NpyReady(single.Outputs[i]), runULPs, runFloor)
				t.Logf("%s on %s, one process per device: %s worst %.0f ulp vs one CPU device", ex, p.Exec.Mesh, name, w)
			}
		})
	}
}

// TestNCCLTrainAcrossProcesses: the loss curve and the params after
// training against the CPU's in-process run on the same mesh
// (compareTraining) and against one CPU device (compareOneDevice), as
// TestExamplesTrainOnCUDA holds the backend's in-process runs.
func TestNCCLTrainAcrossProcesses(t *testing.T) {
	cuda.FakeOnly(t)
	for _, ex := range []string{"mlp_bf16", "pipeline_schedules"} {
		t.Run(ex, func(t *testing.T) {
			path := "../examples/train/" + ex + ".mesh"
			p := lowered(t, path, false)
			dir := t.TempDir()
			_, log := runRanks(t, p.Exec.Mesh.Size(), "train", path, "--backend", "cuda", "--out", dir, "--log", filepath.Join(dir, "steps.jsonl"))
			usedNCCL(t, log, p)
			mesh, err := rt.Train(context.Background(), p, rt.Options{}, rt.TrainConfig{})
			require.NoError(t, err)
			single, err := rt.Train(context.Background(), lowered(t, path, true), rt.Options{}, rt.TrainConfig{})
			require.NoError(t, err)
			got := &rt.TrainResult{Params: mesh.Params, Losses: readLosses(t, filepath.Join(dir, "steps.jsonl"))}
			for i, prm := range mesh.Params {
				require.False(t, mesh.Final[i].DType == ir.BF16 || mesh.Final[i].DType == ir.F16, "%s: .npy files hold halves widened", prm.Name)
				got.Final = append(got.Final, readNpy(t, filepath.Join(dir, prm.Name+".npy")))
			}
			w1 := compareTraining(t, computeDType(p), got, mesh)
			w2 := compareOneDevice(t, p, got, single)
			t.Logf("%s on %s, one process per device: worst %.0f ulp vs the CPU mesh, %.2f of the one-device tolerance", ex, p.Exec.Mesh, w1, w2)
		})
	}
}

// readLosses reads the losses of train --log's JSON lines.
func readLosses(t *testing.T, path string) []float64 {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []float64
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec struct{ Loss float64 }
		require.NoError(t, json.Unmarshal([]byte(line), &rec))
		out = append(out, rec.Loss)
	}
	return out
}

// lowered compiles an example file for its mesh, or for one device.
func lowered(t *testing.T, path string, single bool) *lower.Plan {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return compile(t, path, string(b), "", single)
}

// TestNCCLUnderMPI: the same under Open MPI's mpirun: the group ids travel
// over MPI, each process takes the device of its local rank
// (OMPI_COMM_WORLD_LOCAL_RANK), collectives go through the fake NCCL.
func TestNCCLUnderMPI(t *testing.T) {
	cuda.FakeOnly(t)
	mpirun, err := exec.LookPath("mpirun.openmpi")
	if err != nil {
		t.Skip("mpirun.openmpi not found: apt-get install openmpi-bin")
	}
	cuda.UseNCCL(t)
	path := "../examples/dp_tp_block.mesh"
	p := lowered(t, path, false)
	n := p.Exec.Mesh.Size()
	dir, log := t.TempDir(), filepath.Join(t.TempDir(), "nccl.log")
	cmd := exec.Command(mpirun, "-np", strconv.Itoa(n), "--oversubscribe", os.Args[0], "-test.run", "^TestNCCLCLIChild$", "-test.v")
	cmd.Env = append(os.Environ(), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
		"OMPI_MCA_btl=self,vader", "OMPI_MCA_oob_tcp_if_include=lo", "OMPI_MCA_btl_vader_single_copy_mechanism=none",
		"MESHRUN_NCCL_CHILD=cli", "MESHRUN_FAKE_GPUS="+strconv.Itoa(n), "MESHRUN_FAKE_NCCL_LOG="+log,
		"MESHRUN_NCCL_ARGS=run "+path+" --backend cuda --out "+dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	usedNCCL(t, string(b), p)
	single, err := rt.Run(context.Background(), lowered(t, path, true), rt.Options{})
	require.NoError(t, err)
	for i, name := range single.Names {
		w := compare(t, name, readNpy(t, filepath.Join(dir, name+".npy")), rt.NpyReady(single.Outputs[i]), runULPs, runFloor)
		t.Logf("dp_tp_block under mpirun, one process per device: %s worst %.0f ulp vs one CPU device", name, w)
	}
}

// TestNCCLMissingIsAUsageError: with --backend cuda under a launcher and
// no NCCL, meshrun stops before running with the library search's line.
func TestNCCLMissingIsAUsageError(t *testing.T) {
	cuda.FakeOnly(t)
	missing := filepath.Join(t.TempDir(), "libnccl.so.2")
	outs, errs := cuda.StartTestRanks(t, "TestNCCLCLIChild", "cli", 2, func(int) []string {
		return []string{"MESHRUN_NCCL_LIB=" + missing, "MESHRUN_NCCL_ARGS=run ../examples/uneven.mesh --backend cuda"}
	})
	for r := range 2 {
		require.Error(t, errs[r])
		require.Contains(t, outs[r], "meshrun exit code 2", outs[r])
		require.Contains(t, outs[r], "--backend cuda with one process per GPU needs NCCL: cuda: cannot load NCCL: tried "+missing+" (not found); MESHRUN_NCCL_LIB is set", outs[r])
	}
}

// TestNCCLLostRankTimesOut: a rank that dies before its first
// instruction leaves the others in an NCCL collective; they end at
// --timeout with the collective named and the communicator aborted,
// never hanging.
func TestNCCLLostRankTimesOut(t *testing.T) {
	cuda.FakeOnly(t)
	outs, errs := cuda.StartTestRanks(t, "TestNCCLCLIChild", "cli", 3, func(int) []string {
		return []string{"MESHRUN_TEST_FAULT=1:0:exit", "MESHRUN_NCCL_ARGS=run ../examples/uneven.mesh --backend cuda --timeout 2s"}
	})
	require.Error(t, errs[1])
	require.Contains(t, outs[1], "test fault exit at instruction 0")
	for _, r := range []int{0, 2} {
		require.Error(t, errs[r], "rank %d:\n%s", r, outs[r])
		require.Contains(t, outs[r], "did not finish (communicator aborted): timed out", "rank %d:\n%s", r, outs[r])
	}
	t.Logf("rank 0:\n%s", outs[0])
}
