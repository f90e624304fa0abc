package cli

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/internal/npy"
)

// Runs of one process per device started with the rendezvous variables
// (no MPI): the test binary starts copies of itself running meshrun
// (TestRendezvousChild), on the CPU backend, whose collectives are then
// the rings over TCP; outputs equal the local launcher's bit for bit (the
// same ring algorithms, in the same order).

// TestRendezvousChild is one process of such a run: meshrun with the
// arguments in MESHRUN_RDV_ARGS, exiting with its code.
func TestRendezvousChild(t *testing.T) {
	args := os.Getenv("MESHRUN_RDV_ARGS")
	if args == "" {
		t.Skip("a process of the rendezvous tests (they start it)")
	}
	if code := Main(strings.Fields(args), strings.NewReader(""), os.Stdout, os.Stderr); code != ExitOK {
		os.Exit(code)
	}
}

// rendezvousRun runs meshrun args as n processes and returns rank 0's
// output; every process must succeed.
func rendezvousRun(t *testing.T, n int, args ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	outs, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestRendezvousChild$")
		cmd.Env = append(cleanEnv(), "MESHRUN_RDV_ARGS="+strings.Join(args, " "), "MASTER_ADDR=127.0.0.1", "MASTER_PORT="+port,
			"WORLD_SIZE="+strconv.Itoa(n), "RANK="+strconv.Itoa(r), "LOCAL_RANK="+strconv.Itoa(r))
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.CombinedOutput()
			outs[r], errs[r] = string(out), err
		}()
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d of %d: %v\n%s", r, n, args, outs[r])
	}
	for r := 1; r < n; r++ {
		require.NotContains(t, outs[r], "meshrun", "rank %d prints nothing (rank 0 reports)", r)
	}
	return outs[0]
}

func TestRendezvousRunsLikeLocal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	for _, c := range []struct {
		cmd, path string
		n         int
		// megatron_dp_tp's gradients share a bucket (lower/bucket.go): one
		// all-reduce after another over TCP, staged together locally
	}{{"run", "dp_mlp.mesh", 4}, {"run", "uneven.mesh", 3}, {"train", "train/pipeline_schedules.mesh", 4}, {"train", "train/megatron_dp_tp.mesh", 4}} {
		t.Run(c.path, func(t *testing.T) {
			path := filepath.Join("..", "..", "examples", c.path)
			got, want := t.TempDir(), t.TempDir()
			args := []string{c.cmd, path, "--out", got}
			if c.cmd == "train" { // rank 0 writes checkpoints, the others wait for it
				args = append(args, "--save", filepath.Join(got, "ckpt"), "--save-every", "1")
			}
			rendezvousRun(t, c.n, args...)
			if c.cmd == "train" {
				require.FileExists(t, filepath.Join(got, "ckpt", "checkpoint.safetensors"))
			}
			var out, errb bytes.Buffer
			require.Equal(t, ExitOK, Main([]string{c.cmd, path, "--out", want, "--launcher", "local"}, strings.NewReader(""), &out, &errb), errb.String())
			files, err := filepath.Glob(filepath.Join(want, "*.npy"))
			require.NoError(t, err)
			require.NotEmpty(t, files)
			for _, f := range files {
				_, w, err := npy.ReadFile(f)
				require.NoError(t, err)
				_, g, err := npy.ReadFile(filepath.Join(got, filepath.Base(f)))
				require.NoError(t, err)
				require.Equal(t, w, g, "%s: the rendezvous run equals the local one", filepath.Base(f))
			}
		})
	}
	out := rendezvousRun(t, 3, "check", filepath.Join("..", "..", "examples", "uneven.mesh"))
	require.Contains(t, out, "PASS")
}

func TestRendezvousVariablesChecked(t *testing.T) {
	ex := filepath.Join("..", "..", "examples", "dp_mlp.mesh")
	main := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := Main(args, strings.NewReader(""), &out, &errb)
		return code, errb.String()
	}
	code, msg := main("run", ex, "--launcher", "rendezvous")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, msg, "--launcher rendezvous: set MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK")

	t.Setenv("WORLD_SIZE", "4")
	t.Setenv("RANK", "0")
	t.Setenv("MASTER_ADDR", "127.0.0.1")
	t.Setenv("MASTER_PORT", "http")
	code, msg = main("run", ex) // auto: WORLD_SIZE > 1 means the rendezvous
	require.Equal(t, ExitUsage, code)
	require.Contains(t, msg, `MASTER_PORT="http": want a number from 1 to 65535`)

	t.Setenv("MASTER_PORT", "29500")
	t.Setenv("WORLD_SIZE", "2")
	code, msg = main("run", ex)
	require.Equal(t, ExitUsage, code)
	require.Contains(t, msg, "WORLD_SIZE=2, but the mesh [dp=4] has 4 devices")
}
