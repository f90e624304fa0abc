package cuda

import (
	"fmt"
	"os"
	"strconv"
)

// localRankVars are the variables launchers set to a process's rank on
// its host: Open MPI, MPICH/Intel MPI, Slurm, and torchrun's convention.
var localRankVars = []string{"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}

// ChooseDevice is the GPU this process should use: $MESHRUN_CUDA_DEVICE
// when set; else, in a process a launcher started, its local rank modulo
// the GPUs present (one process per GPU on each host); else 0.
func ChooseDevice() (int, error) {
	if v := os.Getenv("MESHRUN_CUDA_DEVICE"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("cuda: MESHRUN_CUDA_DEVICE=%q: want a device number (0, 1, ...)", v)
		}
		return n, nil
	}
	for _, name := range localRankVars {
		v := os.Getenv(name)
		if v == "" {
			continue
		}
		r, err := strconv.Atoi(v)
		if err != nil || r < 0 {
			return 0, fmt.Errorf("cuda: %s=%q is not a local rank", name, v)
		}
		n, err := DeviceCount()
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, fmt.Errorf("cuda: the driver sees no GPU")
		}
		return r % n, nil
	}
	return 0, nil
}

// LocalRankSet says whether a launcher set this process's local rank (one
// of localRankVars), which then chooses its GPU (ChooseDevice).
func LocalRankSet() bool {
	for _, name := range localRankVars {
		if os.Getenv(name) != "" {
			return true
		}
	}
	return false
}
