package mpi

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// These tests start this test binary as several ranks under a real
// launcher; each rank runs TestRank in the mode named by
// MESHRUN_MPI_TEST_MODE (rank_test.go). Launchers are called by their full
// names: installing MPICH repoints the plain mpirun to its own.

type launcher struct {
	name string   // executable
	np   string   // flag for the number of ranks
	args []string // extra flags
	env  []string
}

var launchers = []launcher{
	{name: "mpirun.openmpi", np: "-np", args: []string{"--oversubscribe"}, env: []string{
		// We run as root in CI; keep all traffic on shared memory (vader)
		// and the launcher's own on loopback.
		"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
		"OMPI_MCA_btl=self,vader", "OMPI_MCA_oob_tcp_if_include=lo",
	}},
	{name: "mpiexec.mpich", np: "-n", env: []string{"HYDRA_IFACE=lo"}},
}

// launch runs np ranks in the given mode and returns the combined output,
// the error from the launcher (nil: every rank exited 0) and the wall time.
func launch(t *testing.T, l launcher, np int, mode string, limit time.Duration) (string, error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	args := append([]string{l.np, strconv.Itoa(np)}, l.args...)
	args = append(args, os.Args[0], "-test.run=^TestRank$", "-test.count=1")
	cmd := exec.CommandContext(ctx, l.name, args...)
	cmd.Env = append(os.Environ(), l.env...)
	cmd.Env = append(cmd.Env, "MESHRUN_MPI_TEST_MODE="+mode, "MESHRUN_MPI_TEST_NP="+strconv.Itoa(np))
	cmd.WaitDelay = 2 * time.Second
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: still running after %v:\n%s", l.name, mode, limit, out)
	}
	return string(out), err, time.Since(t0)
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func TestUnderLaunchers(t *testing.T) {
	if os.Getenv("MESHRUN_MPI_TEST_MODE") != "" {
		t.Skip("inside a rank")
	}
	if err := Load(); err != nil {
		t.Skipf("no MPI library: %v", err)
	}
	if testing.Short() {
		t.Skip("starts MPI jobs; skipped with -short")
	}
	for _, l := range launchers {
		t.Run(l.name, func(t *testing.T) {
			if _, err := exec.LookPath(l.name); err != nil {
				t.Skipf("%s not found (install %s): %v", l.name, map[string]string{
					"mpirun.openmpi": "openmpi-bin", "mpiexec.mpich": "mpich"}[l.name], err)
			}
			t.Run("collectives", func(t *testing.T) {
				out, err, took := launch(t, l, 4, "collectives", 40*time.Second)
				if err != nil || strings.Count(out, "RANK-OK") != 4 {
					t.Fatalf("exit %v after %v, want 4 RANK-OK lines:\n%s", err, took, out)
				}
				t.Logf("4 ranks in %v", took.Round(time.Millisecond))
			})
			t.Run("serialized", func(t *testing.T) {
				out, err, took := launch(t, l, 4, "serialized", 40*time.Second)
				if err != nil || strings.Count(out, "RANK-OK") != 4 {
					t.Fatalf("exit %v after %v, want 4 RANK-OK lines:\n%s", err, took, out)
				}
			})
			t.Run("recv-timeout", func(t *testing.T) {
				out, err, took := launch(t, l, 2, "timeout", 30*time.Second)
				if err != nil || !strings.Contains(out, "TIMEOUT-OK") || strings.Count(out, "RANK-OK") != 2 {
					t.Fatalf("exit %v after %v, want TIMEOUT-OK and 2 RANK-OK lines:\n%s", err, took, out)
				}
			})
			t.Run("abort", func(t *testing.T) {
				out, err, took := launch(t, l, 4, "abort", 30*time.Second)
				// The others wait 20 s in Recv; the launcher must end them first.
				if exitCode(err) != 3 || took > 15*time.Second || strings.Contains(out, "RANK-OK") {
					t.Fatalf("exit %v after %v; want a failure within seconds and no rank finishing:\n%s", err, took, out)
				}
				t.Logf("job ended %v after Abort: %v", took.Round(time.Millisecond), err)
			})
			t.Run("collective-timeout", func(t *testing.T) {
				out, err, took := launch(t, l, 3, "collective-timeout", 30*time.Second)
				// Exit code 4 comes only from the Abort after the expected
				// TimeoutError (the launcher may not forward the message).
				if exitCode(err) != 4 || took > 15*time.Second {
					t.Fatalf("exit %v after %v; want an Allreduce timeout, then the job ended by Abort(4):\n%s", err, took, out)
				}
			})
		})
	}
}

// TestSingleton starts one rank with no launcher, under each library
// (MPI then makes a world of one, as when a program runs on its own).
func TestSingleton(t *testing.T) {
	if os.Getenv("MESHRUN_MPI_TEST_MODE") != "" {
		t.Skip("inside a rank")
	}
	if err := Load(); err != nil {
		t.Skipf("no MPI library: %v", err)
	}
	if testing.Short() {
		t.Skip("starts MPI processes; skipped with -short")
	}
	for _, name := range []string{"libmpi.so.40", "libmpich.so.12"} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestRank$", "-test.count=1")
			cmd.Env = append(os.Environ(), "MESHRUN_MPI_LIB="+name, "MESHRUN_MPI_TEST_MODE=singleton")
			cmd.WaitDelay = 2 * time.Second
			out, err := cmd.CombinedOutput()
			if strings.Contains(string(out), "no MPI library found") {
				t.Skipf("%s not installed", name)
			}
			if err != nil || !strings.Contains(string(out), "RANK-OK 0") {
				t.Fatalf("exit %v:\n%s", err, out)
			}
		})
	}
}
