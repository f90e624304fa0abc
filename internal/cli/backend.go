package cli

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/meshrun/meshrun/cuda"
	"github.com/meshrun/meshrun/ir"
	"github.com/meshrun/meshrun/rt"
)

// --backend chooses the device every rank of this process runs its
// kernels on: cpu (the default; the launcher gives each rank its own CPU
// backend), cuda (one GPU, cuda.ChooseDevice's: $MESHRUN_CUDA_DEVICE, or
// under a launcher the local rank modulo the GPUs, else 0; shared by every
// rank of the process: several logical devices on one GPU) or auto (cuda when a GPU can be opened,
// else cpu, saying why). The GPU is opened before the run starts, so a
// machine without a driver fails at once with the library search's
// one-line message. --tf32 turns on the GPU's TF32 matmuls
// (cuda.Backend.SetTF32); with --backend cpu it is a usage error, and
// check then compares f32 results at TF32's resolution (checkTolerance).

func (c *common) registerBackend(fs *flag.FlagSet) {
	fs.StringVar(&c.backend, "backend", "cpu", "where kernels run: cpu, cuda (GPU $MESHRUN_CUDA_DEVICE, or the local rank's, or 0) or auto (cuda when a GPU is usable)")
	fs.BoolVar(&c.tf32, "tf32", false, "on the GPU, f32 matmuls on the tensor cores in TF32 (operands rounded to 10 mantissa bits, f32 sums), as PyTorch's allow_tf32; needs --backend cuda or auto")
}

func validBackend(b string) bool { return b == "" || b == "cpu" || b == "cuda" || b == "auto" }

// openBackend makes the backend --backend names; nil is the launcher's
// default CPU backends. Fallback notices of the CUDA backend (ops it has
// no kernel for) go to notify.
func (c *common) openBackend(notify io.Writer) (rt.Backend, error) {
	if c.backend != "cuda" && c.backend != "auto" {
		return nil, nil
	}
	dev, err := cuda.ChooseDevice()
	var be *cuda.Backend
	if err == nil {
		be, err = cuda.NewBackend(dev, notify)
	}
	switch {
	case err != nil && c.backend == "auto":
		fmt.Fprintf(notify, "meshrun: --backend auto: running on the CPU: %v\n", err)
		if c.tf32 {
			fmt.Fprintln(notify, "meshrun: --tf32 does nothing on the CPU: its f32 matmuls are f32")
		}
		return nil, nil
	case err != nil:
		return nil, err
	}
	be.SetTF32(c.tf32)
	fmt.Fprintf(notify, "meshrun: kernels run on %s\n", be.Name())
	return be, nil
}

// localGPUs is how many GPUs the local launcher spreads n ranks over: all
// the driver sees (at most n), unless $MESHRUN_CUDA_DEVICE pins one or a
// launcher's local rank chose it (then 1). Tests replace it.
var localGPUs = func(n int) int {
	if os.Getenv("MESHRUN_CUDA_DEVICE") != "" || cuda.LocalRankSet() {
		return 1
	}
	g, err := cuda.DeviceCount()
	if err != nil {
		return 1
	}
	return max(min(g, n), 1)
}

// localBackends gives the local launcher's n ranks their GPUs when the
// machine has several: first (GPU 0, which openBackend opened) and the
// next ones, ranks blocked (ranks [i·n/g, (i+1)·n/g) on GPU i), so that
// the innermost mesh axis's groups stay on one GPU, where their
// collectives run on the device; groups across GPUs go through host
// copies. nil: every rank on first.
func (c *common) localBackends(first rt.Backend, n int, notify io.Writer) ([]rt.Backend, error) {
	be, ok := first.(*cuda.Backend)
	g := 1
	if ok && be.Device().Ordinal == 0 {
		g = localGPUs(n)
	}
	if g == 1 {
		return nil, nil
	}
	for i := len(c.moreGPUs) + 1; i < g; i++ { // opened once per command
		b, err := cuda.NewBackend(i, notify)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		b.SetTF32(c.tf32)
		c.moreGPUs = append(c.moreGPUs, b)
	}
	gpus := append([]*cuda.Backend{be}, c.moreGPUs[:g-1]...)
	out := make([]rt.Backend, n)
	for r := range out {
		out[r] = gpus[r*g/n]
	}
	for i, b := range gpus {
		fmt.Fprintf(notify, "meshrun: ranks %d-%d run on GPU %d, %s\n", (i*n+g-1)/g, ((i+1)*n+g-1)/g-1, i, b.Name())
	}
	return out, nil
}

// checkTolerance is check's tolerance for an output: rt.OutputTolerance,
// except that under --tf32 an output computed in f32 — so from f32
// matmuls, which then round their operands to TF32 — is compared as if
// computed in f16, whose unit roundoff (2⁻¹¹) TF32 shares.
func (c *common) checkTolerance(g *ir.Graph, name string, devices int) rt.Tolerance {
	if c.tf32 {
		for _, o := range g.Outputs {
			if o.Name == name && rt.ComputedIn(o.Value) == ir.F32 {
				return rt.DefaultTolerance(ir.F16, devices)
			}
		}
	}
	return rt.OutputTolerance(g, name, devices)
}
