package planner

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// sharedGPT is gptSource with every block naming layer 0's parameters
// (weights tied across layers, as ALBERT does).
func writeSharedGPT(t *testing.T, layers, batch int) *Program {
	src := gptSource(layers, batch)
	re := regexp.MustCompile(`x = block\(x, g\d+, c\d+, Wq\d+, Wk\d+, Wv\d+, Wo\d+, W1\d+, W2\d+\)`)
	src = re.ReplaceAllString(src, "x = block(x, g0, c0, Wq0, Wk0, Wv0, Wo0, W10, W20)")
	path := filepath.Join(t.TempDir(), "gpt.mesh")
	require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	p, err := Load(path)
	require.NoError(t, err)
	return p
}

// Blocks that share one set of weights compose up to 17% off the exact
// step on 8 pipeline stages (the tied weights live on the first stage
// that reads them and every stage's gradient of them travels there), over
// the search's 5% tolerance: such statements must not fold.
func TestFoldSharedParametersNotRepeats(t *testing.T) {
	p := writeSharedGPT(t, 6, 8)
	require.Nil(t, p.fold(2), "tied weights are not repeats")
	// untied, the same program folds
	require.NotNil(t, writeGPT(t, 6, 8).fold(2))
}
