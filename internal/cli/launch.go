package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
	"github.com/meshrun/meshrun/rt/mpi"
)

// How a command runs its plan: --launcher local (every rank a goroutine of
// this process), mpi (this process is one rank of a run started by
// mpirun, mpiexec or srun), or auto (mpi when such a launcher started
// more than one process). Under mpi every process compiles the program
// itself (compilation is deterministic), runs its rank, and rank 0's
// process prints and writes every file; a process that fails prints its
// error with its rank and ends the whole run with MPI_Abort.

// launchMode resolves --launcher.
func (c *common) launchMode() (string, error) {
	switch c.launcher {
	case "local", "mpi":
		return c.launcher, nil
	case "rendezvous":
		_, err := rendezvous(true)
		return c.launcher, err
	case "auto", "":
		if info := mpi.Launcher(); info.Launcher != "" && info.Size > 1 {
			return "mpi", nil
		}
		if rv, err := rendezvous(false); err != nil || (rv != nil && rv.Size > 1) {
			return "rendezvous", err
		}
		return "local", nil
	}
	return "", fmt.Errorf("--launcher %q: want local, mpi, rendezvous or auto", c.launcher)
}

// quietFollower sets up a process that is not rank 0 of a launcher-started
// run: its reports go nowhere (rank 0 prints them), its errors to stderr
// with its rank in front of every line, so that a file missing on one host
// says where.
func (e *env) quietFollower() {
	info := mpi.Launcher()
	if rv, _ := rendezvous(false); info.Launcher == "" && rv != nil {
		info.Launcher, info.Size, info.Rank = "rendezvous", rv.Size, rv.Rank
	}
	if info.Launcher == "" || info.Size <= 1 || info.Rank <= 0 {
		return
	}
	e.follower = true
	e.stdout = io.Discard
	e.stderr = &prefixWriter{w: e.stderr, prefix: fmt.Sprintf("rank %d: ", info.Rank), start: true}
}

// prefixWriter puts a prefix in front of every line written through it.
type prefixWriter struct {
	w      io.Writer
	prefix string
	start  bool // at the start of a line
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var out []byte
	for _, c := range b {
		if p.start {
			out = append(out, p.prefix...)
		}
		out = append(out, c)
		p.start = c == '\n'
	}
	if _, err := p.w.Write(out); err != nil {
		return 0, err
	}
	return len(b), nil
}

// launch makes the launcher a command runs its plan on.
func (e *env) launch(p *lower.Plan, c *common) (rt.Launcher, int) {
	mode, err := c.launchMode()
	if err != nil {
		fmt.Fprintln(e.stderr, "meshrun:", err)
		return nil, ExitUsage
	}
	opts := rt.Options{Seed: c.seed, Timeout: c.timeout, Hook: testFault(), DeviceTime: c.deviceTime}
	if opts.Backend, err = c.openBackend(e.stderr); err != nil {
		fmt.Fprintf(e.stderr, "meshrun: --backend %s: %v\n", c.backend, err)
		return nil, ExitUsage
	}
	ctx := context.Background()
	if mode != "local" {
		if opts.Comm, err = ncclOver(opts.Backend); err != nil {
			fmt.Fprintln(e.stderr, "meshrun:", err)
			return nil, ExitUsage
		}
	}
	if mode == "rendezvous" {
		return e.launchRendezvous(ctx, p, opts)
	}
	if mode == "local" {
		if opts.Backends, err = c.localBackends(opts.Backend, p.Exec.Mesh.Size(), e.stderr); err != nil {
			fmt.Fprintf(e.stderr, "meshrun: --backend %s: %v\n", c.backend, err)
			return nil, ExitUsage
		}
		l, err := rt.NewLocal(ctx, p.Exec, opts)
		if err != nil {
			fmt.Fprintf(e.stderr, "meshrun: %v\n", err)
			return nil, ExitFailure
		}
		return l, ExitOK
	}
	info := mpi.Launcher()
	if info.Launcher == "" {
		fmt.Fprintf(e.stderr, "meshrun: --launcher mpi: no MPI launcher started this process: run it as mpirun -np %d (or mpiexec, srun)\n", p.Exec.Mesh.Size())
		return nil, ExitUsage
	}
	if info.Size > 0 && info.Size != p.Exec.Mesh.Size() {
		// every process sees this before MPI starts: rank 0 says it, all exit
		if !e.follower {
			fmt.Fprintf(e.stderr, "meshrun: %s started %d processes, but the mesh %s has %d devices: start one process per device (e.g. mpirun -np %d)\n",
				info.Launcher, info.Size, p.Exec.Mesh, p.Exec.Mesh.Size(), p.Exec.Mesh.Size())
		}
		return nil, ExitUsage
	}
	m, err := rt.NewMPI(ctx, p.Exec, opts)
	if err != nil {
		e.runError("meshrun: starting the MPI run: %v\n", err)
		mpi.Abort(ExitFailure)
	}
	e.mpi = m
	go abortOnTerm()
	return m, ExitOK
}

// runError prints a run-time error (on a follower, with its rank).
func (e *env) runError(format string, a ...any) {
	fmt.Fprintf(e.stderr, format, a...)
}

// followerGrace is how long a follower that fails before MPI starts waits
// before it exits: Open MPI's mpirun ends every process as soon as one
// exits non-zero, and rank 0 (which fails the same way, say of a compile
// error, or has a different problem to report) must get to print first.
const followerGrace = time.Second

// abortGrace is how long a failed rank waits between printing its error
// and MPI_Abort: the launcher tears every process down on the abort, and
// the error, written to a pipe its proxy forwards, must reach the user
// first. A full test run at load 12 once showed, under MPICH, no line of
// rank 0's timeout (TestMPI/fault-stall-timeout), only the stalled rank's;
// this race is the likely cause (not reproduced in 11 runs at load 8-19).
const abortGrace = 250 * time.Millisecond

// finish ends an MPI run: every rank finalizes after success; a failure
// ends every rank (MPI_Abort) so none is left waiting for this one.
func (e *env) finish(code int) int {
	if e.mpi == nil {
		if e.follower && code != ExitOK {
			time.Sleep(followerGrace)
		}
		return code
	}
	if code != ExitOK {
		time.Sleep(abortGrace)
		mpi.Abort(code)
	}
	// MPI_Finalize waits for every rank; rank 0 may still be busy (check's
	// single-device reference runs there alone after the MPI part), so the
	// others wait as long as it takes: if rank 0 dies the launcher ends them.
	ctx, cancel := context.WithTimeout(context.Background(), leadWait)
	defer cancel()
	if err := mpi.Finalize(ctx); err != nil {
		e.runError("meshrun: finalizing MPI: %v\n", err)
		mpi.Abort(ExitFailure)
	}
	return code
}

// leadWait bounds how long the other ranks wait for rank 0's own work
// (a single-device reference, a checkpoint write) at a synchronisation
// point: long, since rank 0 is working, not lost — a lost rank ends the run
// through the launcher.
const leadWait = 24 * time.Hour

// waitForLead holds every rank until rank 0 has finished its own work (a
// checkpoint write), so that none times out in the next collective
// meanwhile. Nothing to do under the local launcher.
func (e *env) waitForLead() error {
	ctx, cancel := context.WithTimeout(context.Background(), leadWait)
	defer cancel()
	switch {
	case e.mpi != nil:
		return mpi.World().Barrier(ctx)
	case e.rendezvous != nil:
		return e.rendezvous.WaitForLead(ctx)
	}
	return nil
}

// abortOnTerm turns the launcher's SIGTERM (sent when another rank died)
// into a line saying so, then exits.
func abortOnTerm() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	<-ch
	fmt.Fprintf(os.Stderr, "rank %d: meshrun: terminated by the launcher (another rank failed or was lost)\n", mpi.Launcher().Rank)
	os.Exit(ExitFailure)
}

// testFault is a failure injection for the multi-process tests only:
// MESHRUN_TEST_FAULT=RANK:INSTR:exit makes rank RANK exit before its
// instruction INSTR; RANK:INSTR:stall makes it stop there for an hour.
func testFault() func(rank, i int) {
	spec := os.Getenv("MESHRUN_TEST_FAULT")
	parts := strings.Split(spec, ":")
	if spec == "" || len(parts) != 3 {
		return nil
	}
	victim, err1 := strconv.Atoi(parts[0])
	at, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return nil
	}
	return func(rank, i int) {
		if rank != victim || i != at {
			return
		}
		fmt.Fprintf(os.Stderr, "rank %d: meshrun: test fault %s at instruction %d\n", rank, parts[2], i)
		if parts[2] == "exit" {
			os.Exit(3)
		}
		time.Sleep(time.Hour)
	}
}
