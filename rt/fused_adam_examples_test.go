package rt

import (
	"path/filepath"
	"testing"

	"github.com/meshrun/meshrun/lang"
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
		fp := requireFusionChangesNothing(t, g, f)
		t.Logf("%s: peaks %v", f, fp.Peak[:min(4, len(fp.Peak))])
	}
}
