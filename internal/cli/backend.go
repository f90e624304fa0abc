package cli

import (
	"flag"
	"fmt"
	"io"

	"github.com/meshrun/meshrun/cuda"
	"github.com/meshrun/meshrun/rt"
)

// --backend chooses the device every rank of this process runs its
// kernels on: cpu (the default; the launcher gives each rank its own CPU
// backend), cuda (one GPU, cuda.ChooseDevice's: $MESHRUN_CUDA_DEVICE, or
// under a launcher the local rank modulo the GPUs, else 0; shared by every
// rank of the process: several logical devices on one GPU) or auto (cuda when a GPU can be opened,
// else cpu, saying why). The GPU is opened before the run starts, so a
// machine without a driver fails at once with the library search's
// one-line message.

func (c *common) registerBackend(fs *flag.FlagSet) {
	fs.StringVar(&c.backend, "backend", "cpu", "where kernels run: cpu, cuda (GPU $MESHRUN_CUDA_DEVICE, or the local rank's, or 0) or auto (cuda when a GPU is usable)")
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
		return nil, nil
	case err != nil:
		return nil, err
	}
	fmt.Fprintf(notify, "meshrun: kernels run on %s\n", be.Name())
	return be, nil
}
