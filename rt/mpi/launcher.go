package mpi

import (
	"os"
	"strconv"
)

// LaunchInfo is what the launcher told this process through its
// environment. It is for logging and for choosing a device by local rank:
// the rank and size that count are Comm.Rank and Comm.Size, from MPI. Fields
// the launcher did not set are -1.
type LaunchInfo struct {
	Launcher  string // "openmpi", "hydra" (MPICH), "slurm" or "" (none)
	Rank      int
	Size      int
	LocalRank int // rank among the processes on this host
	LocalSize int
}

// Launcher reads the launcher's variables: Open MPI's mpirun
// (OMPI_COMM_WORLD_*), MPICH's Hydra (PMI_*, MPI_LOCALRANKID/NRANKS) and
// Slurm's srun (SLURM_*), in that order of precedence, since an mpirun
// inside a Slurm allocation inherits SLURM_* describing the allocation
// rather than its own ranks.
func Launcher() LaunchInfo { return launcherFrom(os.Getenv) }

func launcherFrom(getenv func(string) string) LaunchInfo {
	num := func(name string) int {
		if n, err := strconv.Atoi(getenv(name)); err == nil && n >= 0 {
			return n
		}
		return -1
	}
	switch {
	case getenv("OMPI_COMM_WORLD_SIZE") != "":
		return LaunchInfo{"openmpi", num("OMPI_COMM_WORLD_RANK"), num("OMPI_COMM_WORLD_SIZE"),
			num("OMPI_COMM_WORLD_LOCAL_RANK"), num("OMPI_COMM_WORLD_LOCAL_SIZE")}
	case getenv("PMI_RANK") != "" || getenv("PMI_SIZE") != "":
		return LaunchInfo{"hydra", num("PMI_RANK"), num("PMI_SIZE"),
			num("MPI_LOCALRANKID"), num("MPI_LOCALNRANKS")}
	case getenv("SLURM_PROCID") != "":
		return LaunchInfo{"slurm", num("SLURM_PROCID"), num("SLURM_NTASKS"),
			num("SLURM_LOCALID"), -1}
	}
	return LaunchInfo{"", -1, -1, -1, -1}
}
