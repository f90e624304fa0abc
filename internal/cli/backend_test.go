package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/cuda"
)

// On a machine without the CUDA driver --backend cuda fails before the run
// with the library search's one line (every file tried, and the variable
// that overrides it); auto says so and runs on the CPU.
func TestBackendCudaWithoutDriver(t *testing.T) {
	for _, v := range []string{"MESHRUN_CUDA_LIB", "MESHRUN_NVRTC_LIB", "MESHRUN_CUBLAS_LIB", "MESHRUN_CUBLASLT_LIB"} {
		t.Setenv(v, "")
	}
	if cuda.Load(cuda.Driver) == nil {
		t.Skip("this machine has a CUDA driver")
	}
	for _, cmd := range []string{"run", "train", "check", "trace"} {
		file := "../../examples/dp_mlp.mesh"
		if cmd == "train" {
			file = "../../examples/train/mlp_dp.mesh"
		}
		code, out, errs := meshrun(t, "", cmd, file, "--backend", "cuda")
		require.Equal(t, ExitUsage, code, cmd)
		require.Empty(t, out, "nothing ran")
		require.True(t, strings.HasPrefix(errs, "meshrun: --backend cuda: cuda: cannot load libcuda (CUDA driver): tried libcuda.so.1 ("), errs)
		require.True(t, strings.HasSuffix(errs, "; install it or set MESHRUN_CUDA_LIB to its file or folder\n"), errs)
		require.Equal(t, 1, strings.Count(errs, "\n"), "one line")
	}

	code, out, errs := meshrun(t, "", "run", "../../examples/dp_mlp.mesh", "--backend", "auto")
	require.Equal(t, ExitOK, code, errs)
	require.True(t, strings.HasPrefix(errs, "meshrun: --backend auto: running on the CPU: cuda: cannot load libcuda"), errs)
	require.Contains(t, out, "loss : f32[] {B} = [2.10057]")

	code, _, errs = meshrun(t, "", "run", "../../examples/dp_mlp.mesh", "--backend", "tpu")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errs, `--backend "tpu": want cpu, cuda or auto`)
}
