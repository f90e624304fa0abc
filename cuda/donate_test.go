package cuda_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/meshrun/meshrun/rt"
)

// TestBackendDonationInTraining: the fused Adam updates of the data-parallel MLP
// (every one donated: p', m', v' written over p, m, v) run in place on
// the GPU, so every step's measured peak on every rank is the plan's,
// which counts no block for them; the training equals the CPU's running
// the same plan.
func TestBackendDonationInTraining(t *testing.T) {
	file := "../examples/train/mlp_dp.mesh"
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	p := compile(t, file, string(src), "", false)
	donating := 0
	for _, prog := range p.Exec.Programs {
		for i := range prog.Instrs {
			if prog.Instrs[i].Donate != nil {
				donating++
			}
		}
	}
	require.Positive(t, donating, "the plan donates")
	be := newBackend(t, nil)
	var peaks [][]int64
	got, err := rt.Train(context.Background(), p, rt.Options{Backend: be}, rt.TrainConfig{OnStep: func(s rt.StepInfo) error {
		row := make([]int64, len(s.Run.Devices))
		for _, d := range s.Run.Devices {
			row[d.Device] = d.Peak
		}
		peaks = append(peaks, row)
		return nil
	}})
	require.NoError(t, err)
	requireNative(t, be, file)
	require.NotEmpty(t, peaks)
	for s, row := range peaks {
		require.Equal(t, p.Peak, row, "step %d: measured peaks against the plan's", s+1)
	}
	want, err := rt.Train(context.Background(), p, rt.Options{}, rt.TrainConfig{})
	require.NoError(t, err)
	compareTraining(t, computeDType(p), got, want)
}
