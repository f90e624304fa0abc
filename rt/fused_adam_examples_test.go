package rt

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/meshrun/meshrun/lang"
	"github.com/meshrun/meshrun/lower"
	"github.com/stretchr/testify/require"
)

// TestFusedAdamOnShippedExamples: on every shipped training example, the
// Adam fusion changes no bit of two training steps, raises no rank's plan
// peak (device or host), and each fused run's measured peaks equal its
// plan's.
func TestFusedAdamOnShippedExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/train/*.mesh")
	require.NoError(t, err)
	more, err := filepath.Glob("../examples/train/*/*.mesh")
	require.NoError(t, err)
	for _, f := range append(files, more...) {
		g, _, err := lang.CheckFile(f, lang.CheckOptions{})
		require.NoError(t, err, f)
		if g.Train == nil {
			continue
		}
		g.Train.Steps = min(g.Train.Steps, 2)
		run := func(noFuse bool) (*lower.Plan, *TrainResult) {
			p, err := lower.Lower(g, lower.Options{Verify: true, NoFuseAdam: noFuse})
			require.NoError(t, err, f)
			res, err := Train(context.Background(), p, Options{}, TrainConfig{})
			require.NoError(t, err, f)
			return p, res
		}
		fp, fused := run(false)
		pp, plain := run(true)
		for r := range pp.Peak {
			require.LessOrEqual(t, fp.Peak[r], pp.Peak[r], "%s: rank %d's peak grew", f, r)
			if pp.HostPeak != nil {
				require.LessOrEqual(t, fp.HostPeak[r], pp.HostPeak[r], "%s: rank %d's host peak grew", f, r)
			}
		}
		requireSameTraining(t, plain, fused, f)
		for _, d := range fused.Last.Devices {
			require.Equal(t, fp.Peak[d.Device], d.Peak, "%s: rank %d's measured peak", f, d.Device)
			if fp.HostPeak != nil {
				require.Equal(t, fp.HostPeak[d.Device], d.HostPeak, "%s: rank %d's measured host peak", f, d.Device)
			}
		}
		t.Logf("%s: peaks fused %v unfused %v", f, fp.Peak[:min(4, len(fp.Peak))], pp.Peak[:min(4, len(pp.Peak))])
	}
}
