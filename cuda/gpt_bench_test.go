package cuda_test

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/rt"
)

// BenchmarkGPTStepOnCUDA trains the tiny GPT (examples/train/gpt/gpt.mesh,
// its 60 steps) on the backend, on its [dp=2, tp=2] mesh (every rank on
// the one GPU) and on one device, and reports each one's mean step. It is
// there to be profiled on a GPU (bench/gpu.sh: -test.cpuprofile), where a
// step of many small kernels is bound by the host's work per launch; the
// comparison with PyTorch is bench/gpu.sh's (bench/torch_gpt.py).
func BenchmarkGPTStepOnCUDA(b *testing.B) {
	file := "../examples/train/gpt/gpt.mesh"
	src, err := os.ReadFile(file)
	require.NoError(b, err)
	for _, mode := range []struct {
		name   string
		single bool
	}{{"mesh", false}, {"one_device", true}} {
		b.Run(mode.name, func(b *testing.B) {
			be := newBackend(b, &bytes.Buffer{})
			p := compile(b, file, string(src), "", mode.single)
			var steps int
			start := time.Now()
			for range b.N {
				res, err := rt.Train(context.Background(), p, rt.Options{Backend: be}, rt.TrainConfig{})
				require.NoError(b, err)
				steps += len(res.Losses)
			}
			b.ReportMetric(time.Since(start).Seconds()/float64(steps)*1e3, "ms/step")
		})
	}
}
