package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meshrun/meshrun/cuda"
	"github.com/meshrun/meshrun/lower"
	"github.com/meshrun/meshrun/rt"
)

// Runs of one process per device without MPI: --launcher rendezvous (or
// auto, when WORLD_SIZE > 1 is set and no MPI launcher started this
// process) reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK and
// LOCAL_RANK, as torchrun sets them; rank 0 listens at
// MASTER_ADDR:MASTER_PORT and the others connect (rt.Rendezvous). With
// --backend cuda, under either MPI or the rendezvous, each process runs
// its rank on GPU LOCAL_RANK (cuda.ChooseDevice) and its collectives go
// through NCCL on that GPU (cuda.NCCLComm), its sends and the launcher's
// own messages through MPI or TCP.

// rendezvous reads the variables; nil when none is set. required turns
// their absence into an error.
func rendezvous(required bool) (*rt.Rendezvous, error) {
	rv, ok, err := rt.RendezvousFromEnv()
	switch {
	case err != nil:
		return nil, fmt.Errorf("--launcher rendezvous: %v", err)
	case !ok && required:
		return nil, errors.New("--launcher rendezvous: set MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK (and LOCAL_RANK) in every process, as torchrun does")
	case !ok:
		return nil, nil
	}
	return &rv, nil
}

// ncclOver is the hook that puts a process's rank on NCCL when its
// kernels run on a GPU (nil otherwise: collectives stay on the host).
// NCCL is loaded here, before any work, so that a missing library is a
// usage error with the search's one line.
func ncclOver(be rt.Backend) (func(context.Context, rt.Comm) (rt.Comm, error), error) {
	gpu, ok := be.(*cuda.Backend)
	if !ok {
		return nil, nil
	}
	if err := cuda.Load(cuda.NCCL); err != nil {
		return nil, fmt.Errorf("--backend cuda with one process per GPU needs NCCL: %w", err)
	}
	return func(_ context.Context, host rt.Comm) (rt.Comm, error) {
		c, err := cuda.NewNCCLComm(host, gpu)
		if err != nil {
			return nil, fmt.Errorf("--backend cuda with one process per GPU needs NCCL: %w", err)
		}
		return c, nil
	}, nil
}

// launchRendezvous joins the other processes and makes this one's
// launcher.
func (e *env) launchRendezvous(ctx context.Context, p *lower.Plan, opts rt.Options) (rt.Launcher, int) {
	rv, err := rendezvous(true)
	if err != nil {
		fmt.Fprintln(e.stderr, "meshrun:", err)
		return nil, ExitUsage
	}
	if rv.Size != p.Exec.Mesh.Size() {
		if !e.follower {
			fmt.Fprintf(e.stderr, "meshrun: WORLD_SIZE=%d, but the mesh %s has %d devices: start one process per device\n",
				rv.Size, p.Exec.Mesh, p.Exec.Mesh.Size())
		}
		return nil, ExitUsage
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	host, err := rv.Connect(cctx)
	if err != nil {
		e.runError("meshrun: %v\n", err)
		return nil, ExitFailure
	}
	l, err := rt.NewProcess(ctx, p.Exec, host, opts)
	if err != nil {
		e.runError("meshrun: starting the run of %d processes: %v\n", rv.Size, err)
		return nil, ExitFailure
	}
	e.rendezvous = l
	return l, ExitOK
}
